"""Hot folders with real watchdog observers, real files and a real PostgreSQL."""

from __future__ import annotations

import hashlib
import os
import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.events.outbox import EventLog
from ingestd.sources.hotfolders import HotFolders
from tests.conftest import Env, wait_until
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.sql import DOCUMENT_TAG_NAMES

FAST = {"stable_seconds": 0.5, "rescan_interval": 60, "poll_interval": 0.3, "retry_max_delay": 2}


def _docs(db: Database) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw("SELECT * FROM documents ORDER BY id")


def _count(db: Database) -> int:
    with db.transaction() as tx:
        return int(tx.raw("SELECT count(*) AS n FROM documents")[0]["n"])


@pytest.fixture
def hot_env(make_env: Any, tmp_path: Path, tenant: str) -> Iterator[Any]:
    """Factory: an Env with one hot folder and a running HotFolders; stopped afterwards."""
    started: list[HotFolders] = []

    def factory(
        watch: dict[str, Any] | None = None,
        hotfolders: dict[str, Any] | None = None,
        cls: type[HotFolders] = HotFolders,
        start: bool = True,
    ) -> tuple[Env, HotFolders, Path]:
        folder = tmp_path / "hot"
        folder.mkdir(exist_ok=True)
        entry = {"path": str(folder), "tenant": tenant, "failed": str(tmp_path / "failed")}
        entry |= watch or {}
        env: Env = make_env(watch=[entry], hotfolders={**FAST, **(hotfolders or {})})
        db = Database(env.db_url, max_size=4).open()
        hot = cls(
            env.config, make_intake(env.config, db), events=EventLog(db, env.config.paths.state_dir)
        )  # as the daemon has them
        hot._test_db = db  # type: ignore[attr-defined]
        if start:
            hot.start()
        started.append(hot)
        return env, hot, folder

    yield factory
    for hot in started:
        hot.stop()
        hot._test_db.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
def test_paused_writer_gives_one_full_document(hot_env: Any, db: Database, polling: bool) -> None:
    """1 MB, a 3 s pause with the file open, 1 MB more: one document of the full 2 MB."""
    _env, hot, folder = hot_env(watch={"polling": polling})
    data = os.urandom(2 * 1024 * 1024)
    data = b"%PDF-1.4\n" + data[9:]
    with open(folder / "slow-scanner.pdf", "wb") as fh:
        fh.write(data[: 1024 * 1024])
        fh.flush()
        os.fsync(fh.fileno())
        time.sleep(3)  # the writer pauses longer than the stability window
        assert _count(db) == 0
        fh.write(data[1024 * 1024 :])
    wait_until(lambda: _count(db) == 1)
    wait_until(hot.idle)
    [doc] = _docs(db)
    assert doc["size_bytes"] == len(data)
    assert doc["sha256"] == hashlib.sha256(data).hexdigest()
    assert not (folder / "slow-scanner.pdf").exists()


@pytest.mark.parametrize(("polling", "n"), [(False, 2000), (True, 300)], ids=["inotify", "polling"])
def test_many_files_at_once_each_ingested_once(
    hot_env: Any, db: Database, polling: bool, n: int
) -> None:
    """N files dropped at once: all ingested exactly once, none left, hand-off bounded."""
    _env, hot, folder = hot_env(watch={"polling": polling}, hotfolders={"workers": 4})
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for i in range(n):
        write(folder / f"sub{i % 10}" / f"doc-{i:05d}.pdf", pdf_bytes(seed=i))
    max_inflight = 0
    deadline = time.monotonic() + 240
    while _count(db) < n and time.monotonic() < deadline:
        max_inflight = max(max_inflight, hot.snapshot()["inflight"])
        time.sleep(0.05)
    wait_until(hot.idle, timeout=60)
    assert _count(db) == n
    with db.transaction() as tx:
        dup = tx.raw("SELECT count(*) - count(DISTINCT sha256) AS d FROM documents")[0]["d"]
        jobs = tx.raw("SELECT count(*) AS n FROM processing_jobs")[0]["n"]
    assert dup == 0 and jobs == n
    assert not [p for p in folder.rglob("*") if p.is_file()]
    assert max_inflight <= 4 * 2
    growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert growth_mib < 200, f"memory grew by {growth_mib:.0f} MiB"


