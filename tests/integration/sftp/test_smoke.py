"""Smoke: one upload with paramiko is ingested."""

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.sftp.conftest import Rig, _accounts

# What serve runs by default: sessions on SFTP processes.
pytestmark = pytest.mark.sftp_processes(2)


def test_paramiko_upload_is_ingested(rig: Rig) -> None:
    """A file written and closed over SFTP becomes a document of the account's tenant."""
    src = rig.write_pdf("a.pdf", 1)
    with rig.paramiko("scan1") as sftp:
        sftp.put(str(src), "Scan_0001.pdf")
    docs = rig.wait_documents(1)
    assert docs[0]["tenant"] == "acme"
    assert docs[0]["original_filename"] == "Scan_0001.pdf"
    assert docs[0]["source"] == "sftp:scan1"


def test_spool_file_is_linked_into_the_archive(rig: Rig) -> None:
    """After intake the archive holds the upload's inode alone; the spool queue is empty."""
    import os
    import stat

    src = rig.write_pdf("b.pdf", 2, size=200_000)
    with rig.paramiko("scan1") as sftp:
        sftp.put(str(src), "b.pdf")
    rig.wait_documents(1)
    rig.wait_idle()
    files = [p for p in rig.config.paths.archive_dir.rglob("*.pdf")]
    assert len(files) == 1
    st = os.stat(files[0])
    assert st.st_nlink == 1
    assert stat.S_IMODE(st.st_mode) == 0o440
    assert files[0].read_bytes() == src.read_bytes()
    assert list(rig.spool.queue_dir.iterdir()) == []


def test_the_accounts_date_source_is_recorded_with_the_upload(
    make_rig: Callable[..., Rig], password_hashes: dict[str, str], client_key: Path
) -> None:
    """An account's date_source and the date of the file's name are recorded with the
    document as it arrives (0024): the analysis reads them, it does not look them up."""
    accounts = _accounts(password_hashes, client_key)
    accounts[0]["date_source"] = "text-first"
    rig = make_rig(accounts=accounts)
    src = rig.write_pdf("c.pdf", 3)
    with rig.paramiko("scan1") as sftp:
        sftp.put(str(src), "2026-11-03 Rechnung.pdf")
    rig.wait_documents(1)
    with rig.db.transaction() as tx:
        [doc] = tx.raw("SELECT date_policy, name_date::text FROM documents")
    assert doc == {"date_policy": "text-first", "name_date": "2026-11-03"}
