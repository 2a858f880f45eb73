"""Hot-folder files of a tenant that is not active: left in place, reported once, taken later.

Real watchdog observers (inotify), real files, a real PostgreSQL; the log lines are read
back from a JSON log file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestd import log
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.sources.hotfolders import HotFolders
from tests.conftest import read_events, wait_until
from tests.fixtures.files import pdf_bytes, write

# Retries every second (retry_max_delay's minimum), so a test sees several of them.
FAST = {"stable_seconds": 0.3, "rescan_interval": 60, "retry_max_delay": 1}


class Hot:
    def __init__(self, hot: HotFolders, folder: Path, log_path: Path) -> None:
        self.hot, self.folder, self.log_path = hot, folder, log_path

    def reports(self) -> list[dict[str, Any]]:
        return read_events(self.log_path, "watch.tenant_not_active")

    def attempts(self, path: Path) -> int:
        """How often intake was tried for ``path`` (0 once it left the pending set)."""
        with self.hot.files.lock:
            pending = self.hot.files.pending.get(path)
        return pending.attempts if pending else 0


@pytest.fixture
def make_hot(make_env: Any, tmp_path: Path, db: Database) -> Iterator[Callable[..., Hot]]:
    """Factory: a running HotFolders on tmp_path/hot for ``tenant``, logging to a file."""
    started: list[tuple[HotFolders, Database]] = []
    log_path = tmp_path / "ingestd.log"
    log_fh = open(log_path, "a", buffering=1)  # noqa: SIM115 - closed at teardown
    log.configure("debug", "json", stream=log_fh)

    def factory(tenant: str = "acme") -> Hot:
        folder = tmp_path / "hot"
        folder.mkdir(exist_ok=True)
        entry = {"path": str(folder), "tenant": tenant, "failed": str(tmp_path / "failed")}
        env = make_env(watch=[entry], hotfolders=FAST)
        own_db = Database(env.db_url, max_size=4).open()
        hot = HotFolders(env.config, make_intake(env.config, own_db))
        hot.start()
        started.append((hot, own_db))
        return Hot(hot, folder, log_path)

    yield factory
    for hot, own_db in started:
        hot.stop()
        own_db.close()
    log.configure("debug", "json")
    log_fh.close()


def set_status(db: Database, tenant: str, status: str) -> None:
    with db.transaction() as tx:
        tx.raw(
            "UPDATE tenants SET status = %(s)s, updated_at = now() WHERE name = %(t)s",
            {"s": status, "t": tenant},
        )


def count_documents(db: Database) -> int:
    with db.transaction() as tx:
        return int(tx.raw("SELECT count(*) AS n FROM documents")[0]["n"])


def test_suspended_tenant_file_stays_reported_once_then_ingested(
    make_hot: Callable[..., Hot], db: Database, tenant: str, tmp_path: Path
) -> None:
    """One warning naming tenant, status, reason and file over many retries; ingested later."""
    set_status(db, tenant, "suspended")
    hot = make_hot()
    src = write(hot.folder / "sub" / "waiting.pdf", pdf_bytes(seed=901))
    wait_until(lambda: hot.attempts(src) >= 4)
    assert src.exists() and count_documents(db) == 0
    assert not (tmp_path / "failed").exists()
    [report] = hot.reports()
    assert report["level"] == "warning"
    assert (report["tenant"], report["status"], report["reason"]) == (
        "acme",
        "suspended",
        "tenant_suspended",
    )
    assert (report["filename"], report["path"]) == ("waiting.pdf", str(src))
    set_status(db, tenant, "active")
    wait_until(lambda: count_documents(db) == 1, timeout=30)
    wait_until(hot.hot.idle)
    assert not src.exists()
    assert len(hot.reports()) == 1


def test_status_change_is_reported_again(
    make_hot: Callable[..., Hot], db: Database, tenant: str
) -> None:
    """A waiting file is reported again when its tenant's status changes, not before."""
    set_status(db, tenant, "suspended")
    hot = make_hot()
    src = write(hot.folder / "a.pdf", pdf_bytes(seed=902))
    wait_until(lambda: hot.attempts(src) >= 2)
    set_status(db, tenant, "deleting")
    wait_until(lambda: len(hot.reports()) == 2)
    at = hot.attempts(src)
    wait_until(lambda: hot.attempts(src) >= at + 2)
    assert [(r["status"], r["reason"]) for r in hot.reports()] == [
        ("suspended", "tenant_suspended"),
        ("deleting", "tenant_deleting"),
    ]
    assert src.exists() and count_documents(db) == 0


def test_waiting_file_is_reported_again_after_the_interval(
    make_hot: Callable[..., Hot], db: Database, tenant: str
) -> None:
    """While its tenant stays suspended, a file is reported once per report interval."""
    set_status(db, tenant, "suspended")
    hot = make_hot()
    hot.hot.tenant_report_interval = 2.5  # an hour in production
    src = write(hot.folder / "a.pdf", pdf_bytes(seed=903))
    wait_until(lambda: len(hot.reports()) == 2, timeout=30)
    assert hot.attempts(src) >= 3  # the retries in between were quiet
    assert {r["status"] for r in hot.reports()} == {"suspended"}


def test_file_for_a_tenant_that_does_not_exist_stays(
    make_hot: Callable[..., Hot], db: Database, tenant: str
) -> None:
    """A hot folder bound to a tenant missing from the database: kept, reported as unknown."""
    hot = make_hot("ghost")
    src = write(hot.folder / "a.pdf", pdf_bytes(seed=904))
    wait_until(lambda: hot.attempts(src) >= 2)
    [report] = hot.reports()
    assert (report["tenant"], report["status"], report["reason"]) == (
        "ghost",
        "missing",
        "tenant_unknown",
    )
    assert src.exists() and count_documents(db) == 0