def test_files_present_before_start_are_ingested(hot_env: Any, db: Database) -> None:
    """Files that arrived while ingestd was down are taken at start."""
    _env, hot, folder = hot_env(start=False)
    for i in range(5):
        write(folder / f"before-{i}.pdf", pdf_bytes(seed=100 + i))
    hot.start()
    wait_until(lambda: _count(db) == 5)


class _DeafHotFolders(HotFolders):
    """Drops every event for names starting with 'lost': an event that never arrived."""

    def note(self, folder: Any, path: Path, *, closed: bool = False) -> None:
        if path.name.startswith("lost") and threading.current_thread().name != "watch-rescan":
            return
        super().note(folder, path, closed=closed)


def test_file_whose_event_was_lost_is_picked_up_by_rescan(hot_env: Any, db: Database) -> None:
    """A file with no event is found by the periodic rescan."""
    _env, _hot, folder = hot_env(hotfolders={"rescan_interval": 2}, cls=_DeafHotFolders)
    write(folder / "lost-1.pdf", pdf_bytes(seed=200))
    write(folder / "seen-1.pdf", pdf_bytes(seed=201))
    wait_until(lambda: _count(db) == 2, timeout=30)
    names = sorted(d["original_filename"] for d in _docs(db))
    assert names == ["lost-1.pdf", "seen-1.pdf"]


def test_part_file_renamed_to_final_name(hot_env: Any, db: Database) -> None:
    """scan.pdf.part renamed to scan.pdf: one document named from scan.pdf."""
    _env, hot, folder = hot_env()
    part = write(folder / "scan.pdf.part", pdf_bytes(seed=300))
    # A sentinel written after the .part is taken first: by then the .part was seen too.
    write(folder / "sentinel.pdf", pdf_bytes(seed=301))
    wait_until(lambda: _count(db) == 1)
    hot.scan_tree(hot.folders()[0], folder)
    wait_until(hot.idle)
    assert [d["original_filename"] for d in _docs(db)] == ["sentinel.pdf"]
    part.rename(folder / "scan.pdf")
    wait_until(lambda: _count(db) == 2)
    assert _docs(db)[1]["original_filename"] == "scan.pdf"


def test_temp_and_system_names_are_never_ingested(hot_env: Any, db: Database) -> None:
    """Dotfiles, Office locks, browser/WinSCP temp files, Thumbs.db, @eaDir stay untouched."""
    _env, hot, folder = hot_env()
    names = [
        ".DS_Store",
        "._scan.pdf",
        "~$brief.pdf",
        "x.pdf.filepart",
        "y.pdf.crdownload",
        "z.pdf.tmp",
        "Thumbs.db",
        "@eaDir/scan.pdf",
        ".stfolder/a.pdf",
        "w.PDF.PART",
    ]
    for i, name in enumerate(names):
        write(folder / name, pdf_bytes(seed=400 + i))
    write(folder / "real.pdf", pdf_bytes(seed=499))
    wait_until(lambda: _count(db) == 1)
    for _ in range(2):  # two explicit rescans, each run to completion: still nothing else
        hot.scan_tree(hot.folders()[0], folder)
        wait_until(hot.idle)
    assert _count(db) == 1
    for name in names:
        assert (folder / name).exists(), name


