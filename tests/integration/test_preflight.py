"""What a start would find, asked before it matters: `check-config --online` and `serve`
check the S3 archive (bucket there, Object Lock on, endpoint answering) and warn about
tenants the database does not know, hot folders that do not exist and job kinds no pool
serves. Real moto S3 server, real PostgreSQL, the CLI and the daemon as real processes."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ingestd.db.database import Database
from tests.conftest import Env, read_events, run_cli, wait_until
from tests.fixtures.s3 import S3Endpoint, archive_section

_QUIET = {"metrics": {"enabled": False}}


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _s3_env(make_env: Any, tmp_path: Path, s3: S3Endpoint, **s3_overrides: Any) -> Env:
    section = archive_section(s3, tmp_path)
    section["s3"].update(s3_overrides)
    env: Env = make_env(archive=section, **_QUIET)
    return env


def _serve(env: Env, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`ingestd serve` expected to refuse its start: it must end by itself."""
    return subprocess.run(
        [sys.executable, "-m", "ingestd.cli", "serve", "--config", str(env.config_path)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one cli.error line the refusal logs (JSON logs), its message."""
    errors = [json.loads(x) for x in proc.stderr.splitlines() if '"cli.error"' in x]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return str(errors[0]["error"])


def test_a_locked_bucket_is_ok_online(
    make_env: Any, tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    """A bucket with Object Lock on a live endpoint: check-config --online says OK, exit 0."""
    env = _s3_env(make_env, tmp_path, s3_endpoint)
    proc = run_cli(env, "check-config", "--online")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith(": OK"), proc.stdout


def test_a_missing_bucket_is_refused(
    make_env: Any, tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    """A bucket that does not exist: check-config --online exits 3 naming it, serve
    refuses to start with exit 3 and one line (once: OK, and the first upload failed)."""
    env = _s3_env(make_env, tmp_path, s3_endpoint, bucket="no-such-bucket-here")
    proc = run_cli(env, "check-config", "--online")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "archive.s3.bucket: s3://no-such-bucket-here" in proc.stdout
    assert "does not exist" in proc.stdout
    assert run_cli(env, "check-config").returncode == 0  # offline: the file itself is fine
    served = _serve(env)
    assert served.returncode == 3, served.stderr
    assert "does not exist" in _error_line(served)


def test_a_bucket_without_object_lock_is_refused(
    make_env: Any, tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    """A bucket made without Object Lock (originals would not be WORM): check-config
    --online exits 3, serve refuses to start with exit 3, each naming Object Lock."""
    plain = s3_endpoint.bucket(locked=False)
    env = _s3_env(make_env, tmp_path, s3_endpoint, bucket=plain)
    proc = run_cli(env, "check-config", "--online", "--json")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    [result] = json.loads(proc.stdout)
    assert not result["ok"]
    assert any(f"s3://{plain}" in p and "no Object Lock" in p for p in result["problems"])
    served = _serve(env)
    assert served.returncode == 3, served.stderr
    assert "no Object Lock" in _error_line(served)


def test_an_endpoint_that_is_down_is_named_soon(
    make_env: Any, tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    """An endpoint on a closed port: check-config --online exits 3 within seconds naming
    the endpoint; serve logs archive.unreachable and starts anyway, as with the database
    down (uploads are spooled, hot-folder files wait)."""
    down = f"http://127.0.0.1:{_closed_port()}"
    env = _s3_env(make_env, tmp_path, s3_endpoint, endpoint=down)
    t0 = time.monotonic()
    proc = run_cli(env, "check-config", "--online")
    assert time.monotonic() - t0 < 60  # a closed port answers at once; a bound, not a timing
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "archive.s3.endpoint: s3://" in proc.stdout and "does not answer" in proc.stdout
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "ingestd.cli", "serve", "--config", str(env.config_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: read_events(log, "daemon.ready"), timeout=60)
            [event] = read_events(log, "archive.unreachable")
            assert down in event["problem"]
        finally:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=60) == 0


@pytest.fixture
def gaps(make_env: Any, tmp_path: Path, db: Database, tenant: str) -> Env:
    """A config with a hot folder that does not exist, one of a tenant the database does
    not know, and a pool that owns 'acme' but runs only analyze-document."""
    present = tmp_path / "hot" / "acme"
    present.mkdir(parents=True)
    env: Env = make_env(
        watch=[
            {"path": str(tmp_path / "hot" / "missing"), "tenant": "acme"},
            {"path": str(present), "tenant": "ghost"},
        ],
        **_QUIET,
    )
    text = env.config_path.read_text()
    text += '\n[[worker.pools]]\nname = "ocr"\ntenants = ["acme"]\nkinds = ["analyze-document"]\n'
    env.config_path.write_text(text)
    env.reload()
    return env


def test_check_config_warns_about_what_serves_nothing(gaps: Env, tmp_path: Path) -> None:
    """Missing hot folder, kinds of a dedicated tenant no pool runs: warnings (exit 0)
    offline; --online adds the tenant the database does not know."""
    offline = run_cli(gaps, "check-config")
    assert offline.returncode == 0, offline.stdout + offline.stderr
    text = offline.stdout
    assert f"warning: watch[0].path: {tmp_path / 'hot' / 'missing'} does not exist" in text
    assert "tenant 'acme' is dedicated to pool 'ocr', which runs only analyze-document" in text
    assert "provision-tenant" in text and "deliver-webhook" in text
    assert "ghost" not in text  # the database is asked only --online
    online = run_cli(gaps, "check-config", "--online", "--json")
    assert online.returncode == 0, online.stdout + online.stderr
    [result] = json.loads(online.stdout)
    assert result["ok"]
    ghost = [w for w in result["warnings"] if "'ghost'" in w]
    assert len(ghost) == 1 and ghost[0].startswith("watch[1].tenant: tenant 'ghost' does not")
    assert not any("'acme' does not exist" in w for w in result["warnings"])


def test_serve_logs_the_same_warnings_at_start(gaps: Env, tmp_path: Path) -> None:
    """The daemon's start logs each warning (config.warning), the unknown tenant once the
    database answered, and runs."""
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "ingestd.cli", "serve", "--config", str(gaps.config_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: read_events(log, "daemon.ready"), timeout=60)

            def warned() -> list[str]:
                return [e["warning"] for e in read_events(log, "config.warning")]

            wait_until(lambda: any("'ghost'" in w for w in warned()), timeout=60)
            lines = warned()
            assert any("watch[0].path" in w and "does not exist" in w for w in lines)
            assert any("dedicated to pool 'ocr'" in w for w in lines)
        finally:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=60) == 0
