"""Hot folders when the filesystem says no: one outcome per file, transient stays transient."""

from __future__ import annotations

import contextlib
import os
import resource
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.ingest import Intake
from ingestd.intake.items import IntakeItem, IntakeResult
from ingestd.runtime import metrics
from ingestd.sources.hotfolders import HotFolders
from tests.conftest import Env, wait_until
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.mounts import immutable, tmpfs

FAST = {"stable_seconds": 0.3, "rescan_interval": 1, "poll_interval": 0.3, "retry_max_delay": 1}


class CountingIntake(Intake):
    """The real intake, counting how often each file is handed to it."""

    def __init__(self, inner: Intake) -> None:
        super().__init__(
            inner.config,
            inner.db,
            inner.archive,
            title_rules=inner.rules,
            protected=inner.protected,
        )
        self.calls: dict[str, int] = {}

    def ingest(self, item: IntakeItem, **kw: Any) -> IntakeResult:
        self.calls[item.path.name] = self.calls.get(item.path.name, 0) + 1
        return super().ingest(item, **kw)


def _count(db: Database, sql: str = "SELECT count(*) AS n FROM documents") -> int:
    with db.transaction() as tx:
        return int(tx.raw(sql)[0]["n"])


def _hot(env: Env) -> tuple[HotFolders, CountingIntake, Database]:
    db = Database(env.db_url, max_size=4).open()
    intake = CountingIntake(make_intake(env.config, db))
    hot = HotFolders(env.config, intake)
    hot.start()
    return hot, intake, db


def _retried(tenant: str, cause: str) -> float:
    return float(metrics.WATCH_RETRIED.labels(tenant, cause)._value.get())


@pytest.mark.parametrize("done_elsewhere", [False, True], ids=["delete", "done-on-other-fs"])
def test_committed_file_that_cannot_leave_is_taken_once_and_copied_never(
    make_env: Any, db: Database, tenant: str, tmp_path: Path, done_elsewhere: bool
) -> None:
    """A file in a sub-folder ingestd cannot remove from: one document, never handed to
    intake again over many rescans, no copies in done/, one log line naming the folder's
    owner and mode, shown by status; once the folder is fixed it leaves (moved once)."""
    folder, sub = tmp_path / "hot", tmp_path / "hot" / "Einkauf"
    sub.mkdir(parents=True)
    with contextlib.ExitStack() as stack:
        logs = stack.enter_context(capture_logs())
        watch: dict[str, Any] = {
            "path": str(folder),
            "tenant": tenant,
            "failed": str(tmp_path / "failed"),
        }
        done = None
        if done_elsewhere:
            done = stack.enter_context(tmpfs(tmp_path / "done-fs", "8m")) / "done"
            watch["done"] = str(done)
        env: Env = make_env(watch=[watch], hotfolders=FAST)
        write(sub / "Scan_0001.pdf", pdf_bytes(seed=301))
        stack.enter_context(immutable(sub))
        hot, intake, hot_db = _hot(env)
        stack.callback(hot_db.close)
        stack.callback(hot.stop)
        wait_until(lambda: hot.status_snapshot()["stuck"], timeout=60)
        rescans = _retried(tenant, "stuck_move" if done else "stuck_remove")
        wait_until(lambda: hot.snapshot()["pending"] == 0 and hot.snapshot()["inflight"] == 0)
        # Several rescans (every second) and removal retries later:
        deadline_calls = intake.calls.copy()
        for _ in range(4):
            hot.scan_tree(hot.folders()[0], folder)
        wait_until(lambda: hot.idle(), timeout=30)
        assert intake.calls == deadline_calls == {"Scan_0001.pdf": 1}
        assert _count(db) == 1
        if done is not None:
            assert [p for p in done.rglob("*") if p.is_file()] == []
        [stuck] = hot.status_snapshot()["stuck"]
        assert stuck["action"] == ("move" if done else "remove")
        assert f"the folder {sub} is root:root mode 0755" in stuck["reason"]
        assert "setgid" in stuck["reason"]
        assert rescans >= 1
    assert [e["event"] for e in logs].count("watch.source_not_removable") == 1
    # chattr -i happened: the next retry moves it, exactly once.
    hot2, _, db2 = _hot(env)
    try:
        wait_until(lambda: not (sub / "Scan_0001.pdf").exists(), timeout=60)
        wait_until(hot2.idle, timeout=30)
    finally:
        hot2.stop()
        db2.close()
    assert _count(db) == 1
    if done is not None:
        assert [p.name for p in done.rglob("*") if p.is_file()] == ["Scan_0001.pdf"]


def test_committed_file_leaves_once_the_folder_is_fixed_without_restart(
    make_env: Any, db: Database, tenant: str, tmp_path: Path
) -> None:
    """The running daemon retries only the removal of a stuck file and logs when it works."""
    folder, sub = tmp_path / "hot", tmp_path / "hot" / "sub"
    sub.mkdir(parents=True)
    env: Env = make_env(watch=[{"path": str(folder), "tenant": tenant}], hotfolders=FAST)
    write(sub / "Scan_0002.pdf", pdf_bytes(seed=302))
    with capture_logs() as logs, immutable(sub):
        hot, intake, hot_db = _hot(env)
        try:
            wait_until(lambda: hot.status_snapshot()["stuck"], timeout=60)
        except BaseException:
            hot.stop()
            hot_db.close()
            raise
    try:
        with capture_logs() as later:
            wait_until(lambda: not (sub / "Scan_0002.pdf").exists(), timeout=60)
        assert hot.status_snapshot()["stuck"] == []
        assert intake.calls == {"Scan_0002.pdf": 1}
    finally:
        hot.stop()
        hot_db.close()
    assert [e["event"] for e in logs].count("watch.source_not_removable") == 1
    assert [e for e in later if e["event"] == "watch.source_removed"]


def test_descriptors_exhausted_is_transient_not_a_refusal(
    make_env: Any, db: Database, tenant: str, tmp_path: Path
) -> None:
    """With the process out of file descriptors a good file stays where it is (retried,
    not quarantined) and is ingested once descriptors are back."""
    folder = tmp_path / "hot"
    folder.mkdir()
    failed = tmp_path / "failed"
    env: Env = make_env(
        watch=[{"path": str(folder), "tenant": tenant, "failed": str(failed)}], hotfolders=FAST
    )
    hot, _intake, hot_db = _hot(env)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hog: list[int] = []
    # Whichever open fails first (the source, the archive's temp file, a new database
    # connection), the file is retried, not refused.
    causes = ("source", "archive", "database")
    before = sum(_retried(tenant, c) for c in causes)
    try:
        try:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 64, hard)
            )
            # Written beside the folder before the hog (writing needs a descriptor) and
            # moved in once the table is full (a rename needs none): the watcher cannot
            # take the file while descriptors are still free, however the threads are
            # scheduled on a busy machine.
            staged = tmp_path / "Rechnung.pdf"
            write(staged, pdf_bytes(seed=303))
            while True:
                hog.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass  # EMFILE: the table is full
        os.rename(staged, folder / "Rechnung.pdf")
        wait_until(lambda: sum(_retried(tenant, c) for c in causes) > before, timeout=60)
        assert (folder / "Rechnung.pdf").exists()
        assert not failed.exists() or not any(failed.rglob("*"))
    finally:
        for fd in hog:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        wait_until(lambda: _count(db) == 1, timeout=60)
        wait_until(lambda: not (folder / "Rechnung.pdf").exists(), timeout=30)
    finally:
        hot.stop()
        hot_db.close()
    assert not failed.exists() or not any(failed.rglob("*"))
