"""A database failover during a burst of uploads: the streaming replica is promoted while
SFTP uploads and hot-folder drops arrive (``ingestd serve`` and a worker on a libpq
multi-host URL with ``target_session_attrs=read-write``), and nothing acknowledged is
lost or archived twice, the worker finishes every job and the audit trail is intact."""

from __future__ import annotations

import contextlib
import hashlib
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from ingestd.db.database import Database, connect_once
from ingestd.db.schema import migrate
from ingestd.passwords import hash_password
from tests.conftest import Env, read_events, run_cli, wait_until, write_config
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.replication import Pair, streaming_pair
from tests.fixtures.sftp import sftp_upload

pytestmark = pytest.mark.slow

UPLOADS = 24  # SFTP uploads in the burst
DROPS = 24  # hot-folder files in the burst


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _setup(pair: Pair) -> Pair:
    with Database(pair.primary.conninfo) as db:
        migrate(db)
        with db.transaction() as tx:
            tx.one("tenant_insert", {"name": "acme", "status": "active"})
    return pair


@pytest.fixture
def pair() -> Iterator[Pair]:
    """A migrated primary with an active tenant 'acme', and its streaming replica."""
    with streaming_pair(5481, 5482) as p:
        yield _setup(p)


@pytest.fixture
def relayed_pair() -> Iterator[Pair]:
    """As ``pair``, the replica streaming through a relay the test may pause."""
    with streaming_pair(5483, 5484, relayed=True) as p:
        yield _setup(p)


def _rows(conninfo: str, sql: str) -> list[dict[str, Any]]:
    with connect_once(conninfo, timeout=2) as conn:
        return list(conn.execute(sql).fetchall())


def _documents(conninfo: str) -> int:
    return int(_rows(conninfo, "SELECT count(*) AS n FROM documents")[0]["n"])


class Proc:
    """An ``ingestd`` command as a real process, its JSON log in a file of its own."""

    def __init__(self, log_path: Path, *argv: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ingestd.cli", *argv], stdout=self._log, stderr=subprocess.STDOUT
        )

    def events(self, name: str) -> list[dict[str, Any]]:
        return read_events(self.log_path, name)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=90)
        self._log.close()
        return code


class Uploader(threading.Thread):
    """SFTP uploads one after another (paramiko), each on a connection of its own; a file
    counts as acknowledged once its CLOSE was answered OK (the appliance's promise)."""

    def __init__(self, port: int, files: list[tuple[str, bytes]]) -> None:
        super().__init__(daemon=True)
        self.port, self.files = port, files
        self.acked: list[str] = []  # sha256 of every acknowledged upload
        self.errors: list[str] = []

    def run(self) -> None:
        for name, data in self.files:
            try:
                sftp_upload(self.port, "scan1", "pw-1", name, data)
            except (OSError, paramiko.SSHException) as exc:
                self.errors.append(f"{name}: {exc}")  # not acknowledged: not promised
                continue
            self.acked.append(hashlib.sha256(data).hexdigest())


