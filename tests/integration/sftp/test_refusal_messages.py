"""What a scanner sees when an upload is refused: the reason, in the SFTP status message.

Content intake would refuse (an executable named ``.pdf``, text, an empty file) fails the
upload itself, at the WRITE that completes the header or at CLOSE, and nothing is
spooled. Quota, size limit and a full spool say so in the status message too.

What each client shows:
- paramiko: the server's message is the IOError text. Its ``put`` ignores a WRITE error
  in a short pipelined upload and swallows a failed CLOSE, but then STATs the file: the
  server answers "no such file" with the refusal as its message. Raw requests
  (``SFTPClient._request``) see the WRITE and CLOSE statuses themselves.
- OpenSSH ``sftp`` (9.2) prints only the generic text of the status code
  (``write remote "/Scan.pdf": Failure``, ``close remote: Failure``) and drops the
  message: for it these tests pin the non-zero exit and that nothing was stored.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
from paramiko.sftp import (
    CMD_CLOSE,
    CMD_OPEN,
    CMD_WRITE,
    SFTP_FLAG_CREATE,
    SFTP_FLAG_TRUNC,
    SFTP_FLAG_WRITE,
    int64,
)

from ingestd.sources.sftp import inbox, spool_entry
from tests.conftest import wait_until
from tests.fixtures.files import pdf_bytes
from tests.integration.sftp.conftest import Rig

ALLOWED = "allowed types: einvoice, jpeg, pdf, png, tiff"
ELF_REFUSAL = f"refused: content is ELF executable; {ALLOWED}"
ZIP_REFUSAL = f"refused: content is ZIP archive (or Office document); {ALLOWED}"
TEXT_REFUSAL = f"refused: content is plain text; {ALLOWED}"
EMPTY_REFUSAL = "refused: file is empty"
SPOOL_FULL = "the server's spool is full (no space left on device); the upload was not stored"
SPOOL_BYTES = 256 * 1024  # the tmpfs spool of the disk-full test


def elf(size: int) -> bytes:
    """The start of a 64-bit ELF executable, padded to ``size``."""
    head = b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8 + b"\x02\x00\x3e\x00"
    return head + bytes(i % 251 for i in range(size - len(head)))


def zip_with_pdf_header(size: int) -> bytes:
    """A ZIP archive whose first KiB holds ``%PDF-1.4``: a PDF reader would take it."""
    head = b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + b"\x00" * 16 + b"\x0c\x00\x00\x00"
    head += b"invoice.pdf\x00" + b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"
    return head + bytes(i % 253 for i in range(size - len(head)))


# -- what the server kept ---------------------------------------------------------------
def queue_files(rig: Rig) -> list[str]:
    return sorted(os.listdir(rig.spool.queue_dir))


def refusals(rig: Rig, reason: str) -> list[dict[str, Any]]:
    return [r for r in rig.logs("sftp.refused") if r["reason"] == reason]


def assert_nothing_kept(rig: Rig, usage: int, documents: int = 0) -> None:
    """No partial, nothing queued, no document, the quota as before the refused upload."""
    wait_until(lambda: rig.partials() == [], timeout=30)
    assert queue_files(rig) == []
    rig.wait_idle()
    assert len(rig.documents()) == documents
    # An SFTP process gives back what it reserved ahead once the account is idle there.
    wait_until(lambda: rig.spool.usage("scan1") == usage, timeout=30)


def assert_good_upload_works(rig: Rig, seed: int, documents: int = 0) -> None:
    """A valid PDF right after the refusal is spooled and becomes a document."""
    good = rig.write_pdf(f"good-{seed}.pdf", seed)
    with rig.paramiko() as sftp:
        sftp.put(str(good), f"good-{seed}.pdf")
    docs = rig.wait_documents(documents + 1, timeout=60)
    assert docs[-1]["original_filename"] == f"good-{seed}.pdf"


def assert_logged_once_per_attempt(
    rig: Rig, reason: str, path: str, detail: str, attempts: int
) -> None:
    lines = refusals(rig, reason)
    assert len(lines) == attempts, lines
    for line in lines:
        assert line["path"] == path
        assert line["detail"] == detail
        assert (line["account"], line["tenant"], line["remote_ip"]) == (
            "scan1",
            "acme",
            "127.0.0.1",
        )


# -- clients ------------------------------------------------------------------------------
def paramiko_put(rig: Rig, local: Path, remote: str) -> OSError:
    """paramiko's put of a refused file: the IOError it raises."""
    with rig.paramiko() as sftp, pytest.raises(OSError) as info:  # noqa: PT011
        sftp.put(str(local), remote)
    return info.value


