"""Quarantine: the reason is written before the file moves; a failure leaves it in place."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ingestd.sources.quarantine import ERROR_SUFFIX, quarantine
from tests.fixtures.mounts import fill, immutable, tmpfs


def test_quarantined_file_has_its_note_beside_it(tmp_path: Path) -> None:
    """The file lands in failed/<subdir> with <name>.error.txt naming tenant and reason."""
    src = tmp_path / "hot" / "a" / "Scan.pdf"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"MZ not a pdf")
    note = quarantine(
        src,
        tmp_path / "failed",
        subdir="a",
        tenant="acme",
        reason="bad_type",
        detail="content is Windows executable",
    )
    moved = tmp_path / "failed" / "a" / "Scan.pdf"
    assert not src.exists() and moved.read_bytes() == b"MZ not a pdf"
    assert note == Path(f"{moved}{ERROR_SUFFIX}")
    text = note.read_text()
    assert "tenant: acme" in text and "reason: bad_type" in text


def test_a_note_is_one_line_per_field_whatever_the_name_holds(tmp_path: Path) -> None:
    """A client's name with bytes that are not UTF-8 and a detail with line breaks: the
    note is valid UTF-8, one line per field, every byte and control escaped."""
    src = tmp_path / "spool" / "0001.data"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"%PDF-1.4")
    name = b"Scan_\xff\r\nreason: ok.pdf".decode("utf-8", "surrogateescape")
    note = quarantine(
        src,
        tmp_path / "failed",
        subdir="",
        tenant="acme",
        reason="bad_filename",
        detail="file name is not valid UTF-8\nforged: yes",
        name=name,
    )
    lines = note.read_bytes().decode("utf-8").splitlines()
    assert [line.partition(":")[0] for line in lines] == [
        "file",
        "tenant",
        "reason",
        "detail",
        "time",
    ]
    assert lines[0] == "file: Scan_\\xff\\r\\nreason: ok.pdf"
    assert lines[3] == "detail: file name is not valid UTF-8\\nforged: yes"


def test_a_note_that_cannot_be_written_leaves_the_file_where_it_was(tmp_path: Path) -> None:
    """Disk full while writing the note: the file is not moved and no half-note is left,
    so nothing ever sits in failed/ without its reason."""
    with tmpfs(tmp_path / "fs", "1m") as fs:
        src = fs / "hot" / "Scan.pdf"
        src.parent.mkdir()
        src.write_bytes(b"\x7fELF" + os.urandom(1000))
        failed = fs / "failed"
        failed.mkdir()
        fill(fs)
        with pytest.raises(OSError, match="No space left") as info:
            quarantine(src, failed, subdir="", tenant="acme", reason="bad_type", detail="ELF")
        assert info.value.errno == errno.ENOSPC
        assert src.exists()
        assert list(failed.iterdir()) == []


def test_across_filesystems_a_source_that_cannot_be_removed_leaves_no_copy(tmp_path: Path) -> None:
    """Cross-filesystem quarantine whose source cannot be unlinked (a sub-folder another
    user owns): the copy is taken back, so retries never pile up copies."""
    with tmpfs(tmp_path / "other", "4m") as other:
        src_dir = tmp_path / "hot" / "sub"
        src_dir.mkdir(parents=True)
        src = src_dir / "Scan.pdf"
        src.write_bytes(b"plain text, not a scan\n")
        with immutable(src_dir):
            for _ in range(3):
                with pytest.raises(PermissionError):
                    quarantine(
                        src,
                        other / "failed",
                        subdir="sub",
                        tenant="acme",
                        reason="bad_type",
                        detail="plain text",
                    )
            assert src.exists()
            assert [p for p in (other / "failed").rglob("*") if p.is_file()] == []
