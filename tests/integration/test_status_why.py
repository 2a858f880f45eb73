"""`ingestd status` says why files wait: a suspended tenant (named, with the command that
ends the wait, which then takes the file at once), quarantines of the last 24 h from the
operator events, uploads still open in the spool. Real hot folders in this process with
the daemon's state file, the real `ingestd status` and `ingestd tenant` processes, real
PostgreSQL."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from ingestd.daemon.state import DaemonState
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.events.outbox import EventLog
from ingestd.sources.hotfolders import HotFolders
from ingestd.sources.sftp.in_progress import uploads_in_progress
from ingestd.sources.sftp.spool_layout import new_partial
from tests.conftest import Env, run_cli, wait_until
from tests.fixtures.files import pdf_bytes, write

LONG = 86400


@pytest.fixture
def two_folders(make_env: Any, db: Database, tenant: str, tmp_path: Path) -> Env:
    """acme (suspended) and globex (active), each with a hot folder."""
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": "globex", "status": "active"})
        tx.one(
            "tenant_set_status",
            {"name": tenant, "status": "suspended", "from_statuses": ["active"]},
        )
    for name in ("acme", "globex"):
        (tmp_path / "hot" / name).mkdir(parents=True)
    env: Env = make_env(
        watch=[
            {"path": str(tmp_path / "hot" / t), "tenant": t, "failed": str(tmp_path / "failed")}
            for t in ("acme", "globex")
        ],
        hotfolders={
            "stable_seconds": 0.5,
            "folder_check_interval": 0.5,
            "rescan_interval": LONG,
            "retry_max_delay": LONG,
        },
    )
    return env


def _documents(db: Database, tenant: str) -> int:
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT count(*) AS n FROM documents d JOIN tenants t ON t.id = d.tenant_id"
            " WHERE t.name = %(t)s",
            {"t": tenant},
        )
    return int(rows[0]["n"])


def _quarantined(db: Database) -> int:
    with db.transaction() as tx:
        rows = tx.raw("SELECT count(*) AS n FROM operator_events WHERE type = 'file.quarantined'")
    return int(rows[0]["n"])


def test_status_names_the_suspended_tenant_quarantines_and_open_uploads(
    two_folders: Env, db: Database, tmp_path: Path
) -> None:
    """A file of a suspended tenant: `status` names the tenant and `ingestd tenant
    activate`; that command takes the file within seconds (its backoff was at 30 s).
    A quarantined file is counted by reason for the last 24 h, an open upload shown."""
    env = two_folders
    waiting = write(tmp_path / "hot" / "acme" / "Antrag.pdf", pdf_bytes(seed=3101))
    write(tmp_path / "hot" / "globex" / "invoice.pdf", b"\x7fELF\x02\x01\x01" + os.urandom(4000))
    partial_dir = env.config.paths.spool / "partial"
    partial_dir.mkdir(parents=True)
    _path, fd = new_partial(partial_dir, "scan1", "")  # as an open SFTP write handle has it
    os.write(fd, b"%PDF-1.7\n" + b"x" * 991)
    os.close(fd)

    hot_db = Database(env.db_url, max_size=4).open()
    events = EventLog(hot_db, env.config.paths.state_dir)
    hot = HotFolders(env.config, make_intake(env.config, hot_db), events=events)
    state = DaemonState(
        hot_db,
        env.config.paths.state_dir,
        {
            "hotfolders": hot.status_snapshot,
            "uploads": lambda: uploads_in_progress(
                env.config.paths.spool, env.config.sftp.temp_names
            ),
        },
    )
    hot.start()
    try:
        # Backoff 2, 4, 8, 16 s, then at most 30 s for a tenant: the next try is 30 s away.
        wait_until(lambda: _quarantined(db) == 1, timeout=60)
        wait_until(lambda: getattr(hot.files.pending.get(waiting), "attempts", 0) >= 5, 120)
        state.probe()
        state.write()
        proc = run_cli(env, "status", "--json")
        assert proc.returncode == 0, proc.stderr
        why = json.loads(proc.stdout)["why"]
        assert why["tenants_not_active"] == [
            {
                "tenant": "acme",
                "status": "suspended",
                "folder": str(tmp_path / "hot" / "acme"),
                "files": 1,
                "fix": "ingestd tenant activate acme",
            }
        ]
        [file] = why["waiting"]["files"]
        assert (file["path"], file["cause"], file["tenant_status"]) == (
            str(waiting),
            "tenant_inactive",
            "suspended",
        )
        assert file["fix"] == "ingestd tenant activate acme"
        [refused] = why["refusals_24h"]
        assert (refused["tenant"], refused["outcome"], refused["reason"], refused["n"]) == (
            "globex",
            "quarantined",
            "bad_type",
            1,
        )
        uploads = why["uploads"]
        assert uploads["open_total"] == 1 and uploads["open_bytes"] == 1000
        assert uploads["open"][0]["account"] == "scan1"
        plain = run_cli(env, "status").stdout
        assert (
            f"WAITING 1 file(s) in {tmp_path / 'hot' / 'acme'}: tenant acme is suspended" in plain
        )
        assert "    fix: ingestd tenant activate acme" in plain
        assert "  globex: 1 quarantined (bad_type)" in plain
        assert "uploads in progress: 1 open (1000 bytes so far)" in plain
        assert "  scan1: 1000 bytes since " in plain

        activated = run_cli(env, "tenant", "activate", "acme")
        assert activated.returncode == 0, activated.stderr
        t0 = time.monotonic()
        wait_until(lambda: _documents(db, "acme") == 1, timeout=15)
        assert time.monotonic() - t0 < 20
        assert not waiting.exists()
    finally:
        hot.stop()
        hot_db.close()
