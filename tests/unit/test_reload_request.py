"""Finding the running `ingestd serve` from its lock file and asking it to reload: a stale
or reused pid is not signalled, a live daemon gets SIGHUP, none running is said so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ingestd.ops.reload_request import daemon_pid, request_reload
from tests.conftest import wait_until

# A stand-in daemon: a process whose command line says `ingestd ... serve`, which
# records each SIGHUP in a file.
_STAND_IN = """
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
signal.signal(signal.SIGHUP, lambda *_: out.write_text(out.read_text() + "HUP\\n"))
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


def test_a_running_daemon_gets_sighup(tmp_path: Path) -> None:
    """The pid in serve.lock of a live `ingestd ... serve` process gets one SIGHUP."""
    record = tmp_path / "signals"
    proc = subprocess.Popen([sys.executable, "-c", _STAND_IN, str(record), "ingestd", "serve"])
    try:
        wait_until(record.exists, timeout=30)
        (tmp_path / "serve.lock").write_text(f"{proc.pid}\n")
        assert daemon_pid(tmp_path) == proc.pid
        said = request_reload(tmp_path)
        assert said == f"asked ingestd serve (pid {proc.pid}) to reload (SIGHUP)"
        wait_until(lambda: record.read_text() == "HUP\n", timeout=30)
    finally:
        proc.kill()
        proc.wait(timeout=30)
