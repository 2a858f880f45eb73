"""`ingestd status` says why a file waits, and a fixed cause ends the wait at once: a real
`ingestd serve` without root's power over file modes (setpriv drops CAP_DAC_*), a real
PostgreSQL through a forwarded socket, real folders, a real chmod."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ingestd.db.database import Database
from ingestd.errors import ExitCode
from tests.conftest import read_events, wait_until, write_config
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.sockproxy import forwarded_socket_dir

# Root without the capabilities that let it read and enter whatever it likes: the file
# modes apply to it as to the service user.
WITHOUT_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
CLI = [sys.executable, "-m", "ingestd.cli"]
# Far longer than any wait below: a file taken in time was taken because of the fix.
LONG = 86400


def _config(root: Path, url: str, hot: Path) -> Path:
    cfg = root / "ingestd.toml"
    write_config(
        cfg,
        {
            "database": {"url": url, "connect_timeout": 2},
            "paths": {
                "state_dir": str(root / "state"),
                "archive": str(root / "archive"),
                "derived": str(root / "derived"),
                "spool": str(root / "spool"),
            },
            "log": {"format": "json", "level": "info"},
            "metrics": {"listen": "127.0.0.1:0"},
            "hotfolders": {
                "stable_seconds": 0.5,
                "folder_check_interval": 0.5,
                "rescan_interval": LONG,
                "retry_max_delay": LONG,
            },
            "watch": [
                {"path": str(hot), "tenant": "acme"},
                {"path": str(root / "read-only"), "tenant": "acme"},
            ],
        },
    )
    return cfg


@contextlib.contextmanager
def _daemon_without_dac(root: Path, db_url: str, hot: Path) -> Iterator[Path]:
    """``ingestd serve`` as root without CAP_DAC_*; yields its config (log in serve.log)."""
    pgrun = Path(re.search(r"host=(\S+)", db_url).group(1))  # type: ignore[union-attr]
    port = re.search(r"port=(\d+)", db_url).group(1)  # type: ignore[union-attr]
    with forwarded_socket_dir(pgrun / f".s.PGSQL.{port}") as sockets:
        cfg = _config(root, db_url.replace(str(pgrun), str(sockets)), hot)
        log_path = root / "serve.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(
                [*WITHOUT_DAC, *CLI, "serve", "--config", str(cfg)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=root,
            )
            try:
                wait_until(
                    lambda: read_events(log_path, "daemon.ready") or proc.poll() is not None,
                    timeout=90,
                )
                assert proc.poll() is None, log_path.read_text()
                yield cfg
            finally:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=60) == 0, log_path.read_text()


def _status(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "status", "--config", str(cfg), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _why(cfg: Path) -> dict[str, Any]:
    done = _status(cfg, "--json")
    assert done.stdout, done.stderr
    why: dict[str, Any] = json.loads(done.stdout)["why"]
    return why


def _documents(db: Database) -> list[str]:
    with db.transaction() as tx:
        rows = tx.raw("SELECT original_filename FROM documents ORDER BY original_filename")
    return [str(r["original_filename"]) for r in rows]


def _attempts(log_path: Path, filename: str) -> int:
    return max(
        (e["attempt"] for e in read_events(log_path, "watch.retry") if e["filename"] == filename),
        default=0,
    )


def test_files_blocked_by_modes_are_named_with_the_fix_and_taken_at_once_when_fixed(
    tmp_path: Path, db_url: str, db: Database, tenant: str
) -> None:
    """A hot folder of mode 0500, a sub-folder of mode 0000 and a file of mode 0000:
    `status` names each with the
    errno text, the owner and mode and the chmod that fixes it (also while the database is
    down); after the chmod both are archived within seconds, though the file's backoff was
    at 32 s and the next rescan a day away; `status` then shows neither."""
    hot = tmp_path / "hot"
    locked = hot / "locked"
    write(locked / "Brief.pdf", pdf_bytes(seed=3001))
    private = write(hot / "Privat.pdf", pdf_bytes(seed=3002))
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o500)
    locked.chmod(0o000)
    private.chmod(0o000)
    log_path = tmp_path / "serve.log"
    try:
        with _daemon_without_dac(tmp_path, db_url, hot) as cfg:
            wait_until(lambda: _why(cfg)["unlistable"] and _why(cfg)["waiting"]["total"], 60)
            why = _why(cfg)
            [sub] = why["unlistable"]
            assert sub["path"] == str(locked) and sub["error"] == "Permission denied"
            assert sub["folder_owner"] == "root:root d---------"
            assert sub["fix"] == f"chmod u+rx {locked}"
            [waiting] = why["waiting"]["files"]
            assert waiting["path"] == str(private) and waiting["cause"] == "source"
            assert (
                waiting["blocked_by"] == str(private) and waiting["fix"] == f"chmod u+r {private}"
            )
            assert "Permission denied" in waiting["detail"]
            [folder] = why["folders"]
            assert (folder["folder"], folder["cannot"], folder["error"]) == (
                str(read_only),
                ["remove files from"],
                "Permission denied",
            )
            assert folder["folder_owner"] == "root:root dr-x------"
            assert folder["fix"] == f"chmod u+rwx {read_only}"
            plain = _status(cfg).stdout
            assert f"FOLDER {read_only} [acme]: the daemon cannot remove files from it" in plain
            assert f"    fix: chmod u+rwx {read_only}" in plain
            assert f"SUB-FOLDER {locked} [acme]: the daemon cannot list it" in plain
            assert f"    fix: chmod u+rx {locked}" in plain
            assert f"RETRYING {private} [acme]: source" in plain

            # The database down: what the daemon's state file knows is still said.
            down = cfg.with_name("down.toml")
            down.write_text(
                re.sub(r'url = "[^"]*"', 'url = "host=/nonexistent port=1"', cfg.read_text())
            )
            outage = _status(down, "--json")
            assert outage.returncode == ExitCode.degraded, outage.stderr
            assert json.loads(outage.stdout)["why"]["unlistable"][0]["path"] == str(locked)
            assert f"fix: chmod u+rx {locked}" in _status(down).stdout

            # Backoff 2, 4, 8, 16 s: after the fifth attempt the next one is 32 s away.
            wait_until(lambda: _attempts(log_path, "Privat.pdf") >= 5, timeout=150)
            assert _documents(db) == []
            locked.chmod(0o755)
            private.chmod(0o644)
            read_only.chmod(0o755)
            fixed_at = time.monotonic()
            wait_until(lambda: _documents(db) == ["Brief.pdf", "Privat.pdf"], timeout=20)
            assert time.monotonic() - fixed_at < 25
            assert read_events(log_path, "watch.access_changed")
            wait_until(
                lambda: (
                    (w := _why(cfg))["unlistable"] == w["folders"] == []
                    and w["waiting"]["total"] == 0
                ),
                timeout=30,
            )
            assert "RETRYING" not in _status(cfg).stdout
    finally:
        for path in (locked, private):  # pytest must be able to clean up
            if path.exists():
                path.chmod(0o755)