def raw_open(sftp: paramiko.SFTPClient, path: str) -> bytes:
    flags = SFTP_FLAG_WRITE | SFTP_FLAG_CREATE | SFTP_FLAG_TRUNC
    _t, msg = sftp._request(CMD_OPEN, path, flags, paramiko.SFTPAttributes())
    return bytes(msg.get_binary())


def raw_write(sftp: paramiko.SFTPClient, handle: bytes, offset: int, data: bytes) -> None:
    """One WRITE request; raises IOError with the server's status message if it fails."""
    sftp._request(CMD_WRITE, handle, int64(offset), data)


def raw_close(sftp: paramiko.SFTPClient, handle: bytes) -> None:
    """One CLOSE request, answered (paramiko's SFTPFile.close would swallow the error)."""
    sftp._request(CMD_CLOSE, handle)


def openssh(rig: Rig, *commands: str) -> subprocess.CompletedProcess[str]:
    res = rig.sftp_batch("scan1", list(commands))
    assert res.returncode != 0, res
    return res


def upload_file(rig: Rig, name: str, data: bytes) -> Path:
    path = rig.root / "upload" / name
    path.write_bytes(data)
    return path


# -- content refused by its first bytes --------------------------------------------------------
def test_executable_named_pdf_fails_the_write_with_its_real_type(inproc_rig: Rig) -> None:
    """An ELF named Scan.pdf fails the WRITE that delivers its header; nothing is spooled."""
    rig = inproc_rig  # the exact ledger, byte for byte
    data = elf(100_000)
    local = upload_file(rig, "Scan.pdf", data)
    with rig.paramiko() as sftp:
        handle = raw_open(sftp, "Scan.pdf")
        with pytest.raises(OSError, match=re.escape(ELF_REFUSAL)):
            raw_write(sftp, handle, 0, data[:32768])
        # Refused for good: the bytes and the quota went with the first failed WRITE.
        assert rig.partials() == []
        rig.wait_usage("scan1", 0)
        with pytest.raises(OSError, match=re.escape(ELF_REFUSAL)):
            raw_write(sftp, handle, 32768, data[32768:65536])
        with pytest.raises(OSError, match=re.escape(ELF_REFUSAL)):
            raw_close(sftp, handle)
    assert ELF_REFUSAL in str(paramiko_put(rig, local, "Scan.pdf"))
    res = openssh(rig, "put Scan.pdf")
    assert 'write remote "/Scan.pdf": Failure' in res.stderr
    assert "close remote: Failure" in res.stderr
    assert_logged_once_per_attempt(rig, "bad_type", "/Scan.pdf", ELF_REFUSAL, attempts=3)
    assert_nothing_kept(rig, usage=0)
    assert_good_upload_works(rig, 1)


def test_zip_with_pdf_header_in_first_kib_is_refused_as_zip(rig: Rig) -> None:
    """A ZIP with %PDF-1.4 inside its first KiB, named .pdf, is refused as a ZIP archive."""
    local = upload_file(rig, "invoice.pdf", zip_with_pdf_header(60_000))
    assert ZIP_REFUSAL in str(paramiko_put(rig, local, "invoice.pdf"))
    res = openssh(rig, "put invoice.pdf")
    assert 'write remote "/invoice.pdf": Failure' in res.stderr
    assert_logged_once_per_attempt(rig, "bad_type", "/invoice.pdf", ZIP_REFUSAL, attempts=2)
    assert_nothing_kept(rig, usage=0)
    assert_good_upload_works(rig, 2)


def test_short_text_file_fails_at_close(rig: Rig) -> None:
    """A text file shorter than the header is decided at CLOSE, which fails with the type."""
    data = b"Rechnung 2026-0042\nBetrag: 120,00 EUR\n"
    local = upload_file(rig, "Rechnung.pdf", data)
    with rig.paramiko() as sftp:
        handle = raw_open(sftp, "Rechnung.pdf")
        raw_write(sftp, handle, 0, data)  # too short to decide: accepted for now
        with pytest.raises(OSError, match=re.escape(TEXT_REFUSAL)):
            raw_close(sftp, handle)
    assert TEXT_REFUSAL in str(paramiko_put(rig, local, "Rechnung.pdf"))
    res = openssh(rig, "put Rechnung.pdf")
    assert "close remote: Failure" in res.stderr
    assert_logged_once_per_attempt(rig, "bad_type", "/Rechnung.pdf", TEXT_REFUSAL, attempts=3)
    assert all(line["op"] == "close" for line in refusals(rig, "bad_type"))
    assert_nothing_kept(rig, usage=0)
    assert_good_upload_works(rig, 3)


