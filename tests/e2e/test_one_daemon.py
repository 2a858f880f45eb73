"""One `ingestd serve` per state directory and spool, and the one-line refusals of a start.

Real `ingestd` processes: a second daemon on the same state directory or spool exits 12
with "already running (pid N)" whatever its ports, and the first keeps serving; a taken
SFTP port is one line naming it and exit 13; an exception nothing expected (a buggy
--plugin) is one line and exit 15, never a traceback and exit 1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from ingestd.errors import ExitCode
from ingestd.passwords import hash_password
from tests.conftest import write_config
from tests.e2e.test_serve_sftp import Serve, _free_port

CLI = [sys.executable, "-m", "ingestd.cli"]
# The daemon comes up without its database (uploads are spooled): none is needed here.
NO_DATABASE = "host=127.0.0.1 port=1 dbname=ingestd"


def _config(
    path: Path, port: int, *, state: Path, spool: Path, log_format: str = "json", **extra: Any
) -> Path:
    root = path.parent
    write_config(
        path,
        {
            "database": {"url": NO_DATABASE, "connect_timeout": 1},
            "paths": {
                "state_dir": str(state),
                "spool": str(spool),
                "archive": str(root / "archive"),
            },
            "log": {"format": log_format},
            "metrics": {"enabled": False},
            "sftp": {"listen": f"127.0.0.1:{port}", "processes": 1},
            "sftp.accounts": [
                {"username": "scan1", "tenant": "acme", "password_hash": hash_password("pw", 4)}
            ],
            **extra,
        },
    )
    return path


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def _one_error(stderr: str) -> dict[str, Any]:
    """The one cli.error line a refused start writes (every line JSON, no traceback; the
    daemon's own log lines before it, such as its database being down, may come too)."""
    assert "Traceback" not in stderr, stderr
    lines = [json.loads(text) for text in stderr.splitlines()]
    [line] = [e for e in lines if e["event"] == "cli.error"]
    return dict(line)


def _keyscan(port: int) -> str:
    """The host key lines ssh-keyscan reads from 127.0.0.1:``port`` ("" if none)."""
    return subprocess.run(
        ["ssh-keyscan", "-T", "30", "-p", str(port), "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout


def test_second_daemon_on_the_same_state_or_spool_exits_12_naming_the_first(tmp_path: Path) -> None:
    """A second serve on the same state directory (another port), then one on another state
    directory but the same spool: each exits 12 in one line naming the first's pid; the
    first still serves, stops cleanly, and a daemon started after it runs."""
    state, spool = tmp_path / "state", tmp_path / "spool"
    first_port, other_port = _free_port(), _free_port()
    first = Serve(tmp_path, _config(tmp_path / "a.toml", first_port, state=state, spool=spool))
    first.start()
    try:
        seconds = (("same-state.toml", state), ("same-spool.toml", tmp_path / "s2"))
        for name, second_state in seconds:
            cfg = _config(tmp_path / name, other_port, state=second_state, spool=spool)
            second = _run("serve", "--config", str(cfg))
            assert second.returncode == ExitCode.already_running == 12, second.stderr
            error = _one_error(second.stderr)
            assert f"already running (pid {first.proc.pid})" in error["error"], error
            assert error["exit_code"] == 12
            assert "ssh-" in _keyscan(first_port)  # the first one still answers
        assert first.proc.poll() is None
    finally:
        assert first.wait() == 0
    # The lock goes with the process: the next daemon on the same directories starts.
    again = Serve(tmp_path, _config(tmp_path / "b.toml", other_port, state=state, spool=spool))
    again.start()
    assert again.wait() == 0


def test_second_daemon_refused_even_after_the_first_was_killed_and_restarted(
    tmp_path: Path,
) -> None:
    """SIGKILL leaves no stale lock: the restarted daemon starts, and a second one beside
    it is refused with the new pid."""
    state, spool = tmp_path / "state", tmp_path / "spool"
    cfg = _config(tmp_path / "a.toml", _free_port(), state=state, spool=spool)
    serve = Serve(tmp_path, cfg)
    serve.start()
    assert serve.wait(signal.SIGKILL) == -signal.SIGKILL
    serve.start()
    try:
        other = _config(tmp_path / "b.toml", _free_port(), state=state, spool=spool)
        second = _run("serve", "--config", str(other))
        assert second.returncode == 12, second.stderr
        assert f"already running (pid {serve.proc.pid})" in _one_error(second.stderr)["error"]
    finally:
        assert serve.wait() == 0


def test_sftp_port_in_use_is_one_line_and_exit_13(tmp_path: Path) -> None:
    """A port another process listens on: one line naming address and port, exit 13, no
    traceback, in JSON and on a console."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        for fmt in ("json", "console"):
            cfg = _config(
                tmp_path / f"{fmt}.toml",
                port,
                state=tmp_path / f"state-{fmt}",
                spool=tmp_path / f"spool-{fmt}",
                log_format=fmt,
            )
            result = _run("serve", "--config", str(cfg))
            assert result.returncode == ExitCode.address_in_use == 13, result.stderr
            expected = f"cannot listen on 127.0.0.1:{port} (sftp.listen): address already in use"
            if fmt == "json":
                assert expected in _one_error(result.stderr)["error"]
            else:
                assert "Traceback" not in result.stderr, result.stderr
                lines = [line for line in result.stderr.splitlines() if "ingestd:" in line]
                assert len(lines) == 1 and expected in lines[0], result.stderr


def test_an_unexpected_exception_is_one_line_and_exit_15(tmp_path: Path) -> None:
    """A --plugin that raises ZeroDivisionError at import (a bug nothing names): exit 15
    and one line (JSON or plain) naming the exception, never exit 1 or a traceback; with
    INGESTD_DEBUG=1 the traceback too."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "buggy_kinds.py").write_text('"""A plugin with a bug."""\n\nRATE = 1 / 0\n')
    env = {"PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")])}
    for fmt in ("json", "console"):
        cfg = _config(
            tmp_path / f"{fmt}.toml",
            _free_port(),
            state=tmp_path / "state",
            spool=tmp_path / "spool",
            log_format=fmt,
        )
        args = ("worker", "--config", str(cfg), "--plugin", "buggy_kinds")
        result = _run(*args, env=env)
        assert result.returncode == ExitCode.internal == 15, result.stderr
        if fmt == "json":
            error = _one_error(result.stderr)
            assert error["exit_code"] == 15
            assert error["error"] == "internal error: ZeroDivisionError: division by zero"
        else:
            assert result.stderr == (
                "ingestd: internal error: ZeroDivisionError: division by zero "
                "(INGESTD_DEBUG=1 shows the traceback)\n"
            )
        debug = _run(*args, env={**env, "INGESTD_DEBUG": "1"})
        assert debug.returncode == 15
        assert "Traceback" in debug.stderr and "buggy_kinds.py" in debug.stderr
