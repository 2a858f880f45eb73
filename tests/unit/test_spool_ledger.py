"""The spool's quota ledger with owners (SFTP processes) and queue entries in the data
file's extended attribute."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from ingestd.sources.sftp import spool_entry
from ingestd.sources.sftp.spool import Spool
from ingestd.sources.sftp.spool_entry import load_entry, write_entry
from ingestd.sources.sftp.spool_layout import new_partial
from ingestd.sources.sftp.spool_ledger import QuotaExceeded


def opened(tmp_path: Path) -> Spool:
    return Spool(tmp_path / "spool", ["*.part"]).open()


def entry_for(spool: Spool, size: int, name: str = "a.pdf") -> spool_entry.Entry:
    return spool.make_entry(
        account="scan1",
        tenant="acme",
        filename=name,
        subdir="",
        size=size,
        mtime=0.0,
        remote_ip="127.0.0.1",
    )


def test_a_grant_is_what_fits_and_a_dead_owner_frees_its_reservations(tmp_path: Path) -> None:
    """Ahead if it fits, else what is needed, else refused; forget drops an owner's
    reservations and partial files, not the queue's bytes."""
    spool = opened(tmp_path)
    assert spool.grant("scan1", 1000, 100, 500, "p1.1") == 100
    assert spool.grant("scan1", 300, 300, 500, "p2.2") == 300
    with pytest.raises(QuotaExceeded) as info:
        spool.grant("scan1", 200, 200, 500, "p1.1")
    assert info.value.used == 300  # what the others hold
    path, fd = new_partial(spool.partial_dir, "scan1", "p1.1")
    os.close(fd)
    assert spool.forget("p1.1") == 1 and not path.exists()
    assert spool.usage("scan1") == 300
    spool.stage("scan1", 300, 250, "p2.2")  # the open upload became a temp-named file
    assert spool.usage("scan1") == 250
    spool.release_staged("scan1", 250)
    assert spool.usage("scan1") == 0


def test_entries_live_in_the_data_files_attribute_and_recovery_reads_both_kinds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue file carries its entry; without attributes a file beside it does; a
    restart and reindex find both, and a bare data file is left for an admin."""
    spool = opened(tmp_path)
    src = tmp_path / "one"
    src.write_bytes(b"%PDF-1 one")
    one = entry_for(spool, 10, "one.pdf")
    write_entry(spool.queue_dir, src, one)
    assert not (spool.queue_dir / f"{one.id}.json").exists()
    assert load_entry(spool.queue_dir / f"{one.id}.data") == one
    monkeypatch.setattr(spool_entry, "label", lambda target, entry: False)
    src2 = tmp_path / "two"
    src2.write_bytes(b"%PDF-1 two!")
    two = entry_for(spool, 11, "two.pdf")
    write_entry(spool.queue_dir, src2, two)
    assert (spool.queue_dir / f"{two.id}.json").exists()
    (spool.queue_dir / "00000000000000000001-bare.data").write_bytes(b"bytes")
    again = opened(tmp_path)
    assert {e.filename for e in again.pending("scan1", "")} == {"one.pdf", "two.pdf"}
    assert again.usage("scan1") == 21
    fresh = Spool(tmp_path / "spool", ["*.part"])
    assert fresh.reindex() == 2


def test_reindex_never_takes_back_what_intake_finished_or_the_client_withdrew(
    tmp_path: Path,
) -> None:
    """reindex (after an SFTP process died) runs while intake finishes entries and clients
    delete pending uploads: an entry whose files are being removed is never indexed
    again (it would be ingested twice, or a deleted upload ingested after all)."""
    spool = opened(tmp_path)
    entries = []
    for i in range(300):
        src = tmp_path / f"src{i}"
        src.write_bytes(b"%PDF-1 " + str(i).encode())
        entries.append(spool.enqueue(src, entry_for(spool, src.stat().st_size, f"{i}.pdf"),
                                     reserved=0))  # fmt: skip
    done = threading.Event()

    def reindex_loop() -> None:
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            spool.reindex()

    worker = threading.Thread(target=reindex_loop)
    worker.start()
    try:
        for i, entry in enumerate(entries):
            if i % 2:
                assert spool.remove(entry)  # the client deleted it
            else:
                assert spool.claim_ready(time.time() + 3600, 1)  # intake took the oldest
                spool.finish(entry)
    finally:
        done.set()
        worker.join(60)
    spool.reindex()
    assert len(spool.index) == 0
    assert not list(spool.queue_dir.glob("*.data"))