def test_xml_is_decided_on_its_root_element_not_its_first_kib(inproc_rig: Rig) -> None:
    """XML waits for the whole header (its root element may follow a long comment): an
    XRechnung whose root comes after 3 KiB of comment, written in 1 KiB pieces, is
    accepted; other XML is refused naming its root, at the WRITE that completes the
    header (or at CLOSE for a short file)."""
    from ingestd.demo import einvoices

    rig = inproc_rig
    comment = b"<!--" + b"x" * 3000 + b"-->\n"
    xml = einvoices.ubl_xml()
    invoice = xml.replace(b"?>\n", b"?>\n" + comment, 1)
    other = b'<?xml version="1.0"?>\n' + comment + b"<note>" + b"y" * 20_000 + b"</note>"
    with rig.paramiko() as sftp:
        handle = raw_open(sftp, "xrechnung.xml")
        for start in range(0, len(invoice), 1024):
            raw_write(sftp, handle, start, invoice[start : start + 1024])
        raw_close(sftp, handle)
        handle = raw_open(sftp, "note.xml")
        for start in range(0, 8192, 1024):  # the header's first 8 KiB: undecided till full
            if start + 1024 < 8192:
                raw_write(sftp, handle, start, other[start : start + 1024])
        with pytest.raises(OSError, match="root element 'note'"):
            raw_write(sftp, handle, 7168, other[7168:8192])
    wait_until(lambda: len(rig.documents()) == 1, 60)
    assert_good_upload_works(rig, 6, documents=1)


def test_empty_file_fails_at_close(rig: Rig) -> None:
    """An empty final-named upload fails its CLOSE with "refused: file is empty"."""
    local = upload_file(rig, "Scan_0001.pdf", b"")
    with rig.paramiko() as sftp:
        handle = raw_open(sftp, "Scan_0001.pdf")
        with pytest.raises(OSError, match=re.escape(EMPTY_REFUSAL)):
            raw_close(sftp, handle)
    assert EMPTY_REFUSAL in str(paramiko_put(rig, local, "Scan_0001.pdf"))
    res = openssh(rig, "put Scan_0001.pdf")
    assert "close remote: Failure" in res.stderr
    assert_logged_once_per_attempt(rig, "empty", "/Scan_0001.pdf", EMPTY_REFUSAL, attempts=3)
    assert_nothing_kept(rig, usage=0)
    assert_good_upload_works(rig, 4)


def test_out_of_order_writes_are_refused_once_the_header_is_complete(inproc_rig: Rig) -> None:
    """Writes past the header first, then offset 0: the WRITE that completes it fails."""
    rig = inproc_rig  # the exact ledger, byte for byte
    data = elf(40_000)
    with rig.paramiko() as sftp:
        handle = raw_open(sftp, "Scan.pdf")
        raw_write(sftp, handle, 8192, data[8192:40_000])  # beyond the header: no decision
        raw_write(sftp, handle, 1024, data[1024:8192])  # the header still lacks 0..1023
        rig.wait_usage("scan1", 40_000)
        with pytest.raises(OSError, match=re.escape(ELF_REFUSAL)):
            raw_write(sftp, handle, 0, data[:1024])
        assert rig.partials() == []
        rig.wait_usage("scan1", 0)
        with pytest.raises(OSError, match=re.escape(ELF_REFUSAL)):
            raw_write(sftp, handle, 0, data[:1024])
        with pytest.raises(OSError, match=re.escape(ELF_REFUSAL)):
            raw_close(sftp, handle)
        # paramiko's own pipelined writes, out of order through seek: the same answer.
        fh = sftp.open("Scan2.pdf", "wb")
        fh.set_pipelined(True)
        fh.seek(4096)
        fh.write(data[4096:20_000])
        fh.seek(0)
        fh.write(data[:4096])
        fh.close()  # paramiko drops pipelined WRITE errors and a failed CLOSE ...
        with pytest.raises(FileNotFoundError, match=re.escape(ELF_REFUSAL)):
            sftp.stat("Scan2.pdf")  # ... the STAT after it tells
    lines = refusals(rig, "bad_type")
    assert [(r["op"], r["path"]) for r in lines] == [
        ("write", "/Scan.pdf"),
        ("write", "/Scan2.pdf"),
    ]
    assert_nothing_kept(rig, usage=0)
    assert_good_upload_works(rig, 5)