class Burst:
    """SFTP uploads and hot-folder drops at once; ``failover`` runs a third of the way."""

    def __init__(self, pair: Pair, tmp_path: Path) -> None:
        self.pair = pair
        self.tmp = tmp_path
        self.port = _free_port()
        self.hot = tmp_path / "hot"
        self.hot.mkdir()
        self.config = tmp_path / "ingestd.toml"
        write_config(
            self.config,
            {
                "database": {"url": pair.conninfo, "connect_timeout": 2, "standby_wait": 60},
                "paths": {
                    "state_dir": str(tmp_path / "state"),
                    "spool": str(tmp_path / "spool"),
                    "archive": str(tmp_path / "archive"),
                    "derived": str(tmp_path / "derived"),
                },
                "log": {"format": "json", "level": "info"},
                "metrics": {"enabled": False},
                "sftp": {"listen": f"127.0.0.1:{self.port}", "retry_max_delay": 1},
                "sftp.accounts": [
                    {
                        "username": "scan1",
                        "tenant": "acme",
                        "password_hash": hash_password("pw-1", rounds=4),
                    }
                ],
                "hotfolders": {"stable_seconds": 0.5, "retry_max_delay": 2, "workers": 2},
                "watch": [{"path": str(self.hot), "tenant": "acme"}],
                # A job claimed on the old primary, whose outcome the new one lacks, is
                # rescued when its lease runs out: a short lease keeps the test short.
                "worker": {
                    "poll_interval": 0.5,
                    "concurrency": 1,
                    "retry_base": 0.5,
                    "lease_seconds": 4,
                },
            },
        )
        self.uploads = [
            (f"up-{i:02d}.pdf", pdf_bytes(f"upload {i}", pad_to=30_000, seed=5000 + i))
            for i in range(UPLOADS)
        ]
        self.drops = [
            (f"drop-{i:02d}.pdf", pdf_bytes(f"drop {i}", seed=6000 + i)) for i in range(DROPS)
        ]

    def run(self, failover: Callable[[Burst], None]) -> None:
        """The burst with ``failover`` in its middle, then every check of the promise."""
        tmp = self.tmp
        serve = Proc(tmp / "serve.log", "serve", "--config", str(self.config))
        worker = Proc(tmp / "worker.log", "worker", "--config", str(self.config))
        try:
            wait_until(lambda: serve.events("daemon.ready"), timeout=90)
            self.uploader = uploader = Uploader(self.port, self.uploads)
            uploader.start()
            for i, (name, data) in enumerate(self.drops):
                if i == DROPS // 3:
                    wait_until(lambda: len(uploader.acked) >= UPLOADS // 3, timeout=90)
                    failover(self)
                write(self.hot / name, data)
            uploader.join(timeout=240)
            assert not uploader.is_alive()
            new = self.pair.replica.conninfo
            assert not self.pair.replica.in_recovery()
            assert len(uploader.acked) >= UPLOADS // 2, uploader.errors
            names = {hashlib.sha256(d).hexdigest(): n for n, d in self.uploads + self.drops}
            expected = set(uploader.acked) | {hashlib.sha256(d).hexdigest() for _, d in self.drops}

            def archived() -> set[str]:
                return {r["sha256"] for r in _rows(new, "SELECT sha256 FROM documents")}

            # Every acknowledged upload and every drop, on the new primary.
            with contextlib.suppress(AssertionError):
                wait_until(lambda: expected <= archived(), timeout=180, interval=1)
            assert sorted(names[h] for h in expected - archived()) == []
            wait_until(lambda: not any(self.hot.iterdir()), timeout=60, interval=0.5)
            twice = "SELECT sha256 FROM documents GROUP BY sha256 HAVING count(*) > 1"
            assert _rows(new, twice) == [], "a file was archived twice"
            # The worker resumed on the new primary and finished every job.
            unfinished = "SELECT id, kind, status FROM processing_jobs WHERE status <> 'done'"
            wait_until(lambda: not _rows(new, unfinished), timeout=180, interval=1)
            spool = tmp / "spool" / "queue"
            wait_until(lambda: not any(spool.glob("*.data")), timeout=60, interval=0.5)
        finally:
            assert serve.stop() == 0
            assert worker.stop() == 0
        files = [p for p in (tmp / "archive").rglob("*") if p.is_file()]
        assert len(files) == len(archived()), "an archived file has no document"
        env = Env(tmp, self.config, None, new)  # type: ignore[arg-type]
        verify = run_cli(env, "audit", "verify")
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert "intact" in verify.stdout


def test_primary_stopped_and_replica_promoted_mid_burst(pair: Pair, tmp_path: Path) -> None:
    """The primary shut down (fast) and the replica promoted during the burst: every
    acknowledged upload and every drop archived once, the worker finishes every job and
    `audit verify` is intact."""

    def failover(burst: Burst) -> None:
        pair.primary.stop("fast")  # its connections end; its WAL reaches the replica first
        write(burst.hot / "during.pdf", pdf_bytes("during the outage", seed=6999))
        burst.drops.append(("during.pdf", pdf_bytes("during the outage", seed=6999)))
        pair.replica.promote()

    Burst(pair, tmp_path).run(failover)


def test_lagging_replica_promoted_after_a_crash(relayed_pair: Pair, tmp_path: Path) -> None:
    """The replica stops receiving WAL, intakes commit on the primary, the primary crashes
    (immediate stop) and the replica is promoted without them: their sources are still
    there (intake waits for the standby before dropping one), so they are archived on the
    new primary, once each, and nothing acknowledged is lost."""
    pair = relayed_pair
    assert pair.link is not None

    def failover(burst: Burst) -> None:
        pair.link.pause()  # type: ignore[union-attr]

        def unreplicated() -> int:
            return _documents(pair.primary.conninfo) - _documents(pair.replica.conninfo)

        # Intakes commit on the primary that the replica will never see.
        wait_until(lambda: unreplicated() >= 2, timeout=60, interval=0.1)
        pair.primary.stop("immediate")
        pair.replica.promote()

    Burst(pair, tmp_path).run(failover)


def test_old_primary_fenced_read_only(pair: Pair, tmp_path: Path) -> None:
    """A switchover that keeps the old primary up, fenced read-only
    (default_transaction_read_only), and promotes the replica: the daemon and the worker
    leave their connections to the read-only server and continue on the new primary."""

    def caught_up() -> bool:
        """No transaction open on the old primary, and all of its WAL replayed."""
        with connect_once(pair.primary.conninfo) as conn:
            row = conn.execute(
                "SELECT pg_current_wal_insert_lsn()::text AS lsn, count(a.pid) AS open "
                "FROM pg_stat_activity a RIGHT JOIN (SELECT 1) one ON a.pid <> pg_backend_pid() "
                "AND a.backend_type = 'client backend' AND a.xact_start IS NOT NULL"
            ).fetchone()
        if row is None or row["open"]:
            return False
        with connect_once(pair.replica.conninfo) as conn:
            done = conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn AS ok", (row["lsn"],)
            ).fetchone()
        return bool(done and done["ok"])

    def failover(burst: Burst) -> None:
        # A switchover as Patroni makes one: fence, let the replica catch up, promote.
        with connect_once(pair.primary.conninfo) as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            conn.execute("SELECT pg_reload_conf()")
        wait_until(caught_up, timeout=60, interval=0.1)
        pair.replica.promote()

    Burst(pair, tmp_path).run(failover)
