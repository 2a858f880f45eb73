"""What real scanners do: temp names, date folders, setstat, ls, same-name uploads, quotas."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from ingestd.db.database import Database
from tests.conftest import wait_until
from tests.fixtures.files import pdf_bytes
from tests.fixtures.sql import DOCUMENT_TAG_NAMES
from tests.integration.sftp.conftest import Rig

# What serve runs by default: sessions on SFTP processes.
pytestmark = pytest.mark.sftp_processes(2)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_temp_name_then_rename(rig: Rig) -> None:
    """`x.tmp` is not ingested at CLOSE; renaming it to `x.pdf` completes the upload."""
    src = rig.write_pdf("a.pdf", 10)
    with rig.paramiko() as sftp:
        sftp.put(str(src), "x.tmp")
        rig.wait_idle()
        assert sftp.listdir("/") == ["x.tmp"]
        assert rig.documents() == []
        sftp.rename("x.tmp", "x.pdf")
    docs = rig.wait_documents(1)
    assert docs[0]["original_filename"] == "x.pdf"
    assert docs[0]["sha256"] == _sha(src.read_bytes())
    assert list(rig.spool.inbox("scan1").iterdir()) == []


def test_openssh_part_rename(rig: Rig) -> None:
    """OpenSSH: `put a.pdf scan.pdf.part` + `rename` ingests once, under the final name."""
    rig.write_pdf("a.pdf", 11)
    result = rig.sftp_batch("scan1", ["put a.pdf scan.pdf.part", "rename scan.pdf.part scan.pdf"])
    assert result.returncode == 0, result.stderr
    docs = rig.wait_documents(1)
    assert [d["original_filename"] for d in docs] == ["scan.pdf"]


def test_mkdir_date_folders_then_upload(make_rig: object) -> None:
    """mkdir 2026, 2026/11, upload into it: the sub-folder is kept as context and tags."""
    rig: Rig = make_rig()  # type: ignore[operator]
    rig.write_pdf("a.pdf", 12)
    result = rig.sftp_batch(
        "scan1", ["ls", "mkdir 2026", "mkdir 2026/11", "put a.pdf 2026/11/Scan_0002.pdf"]
    )
    assert result.returncode == 0, result.stderr
    docs = rig.wait_documents(1)
    assert docs[0]["source_subdir"] == "2026/11"
    with rig.paramiko() as sftp:
        assert sftp.listdir("/") == ["2026"]
        assert sftp.listdir("/2026/11") == []  # ingested: no longer pending


def test_subfolder_tags(make_rig: object, password_hashes: dict[str, str]) -> None:
    """An account with subfolder_tags tags documents with the folder names below its inbox,
    not with the date folders (2026/11) below them."""
    accounts = [
        {
            "username": "scan1",
            "tenant": "acme",
            "password_hash": password_hashes["scan1"],
            "tags": ["Scanner 2.OG"],
            "subfolder_tags": True,
        }
    ]
    rig: Rig = make_rig(accounts=accounts)  # type: ignore[operator]
    src = rig.write_pdf("a.pdf", 13)
    with rig.paramiko() as sftp:
        for folder in ("Buchhaltung", "Buchhaltung/2026", "Buchhaltung/2026/11"):
            sftp.mkdir(folder)
        sftp.put(str(src), "Buchhaltung/2026/11/rechnung.pdf")
    doc = rig.wait_documents(1)[0]
    assert doc["source_subdir"] == "Buchhaltung/2026/11"
    with rig.db.transaction() as tx:
        tags = tx.raw(DOCUMENT_TAG_NAMES, {"document_id": doc["id"]})
    assert sorted(t["name"] for t in tags) == ["Buchhaltung", "Scanner 2.OG"]


def test_setstat_times_after_upload_is_accepted(rig: Rig) -> None:
    """utime after CLOSE succeeds (also once ingested); chmod is refused."""
    src = rig.write_pdf("a.pdf", 14)
    with rig.paramiko() as sftp:
        sftp.put(str(src), "s.pdf")
        sftp.utime("s.pdf", (1_700_000_000, 1_700_000_000))
        rig.wait_documents(1)
        sftp.utime("s.pdf", (1_700_000_000, 1_700_000_000))
        assert sftp.stat("s.pdf").st_size == src.stat().st_size
        with pytest.raises(PermissionError):
            sftp.chmod("s.pdf", 0o777)
    assert rig.logs("sftp.refused")[-1]["reason"] == "setstat_permissions"


def test_ls_before_upload_and_pending_listing(rig: Rig) -> None:
    """An empty inbox lists empty; a pending upload is listed until it is ingested."""
    with rig.db.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'suspended' WHERE name = 'acme'")
    src = rig.write_pdf("a.pdf", 15)
    with rig.paramiko() as sftp:
        assert sftp.listdir("/") == []
        sftp.put(str(src), "waiting.pdf")
        assert sftp.listdir("/") == ["waiting.pdf"]
        assert sftp.stat("waiting.pdf").st_size == src.stat().st_size
    with rig.paramiko("scan2") as other:
        assert other.listdir("/") == []  # the same tenant's other account sees nothing
    with rig.db.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'active' WHERE name = 'acme'")
    rig.wait_documents(1, timeout=90)
    with rig.paramiko() as sftp:
        assert sftp.listdir("/") == []


def test_remove_own_pending_file(rig: Rig) -> None:
    """A pending (not yet ingested) upload can be deleted by its account: no document."""
    with rig.db.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'suspended' WHERE name = 'acme'")
    src = rig.write_pdf("a.pdf", 16)
    with rig.paramiko() as sftp:
        sftp.put(str(src), "oops.pdf")
        wait_until(lambda: rig.logs("spool.tenant_not_active"))
        wait_until(lambda: rig.spool.snapshot()["inflight"] == 0)
        sftp.remove("oops.pdf")
        assert sftp.listdir("/") == []
    rig.wait_usage("scan1", 0)
    with rig.db.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'active' WHERE name = 'acme'")
    rig.wait_idle()
    assert rig.documents() == []


def test_two_scanners_same_name_at_once(rig: Rig) -> None:
    """Two connections of one account write `same.pdf` interleaved: both ingested, intact."""
    payloads = [pdf_bytes(f"scanner {i}", pad_to=400_000, seed=100 + i) for i in range(2)]
    with rig.paramiko() as a, rig.paramiko() as b:
        fa, fb = a.open("same.pdf", "wb"), b.open("same.pdf", "wb")
        for off in range(0, 400_000, 32_768):
            fa.write(payloads[0][off : off + 32_768])
            fb.write(payloads[1][off : off + 32_768])
        fb.close()
        fa.close()
    docs = rig.wait_documents(2)
    assert {d["original_filename"] for d in docs} == {"same.pdf"}
    assert {d["sha256"] for d in docs} == {_sha(p) for p in payloads}


def test_many_parallel_uploads_same_name(rig: Rig) -> None:
    """Eight threads upload `scan.pdf` at once: eight documents, each with its own bytes."""
    payloads = [pdf_bytes(f"p{i}", pad_to=100_000, seed=200 + i) for i in range(8)]
    errors: list[BaseException] = []

    def upload(data: bytes) -> None:
        try:
            with rig.paramiko("scan2") as sftp, sftp.open("scan.pdf", "wb") as fh:
                fh.write(data)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=upload, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    docs = rig.wait_documents(8)
    assert {d["sha256"] for d in docs} == {_sha(p) for p in payloads}


def test_quota_and_size_limit(make_rig: object, password_hashes: dict[str, str]) -> None:
    """Over the account quota or the file size limit: the write fails, nothing is kept."""
    accounts = [
        {
            "username": "scan1",
            "tenant": "acme",
            "password_hash": password_hashes["scan1"],
            "quota": 150_000,
        }
    ]
    rig: Rig = make_rig(accounts=accounts, intake={"max_file_size": 120_000})  # type: ignore[operator]
    big = rig.write_pdf("big.pdf", 17, size=130_000)
    with rig.paramiko() as sftp:
        with pytest.raises(OSError):  # noqa: PT011 - paramiko maps SFTP_FAILURE to OSError
            sftp.put(str(big), "big.pdf")
        assert sftp.listdir("/") == []
    reasons = [r["reason"] for r in rig.logs("sftp.refused")]
    assert "too_large" in reasons
    wait_until(lambda: rig.partials() == [])
    rig.wait_usage("scan1", 0)
    with rig.db.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'suspended' WHERE name = 'acme'")
    with rig.paramiko() as sftp:
        one = rig.write_pdf("one.pdf", 18, size=100_000)
        sftp.put(str(one), "one.pdf")
        with pytest.raises(OSError):  # noqa: PT011
            sftp.put(str(rig.write_pdf("two.pdf", 19, size=100_000)), "two.pdf")
    assert "quota_exceeded" in [r["reason"] for r in rig.logs("sftp.refused")]
    rig.wait_usage("scan1", one.stat().st_size)


def test_refused_content_fails_the_upload_and_nothing_is_kept(rig: Rig) -> None:
    """An upload intake would refuse (an executable named .pdf) fails at the client with
    its reason; nothing is spooled, quarantined or recorded."""
    refused = pytest.raises(OSError, match="refused: content is Windows executable")
    with refused, rig.paramiko() as sftp, sftp.open("evil.pdf", "wb") as fh:
        fh.write(b"MZ\x90\x00 this is an executable" + bytes(3000))
    rig.wait_idle()
    assert rig.failed_notes() == []
    assert rig.documents() == []
    # An SFTP process reports its operator events a moment after the client's failure.
    wait_until(lambda: rig.operator_events("file.refused"))
    [event] = rig.operator_events("file.refused")
    assert (event["tenant"], event["detail"]["reason"]) == ("acme", "bad_type")
    # The scanner retrying the same refused upload is one event, not one each time.
    with refused, rig.paramiko() as sftp, sftp.open("evil.pdf", "wb") as fh:
        fh.write(b"MZ\x90\x00 this is an executable" + bytes(3000))
    assert len(rig.operator_events("file.refused")) == 1


def test_a_non_utf8_upload_name_is_refused_and_recorded(rig: Rig) -> None:
    """An upload whose name is not UTF-8 (a scanner on Latin-1) fails at the client with
    its reason, and its file.refused event is recorded with the name escaped, once per
    account while the scanner retries."""
    for _ in range(2):
        refused = pytest.raises(OSError, match="not valid UTF-8")
        with refused, rig.paramiko() as sftp, sftp.open(b"Scan_\xff\xfe.pdf", "wb") as fh:
            fh.write(pdf_bytes(seed=29))
        wait_until(lambda: rig.operator_events("file.refused"))
    [event] = rig.operator_events("file.refused")
    assert (event["tenant"], event["detail"]["reason"]) == ("acme", "bad_encoding")
    assert event["detail"]["filename"].endswith("Scan_\\xff\\xfe.pdf")
    assert event["detail"]["source"] == "sftp:scan1"
    assert rig.documents() == [] and rig.failed_notes() == []


def test_spooled_upload_intake_refuses_is_quarantined_with_reason(
    make_rig: object, db: Database
) -> None:
    """An upload that passes the upload checks but that intake refuses (a duplicate with
    intake.duplicates = refuse) goes to the failed folder with a note."""
    rig: Rig = make_rig(intake={"duplicates": "refuse"})  # type: ignore[operator]
    src = rig.write_pdf("a.pdf", 62)
    with rig.paramiko() as sftp:
        sftp.put(str(src), "first.pdf")
        rig.wait_documents(1)
        sftp.put(str(src), "again.pdf")
    rig.wait_idle()
    notes = rig.failed_notes()
    assert [n.name for n in notes] == ["again.pdf.error.txt"]
    assert "reason: duplicate" in notes[0].read_text()
    assert os.path.exists(str(notes[0]).removesuffix(".error.txt"))
    assert len(rig.documents()) == 1
    [event] = rig.operator_events("file.quarantined")
    assert event["detail"]["reason"] == "duplicate" and event["trace_id"]


def test_long_folder_name_tag_is_cut_not_retried_forever(
    make_rig: object, password_hashes: dict[str, str]
) -> None:
    """A 150-character folder name becomes a 100-character tag; the upload is ingested."""
    accounts = [
        {
            "username": "scan1",
            "tenant": "acme",
            "password_hash": password_hashes["scan1"],
            "subfolder_tags": True,
        }
    ]
    rig: Rig = make_rig(accounts=accounts)  # type: ignore[operator]
    folder = "Ablage " + "x" * 143
    with rig.paramiko() as sftp:
        sftp.mkdir(folder)
        sftp.put(str(rig.write_pdf("a.pdf", 60)), f"{folder}/a.pdf")
    doc = rig.wait_documents(1)[0]
    with rig.db.transaction() as tx:
        tags = tx.raw(DOCUMENT_TAG_NAMES, {"document_id": doc["id"]})
    assert [t["name"] for t in tags] == [folder[:100]]


def test_abandoned_temp_upload_is_moved_aside(rig: Rig) -> None:
    """A temp-named upload never renamed goes to the failed folder with a note; quota freed."""
    src = rig.write_pdf("a.pdf", 61)
    with rig.paramiko() as sftp:
        sftp.mkdir("2026")
        sftp.put(str(src), "2026/stuck.pdf.part")
    path = rig.spool.inbox("scan1") / "2026" / "stuck.pdf.part"
    rig.wait_usage("scan1", src.stat().st_size)
    assert rig.service.sweep_abandoned() == 0  # young: left alone
    old = path.stat().st_mtime - 2 * rig.config.sftp.abandoned_after
    os.utime(path, (old, old))
    assert rig.service.sweep_abandoned() == 1
    assert not path.exists()
    rig.wait_usage("scan1", 0)
    notes = rig.failed_notes()
    assert [n.relative_to(rig.config.paths.state_dir / "failed").as_posix() for n in notes] == [
        "acme/sftp/scan1/2026/stuck.pdf.part.error.txt"
    ]
    assert "abandoned_upload" in notes[0].read_text()
    assert rig.logs("spool.abandoned_upload")