def test_bad_files_go_to_failed_with_a_reason(hot_env: Any, db: Database, tmp_path: Path) -> None:
    """Symlink to outside, FIFO, ELF named .pdf: moved to failed with .error.txt; daemon lives."""
    _env, _hot, folder = hot_env()
    outside = write(tmp_path / "outside" / "secret.pdf", pdf_bytes(seed=500))
    os.symlink(outside, folder / "link.pdf")
    os.mkfifo(folder / "pipe.pdf")
    write(folder / "invoice.pdf", b"\x7fELF\x02\x01\x01" + os.urandom(4000))
    os.symlink(outside.parent, folder / "linkdir")
    failed = tmp_path / "failed"
    # A note is written before its file is moved (quarantine.py): wait for both.
    wait_until(
        lambda: len(list(failed.glob("*.error.txt"))) == 4 and not any(folder.iterdir()), timeout=30
    )
    notes = {p.name: p.read_text() for p in failed.glob("*.error.txt")}
    assert "reason: symlink" in notes["link.pdf.error.txt"]
    assert "reason: not_regular" in notes["pipe.pdf.error.txt"]
    assert "reason: bad_type" in notes["invoice.pdf.error.txt"]
    assert "ELF" in notes["invoice.pdf.error.txt"]
    assert "reason: symlink" in notes["linkdir.error.txt"]
    assert (failed / "link.pdf").is_symlink()  # moved as a link, never followed
    assert outside.read_bytes() == pdf_bytes(seed=500)  # the target is untouched
    assert not any(folder.iterdir())

    def quarantined() -> list[dict[str, Any]]:
        with db.transaction() as tx:
            return tx.raw(
                "SELECT tenant, detail, trace_id FROM operator_events "
                "WHERE type = 'file.quarantined'"
            )

    # Each file's event is recorded after its move (the move is what it reports): the
    # last one may still be on its way when the folder is already empty.
    wait_until(lambda: len(quarantined()) == 4, timeout=60)
    events = quarantined()
    assert sorted(e["detail"]["reason"] for e in events) == [
        "bad_type",
        "not_regular",
        "symlink",
        "symlink",
    ]
    assert all(e["tenant"] == "acme" and e["trace_id"] for e in events)
    # The daemon keeps serving: a good file afterwards is ingested.
    write(folder / "good.pdf", pdf_bytes(seed=501))
    wait_until(lambda: _count(db) == 1)


@pytest.mark.parametrize(
    ("date_tags", "expected"),
    [
        (None, [["Buchhaltung", "Eingang"], ["Eingang", "Q4"]]),
        (True, [["11", "2026", "Buchhaltung", "Eingang"], ["2026-11-30", "Eingang", "Q4"]]),
    ],
    ids=["default", "date_folder_tags"],
)
def test_subfolders_become_tags(
    hot_env: Any, db: Database, date_tags: bool | None, expected: list[list[str]]
) -> None:
    """Buchhaltung/2026/11/x.pdf and 2026-11-30/Q4/y.pdf with subfolder_tags: config tags
    plus Buchhaltung, Q4; the date folders (2026, 11, 2026-11-30) only with date_folder_tags."""
    watch = {"subfolder_tags": True, "tags": ["Eingang"], "date_folder_tags": date_tags}
    _env, _hot, folder = hot_env(watch=watch)
    write(folder / "Buchhaltung" / "2026" / "11" / "Rechnung.pdf", pdf_bytes(seed=600))
    write(folder / "2026-11-30" / "Q4" / "Beleg.pdf", pdf_bytes(seed=601))
    wait_until(lambda: _count(db) == 2)
    docs = sorted(_docs(db), key=lambda d: d["original_filename"], reverse=True)
    assert [d["source_subdir"] for d in docs] == ["Buchhaltung/2026/11", "2026-11-30/Q4"]
    with db.transaction() as tx:
        tags = [
            [r["name"] for r in tx.raw(DOCUMENT_TAG_NAMES, {"document_id": d["id"]})] for d in docs
        ]
    assert tags == expected