def test_temp_named_upload_renamed_to_final_name_with_bad_content_keeps_temp_name(rig: Rig) -> None:
    """x.pdf.part with ELF content uploads fine; renaming it to x.pdf fails with the type."""
    data = elf(50_000)
    local = upload_file(rig, "x.pdf.part", data)
    with rig.paramiko() as sftp:
        sftp.put(str(local), "x.pdf.part")  # temp names are not checked while partial
        rig.wait_usage("scan1", len(data))
        with pytest.raises(OSError, match=re.escape(ELF_REFUSAL)):
            sftp.rename("x.pdf.part", "x.pdf")
        with pytest.raises(OSError, match=re.escape(ELF_REFUSAL)):
            sftp.posix_rename("x.pdf.part", "x.pdf")
        assert sftp.listdir("/") == ["x.pdf.part"]
    res = openssh(rig, "rename x.pdf.part x.pdf")
    assert 'remote rename "/x.pdf.part" to "/x.pdf": Failure' in res.stderr
    lines = refusals(rig, "bad_type")
    assert len(lines) == 3
    # Both paths as the client sent them: paramiko's relative, OpenSSH's absolute.
    assert [r["path"] for r in lines] == ["x.pdf.part -> x.pdf"] * 2 + ["/x.pdf.part -> /x.pdf"]
    assert all(r["detail"] == ELF_REFUSAL for r in lines)
    assert (rig.spool.inbox("scan1") / "x.pdf.part").read_bytes() == data
    assert_nothing_kept(rig, usage=len(data))  # the temp file keeps its quota ...
    with rig.paramiko() as sftp:
        sftp.remove("x.pdf.part")  # ... until the client removes it
    rig.wait_usage("scan1", 0)
    assert_good_upload_works(rig, 6)


# -- limits -------------------------------------------------------------------------------
def _scan1(password_hashes: dict[str, str], key: Path, **extra: Any) -> list[dict[str, Any]]:
    """scan1 alone, with its password and key (OpenSSH logs in with the key)."""
    pub = key.with_suffix(".pub").read_text().strip()
    return [
        {
            "username": "scan1",
            "tenant": "acme",
            "password_hash": password_hashes["scan1"],
            "authorized_keys": [pub],
            **extra,
        }
    ]


def test_quota_exceeded_names_what_the_account_holds(
    make_rig: Callable[..., Rig], password_hashes: dict[str, str], client_key: Path
) -> None:
    """Over the quota, the client reads how many bytes the account holds and its quota."""
    rig = make_rig(accounts=_scan1(password_hashes, client_key, quota=150_000))
    hold = rig.write_pdf("hold.pdf.part", 10, size=100_000)
    held = hold.stat().st_size
    with rig.paramiko() as sftp:
        sftp.put(str(hold), "hold.pdf.part")  # pending: counts against the quota
    expected = f"quota exceeded: the account holds {held} pending bytes, its quota is 150000"
    big = rig.write_pdf("big.pdf", 11, size=100_000)
    with rig.paramiko() as sftp:
        handle = raw_open(sftp, "big.pdf")
        data = big.read_bytes()
        raw_write(sftp, handle, 0, data[:32768])
        with pytest.raises(OSError, match=re.escape(expected)):
            raw_write(sftp, handle, 32768, data[32768:65536])
        with pytest.raises(OSError, match=re.escape(expected)):
            raw_close(sftp, handle)
    assert expected in str(paramiko_put(rig, big, "big.pdf"))
    res = openssh(rig, "put big.pdf")
    assert 'write remote "/big.pdf": Failure' in res.stderr
    assert_logged_once_per_attempt(rig, "quota_exceeded", "/big.pdf", expected, attempts=3)
    assert_nothing_kept(rig, usage=held)
    assert_good_upload_works(rig, 12)
    wait_until(lambda: rig.spool.usage("scan1") == held, timeout=30)


