"""`ingestd serve` as a real process: database outages, SIGHUP reload, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestd.db.database import Database
from ingestd.db.pgcluster import EmbeddedPostgres
from ingestd.db.schema import migrate
from tests.conftest import private_cluster, read_events, wait_until, write_config
from tests.fixtures.files import pdf_bytes, write


@pytest.fixture
def own_cluster() -> Iterator[EmbeddedPostgres]:
    """A private cluster this test may stop and start at will."""
    with private_cluster(5433) as cluster:
        with Database(cluster.conninfo) as db:
            migrate(db)
            with db.transaction() as tx:
                tx.one("tenant_insert", {"name": "acme", "status": "active"})
                tx.one("tenant_insert", {"name": "globex", "status": "active"})
        yield cluster


class Daemon:
    def __init__(self, root: Path, conninfo: str, watches: list[dict[str, Any]]) -> None:
        self.root = root
        self.conninfo = conninfo
        self.config = root / "ingestd.toml"
        self.write_config(watches)
        self.log = open(root / "serve.log", "w+b")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ingestd.cli", "serve", "--config", str(self.config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: self.events("daemon.ready"), timeout=60)

    def write_config(self, watches: list[dict[str, Any]]) -> None:
        write_config(
            self.config,
            {
                "database": {"url": self.conninfo, "connect_timeout": 2},
                "paths": {"state_dir": str(self.root / "state"), "spool": str(self.root / "spool")},
                "log": {"format": "json", "level": "info"},
                "hotfolders": {"stable_seconds": 0.5, "retry_max_delay": 3, "workers": 2},
                "watch": watches,
            },
        )

    def events(self, name: str) -> list[dict[str, Any]]:
        return read_events(self.root / "serve.log", name)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.log.close()
        return code


def _count(conninfo: str, sql: str = "SELECT count(*) AS n FROM documents") -> int:
    with Database(conninfo) as db, db.transaction() as tx:
        return int(tx.raw(sql)[0]["n"])


def test_database_down_while_files_arrive(own_cluster: EmbeddedPostgres, tmp_path: Path) -> None:
    """Postgres down, 100 files arrive, back 20 s later: all 100, no dups, none failed."""
    hot = tmp_path / "hot"
    hot.mkdir()
    daemon = Daemon(tmp_path, own_cluster.conninfo, [{"path": str(hot), "tenant": "acme"}])
    try:
        own_cluster.stop("fast")
        for i in range(100):
            write(hot / f"scan-{i:03d}.pdf", pdf_bytes(seed=i))
        time.sleep(20)  # the outage the acceptance names
        assert len(list(hot.iterdir())) == 100  # nothing moved or lost meanwhile
        own_cluster.start()
        wait_until(lambda: _count(own_cluster.conninfo) == 100, timeout=120, interval=0.5)
        wait_until(lambda: not any(hot.iterdir()), timeout=30)
        distinct = "SELECT count(DISTINCT sha256) AS n FROM documents"
        assert _count(own_cluster.conninfo, distinct) == 100
        assert _count(own_cluster.conninfo, distinct) == 100
        failed = tmp_path / "state" / "failed"
        assert not failed.exists() or not any(failed.rglob("*"))
        assert daemon.events("watch.retry"), "the outage should have been retried, not refused"
    finally:
        assert daemon.stop() == 0


def test_sighup_adds_a_hot_folder_and_sigterm_stops(
    own_cluster: EmbeddedPostgres, tmp_path: Path
) -> None:
    """A [[watch]] added to the config works after SIGHUP without a restart; SIGTERM exits 0."""
    first, second = tmp_path / "hot-acme", tmp_path / "hot-globex"
    first.mkdir()
    second.mkdir()
    daemon = Daemon(tmp_path, own_cluster.conninfo, [{"path": str(first), "tenant": "acme"}])
    try:
        write(first / "a.pdf", pdf_bytes(seed=1))
        wait_until(lambda: _count(own_cluster.conninfo) == 1)
        daemon.write_config(
            [
                {"path": str(first), "tenant": "acme"},
                {"path": str(second), "tenant": "globex", "tags": ["Einkauf"]},
            ]
        )
        pid = daemon.proc.pid
        os.kill(pid, signal.SIGHUP)
        wait_until(lambda: daemon.events("daemon.reloaded"), timeout=30)
        write(second / "b.pdf", pdf_bytes(seed=2))
        wait_until(lambda: _count(own_cluster.conninfo) == 2)
        q = (
            "SELECT count(*) AS n FROM documents d JOIN tenants t ON t.id = d.tenant_id "
            "WHERE t.name = 'globex'"
        )
        assert _count(own_cluster.conninfo, q) == 1
        assert daemon.proc.pid == pid and daemon.proc.poll() is None
    finally:
        assert daemon.stop() == 0
    assert daemon.events("daemon.stopped")


def test_broken_config_on_sighup_keeps_the_old_one(
    own_cluster: EmbeddedPostgres, tmp_path: Path
) -> None:
    """A reload with an invalid config is logged and the daemon keeps serving the old one."""
    hot = tmp_path / "hot"
    hot.mkdir()
    daemon = Daemon(tmp_path, own_cluster.conninfo, [{"path": str(hot), "tenant": "acme"}])
    try:
        daemon.config.write_text(daemon.config.read_text() + "\n[intake]\nduplicates = 'keep'\n")
        daemon.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: daemon.events("daemon.reload_failed"), timeout=30)
        write(hot / "still.pdf", pdf_bytes(seed=3))
        wait_until(lambda: _count(own_cluster.conninfo) == 1)
    finally:
        assert daemon.stop() == 0


def test_status_with_the_database_down_shows_what_waits(
    own_cluster: EmbeddedPostgres, tmp_path: Path
) -> None:
    """`ingestd status` with Postgres down: the hot-folder backlog from disk, 'database:
    DOWN since ...' as the daemon saw it, exit code 9 (degraded); no traceback."""
    import json

    from ingestd.daemon.state import read_state

    hot = tmp_path / "hot"
    hot.mkdir()
    daemon = Daemon(tmp_path, own_cluster.conninfo, [{"path": str(hot), "tenant": "acme"}])
    try:
        own_cluster.stop("fast")
        for i in range(3):
            write(hot / f"scan-{i}.pdf", pdf_bytes(seed=40 + i))
        state_dir = tmp_path / "state"
        wait_until(
            lambda: ((read_state(state_dir) or {}).get("database") or {}).get("up") is False,
            timeout=60,
        )
        argv = [sys.executable, "-m", "ingestd.cli", "status", "--config", str(daemon.config)]
        proc = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 9, proc.stderr
        report = json.loads(proc.stdout)
        assert report["database"]["up"] is False and report["database"]["down_since"]
        assert [(h["folder"], h["files"]) for h in report["hotfolders"]] == [(str(hot), 3)]
        assert report["daemon"]["pid"] == daemon.proc.pid
        text = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert text.returncode == 9
        assert "database: DOWN since " in text.stdout
        assert f"hot folder {hot} [acme]: 3 file(s) waiting" in text.stdout
        assert "Traceback" not in text.stderr
        own_cluster.start()
        wait_until(lambda: not any(hot.iterdir()), timeout=120, interval=0.5)
        back = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert back.returncode == 0 and "database: up" in back.stdout
    finally:
        assert daemon.stop() == 0
    assert daemon.events("daemon.database_down") and daemon.events("daemon.database_up")