def test_suspended_tenant_files_stay_in_place(
    hot_env: Any, db: Database, tenant: str, tmp_path: Path
) -> None:
    """A suspended tenant's file is reported, not ingested, not moved; taken once active."""
    with db.transaction() as tx:
        tx.one(
            "tenant_set_status",
            {"name": tenant, "status": "suspended", "from_statuses": ["active"]},
        )
    _env, hot, folder = hot_env()
    src = write(folder / "waiting.pdf", pdf_bytes(seed=700))
    wait_until(lambda: hot.snapshot()["pending"] == 1 and hot.files.pending[src].attempts >= 1)
    assert src.exists() and _count(db) == 0
    assert not (tmp_path / "failed").exists() or not any((tmp_path / "failed").iterdir())
    with db.transaction() as tx:
        tx.one(
            "tenant_set_status",
            {"name": tenant, "status": "active", "from_statuses": ["suspended"]},
        )
    wait_until(lambda: _count(db) == 1, timeout=40)


def test_done_folder_receives_ingested_files(hot_env: Any, db: Database, tmp_path: Path) -> None:
    """With done configured, the source is moved there (keeping sub-folders) after COMMIT."""
    done = tmp_path / "done"
    _env, _hot, folder = hot_env(watch={"done": str(done)})
    write(folder / "a" / "x.pdf", pdf_bytes(seed=800))
    wait_until(lambda: _count(db) == 1)
    wait_until(lambda: (done / "a" / "x.pdf").exists())
    assert not (folder / "a" / "x.pdf").exists()


def test_a_folders_split_policy_applies_to_its_files_and_follows_a_reload(
    hot_env: Any, db: Database
) -> None:
    """[watch.split]: a dropped PDF queues split-batch with the folder's policy; after a
    reload with split = false the next one is a single document (analyze-document)."""
    env, hot, folder = hot_env(watch={"split": {"max_pages": 5}})
    write(folder / "Stapel.pdf", pdf_bytes(seed=1))
    wait_until(lambda: _count(db) == 1)
    text = env.config_path.read_text().replace("split = {max_pages = 5}", "split = false")
    env.config_path.write_text(text)
    hot.reload(env.reload())
    write(folder / "Brief.pdf", pdf_bytes(seed=2))
    wait_until(lambda: _count(db) == 2)
    with db.transaction() as tx:
        jobs = tx.raw(
            "SELECT d.original_filename AS name, j.kind, j.payload -> 'policy' AS policy "
            "FROM processing_jobs j JOIN documents d ON d.id = j.document_id ORDER BY d.id"
        )
    assert [(j["name"], j["kind"]) for j in jobs] == [
        ("Stapel.pdf", "split-batch"),
        ("Brief.pdf", "analyze-document"),
    ]
    assert jobs[0]["policy"]["max_pages"] == 5


def test_a_folder_name_that_is_not_utf8_still_ingests_with_escaped_tags(
    hot_env: Any, db: Database
) -> None:
    """A file below a sub-folder whose name is not UTF-8 (a Latin-1 share): ingested, its
    source_subdir and sub-folder tag recorded with the byte escaped, never retried forever."""
    _env, _hot, folder = hot_env(watch={"subfolder_tags": True})
    sub = os.path.join(os.fsencode(folder), b"Eingang_\xe4")
    os.mkdir(sub)
    with open(os.path.join(sub, b"Rechnung.pdf"), "wb") as f:
        f.write(pdf_bytes(seed=629))
    wait_until(lambda: _count(db) == 1, timeout=60)
    (doc,) = _docs(db)
    assert doc["source_subdir"] == "Eingang_\\xe4"
    with db.transaction() as tx:
        tags = [r["name"] for r in tx.raw(DOCUMENT_TAG_NAMES, {"document_id": doc["id"]})]
    assert tags == ["Eingang_\\xe4"]
    wait_until(lambda: os.listdir(sub) == [], timeout=30)