def test_size_limit_names_the_limit(
    make_rig: Callable[..., Rig], password_hashes: dict[str, str], client_key: Path
) -> None:
    """A file over intake.max_file_size fails with the limit in the message."""
    rig = make_rig(accounts=_scan1(password_hashes, client_key), intake={"max_file_size": 120_000})
    big = rig.write_pdf("big.pdf", 20, size=130_000)
    expected = "file exceeds the size limit of 120000 bytes"
    assert expected in str(paramiko_put(rig, big, "big.pdf"))
    res = openssh(rig, "put big.pdf")
    assert 'write remote "/big.pdf": Failure' in res.stderr
    assert_logged_once_per_attempt(rig, "too_large", "/big.pdf", expected, attempts=2)
    assert_nothing_kept(rig, usage=0)
    assert_good_upload_works(rig, 21)


# -- a full spool ---------------------------------------------------------------------------
@pytest.fixture
def small_spool_rig(tmp_path: Path, make_rig: Callable[..., Rig]) -> Iterator[Rig]:
    """A rig whose spool is a 256 KiB tmpfs (the spool make_rig configures is tmp_path/spool)."""
    mount_point = tmp_path / "spool"
    mount_point.mkdir()
    res = subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={SPOOL_BYTES},mode=0700",
            "ingestd-test-spool",
            str(mount_point),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs as the spool: {res.stderr.strip() or res.returncode}")
    try:
        # In this process: the test below takes the extended attributes away from it.
        rig = make_rig({"processes": 1})
        yield rig
        rig.service.stop()  # idle before the spool goes away (make_rig's stop is then a no-op)
    finally:
        if subprocess.run(["umount", str(mount_point)], check=False).returncode != 0:
            with contextlib.suppress(OSError):
                subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_an_upload_as_large_as_the_free_spool_fits_with_its_metadata(small_spool_rig: Rig) -> None:
    """The queue entry lives in the upload's extended attribute, not in a file of its own:
    an upload exactly as large as the free spool is still taken, and ingested."""
    rig = small_spool_rig
    exact = pdf_bytes("exact", pad_to=SPOOL_BYTES - 1000, seed=30)
    exact += b"\n" * (SPOOL_BYTES - len(exact))
    with rig.paramiko() as sftp:
        sftp.put(str(upload_file(rig, "exact.pdf", exact)), "exact.pdf")
    [doc] = rig.wait_documents(1)
    assert doc["size_bytes"] == SPOOL_BYTES
    rig.wait_idle()
    assert queue_files(rig) == [] and rig.partials() == []
    rig.wait_usage("scan1", 0)


def test_full_spool_says_so_at_write_and_at_close(
    small_spool_rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC in a WRITE or in CLOSE's spool hand-off reaches the client as "spool is full"."""
    rig = small_spool_rig
    # A filesystem without extended attributes: each queue entry needs a file of its own.
    for module in (inbox, spool_entry):
        monkeypatch.setattr(module, "label", lambda target, entry: False)
    # Exactly the spool's size: every WRITE fits, the queue metadata at CLOSE does not.
    exact = pdf_bytes("exact", pad_to=SPOOL_BYTES - 1000, seed=30)
    exact += b"\n" * (SPOOL_BYTES - len(exact))
    assert len(exact) == SPOOL_BYTES
    local = upload_file(rig, "exact.pdf", exact)
    with rig.paramiko() as sftp:
        handle = raw_open(sftp, "exact.pdf")
        for offset in range(0, len(exact), 32768):
            raw_write(sftp, handle, offset, exact[offset : offset + 32768])
        with pytest.raises(OSError, match=re.escape(SPOOL_FULL)):
            raw_close(sftp, handle)
    assert SPOOL_FULL in str(paramiko_put(rig, local, "exact.pdf"))
    res = openssh(rig, "put exact.pdf")
    assert "close remote: Failure" in res.stderr
    # Larger than the spool: a WRITE runs out of space.
    big = rig.write_pdf("big.pdf", 31, size=400_000)
    assert SPOOL_FULL in str(paramiko_put(rig, big, "big.pdf"))
    res = openssh(rig, "put big.pdf")
    assert 'write remote "/big.pdf": Failure' in res.stderr
    lines = refusals(rig, "spool_full")
    assert [(r["op"], r["path"], r["level"]) for r in lines] == (
        [("close", "/exact.pdf", "error")] * 3 + [("write", "/big.pdf", "error")] * 2
    )
    assert all(r["detail"] == SPOOL_FULL for r in lines)
    assert_nothing_kept(rig, usage=0)
    assert_good_upload_works(rig, 32)
