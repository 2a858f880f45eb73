"""Finding the running `ingestd serve` from its lock file and asking it to reload: a stale
or reused pid is not signalled, a live daemon gets SIGHUP and the command waits for its
record of the reload (done, or refused with the problems), none running is said so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingestd.daemon.reload_request import daemon_pid, request_reload
from tests.conftest import wait_until

# A stand-in daemon: a process whose command line says `ingestd ... serve`, which
# records each SIGHUP in a file and, as the daemon does, with record_reload (ok, or
# refused with a problem when argv[3] says so).
_STAND_IN = """
import signal, sys, time
from pathlib import Path
from ingestd.daemon.reload_request import record_reload
out, state, refuse = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "refuse"
count = 0
def hup(*_):
    global count
    count += 1
    out.write_text(out.read_text() + "HUP\\n")
    record_reload(state, count, ["watch[0].path: no such folder"] if refuse else None)
signal.signal(signal.SIGHUP, hup)
out.write_text("")
time.sleep(120)
"""


def test_no_lock_or_a_foreign_pid_is_not_running(tmp_path: Path) -> None:
    """No lock file, a pid of a process that is not `ingestd serve`, or a pid that is gone:
    not running, and the message says the change takes effect at start."""
    assert daemon_pid(tmp_path) is None
    (tmp_path / "serve.lock").write_text(f"{os.getpid()}\n")  # pytest, not ingestd serve
    assert daemon_pid(tmp_path) is None
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (tmp_path / "serve.lock").write_text(f"{gone}\n")
    assert daemon_pid(tmp_path) is None
    assert "not running; the change takes effect at its start" in request_reload(tmp_path)


@pytest.mark.parametrize("outcome", ["accept", "refuse"])
def test_a_running_daemon_gets_sighup_and_is_waited_for(tmp_path: Path, outcome: str) -> None:
    """The pid in serve.lock of a live `ingestd ... serve` gets one SIGHUP per request, and
    the answer is the daemon's own record: reloaded, or refused with its problem."""
    record = tmp_path / "signals"
    proc = subprocess.Popen(
        [sys.executable, "-c", _STAND_IN, str(record), str(tmp_path), outcome, "ingestd", "serve"]
    )
    try:
        wait_until(record.exists, timeout=30)
        (tmp_path / "serve.lock").write_text(f"{proc.pid}\n")
        assert daemon_pid(tmp_path) == proc.pid
        for n in (1, 2):
            said = request_reload(tmp_path)
            assert record.read_text() == "HUP\n" * n
            if outcome == "accept":
                assert said == f"ingestd serve (pid {proc.pid}) reloaded its config (SIGHUP)"
            else:
                assert said == (
                    f"ingestd serve (pid {proc.pid}) refused the new config and keeps the old "
                    "one (SIGHUP): watch[0].path: no such folder"
                )
    finally:
        proc.kill()
        proc.wait(timeout=30)
