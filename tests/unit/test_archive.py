"""WORM archive: path pattern, mode, hash, no overwrite, temp clean-up."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ingestd.archive.store import FILE_MODE, LocalArchive, TooLarge, is_temp
from ingestd.errors import ArchiveError

WHEN = datetime(2026, 11, 3, 14, 15, tzinfo=UTC)


def _stage(archive: LocalArchive, data: bytes, tmp_path: Path, max_bytes: int = 10**9):  # type: ignore[no-untyped-def]
    src = tmp_path / f"src-{hashlib.md5(data).hexdigest()}"  # noqa: S324 - a file name only
    src.write_bytes(data)
    fd = os.open(src, os.O_RDONLY)
    try:
        return archive.stage("acme", fd, max_bytes=max_bytes, when=WHEN)
    finally:
        os.close(fd)


def test_archived_file_has_seed_path_mode_and_hash(tmp_path: Path) -> None:
    """<tenant>/<yyyy>/<mm>/<sha256>.<ext>, mode 0440, content hash equals the name."""
    archive = LocalArchive(tmp_path / "archive")
    data = os.urandom(300_000)
    staged = _stage(archive, data, tmp_path)
    archived = archive.commit(staged, "pdf")
    sha = hashlib.sha256(data).hexdigest()
    assert archived.relpath == f"acme/2026/11/{sha}.pdf"
    assert re.fullmatch(r"[a-z0-9_-]+/\d{4}/\d{2}/[0-9a-f]{64}\.pdf", archived.relpath)
    final = tmp_path / "archive" / archived.relpath
    assert stat.S_IMODE(final.stat().st_mode) == FILE_MODE
    assert hashlib.sha256(final.read_bytes()).hexdigest() == sha
    assert not archived.reused
    assert list(archive.iter_files()) == [archived.relpath]


def test_identical_file_is_reused_not_rewritten(tmp_path: Path) -> None:
    """A second copy of the same bytes links to the existing file, inode unchanged."""
    archive = LocalArchive(tmp_path / "archive")
    data = b"%PDF-1.4 same bytes"
    first = archive.commit(_stage(archive, data, tmp_path), "pdf")
    inode = (tmp_path / "archive" / first.relpath).stat().st_ino
    second = archive.commit(_stage(archive, data, tmp_path), "pdf")
    assert second.reused and second.relpath == first.relpath
    assert (tmp_path / "archive" / first.relpath).stat().st_ino == inode
    assert not any(is_temp(p) for p in archive.iter_files())


def test_existing_file_with_other_content_is_never_overwritten(tmp_path: Path) -> None:
    """If the name exists with different bytes (damage), commit refuses and keeps it."""
    archive = LocalArchive(tmp_path / "archive")
    data = b"%PDF-1.4 original"
    staged = _stage(archive, data, tmp_path)
    final = staged.target_dir / f"{staged.sha256}.pdf"
    final.write_bytes(b"tampered")
    with pytest.raises(ArchiveError, match="refusing to overwrite"):
        archive.commit(staged, "pdf")
    assert final.read_bytes() == b"tampered"


def test_too_large_while_copying_leaves_no_temp(tmp_path: Path) -> None:
    """A source that exceeds the limit mid-copy raises TooLarge and leaves nothing behind."""
    archive = LocalArchive(tmp_path / "archive")
    with pytest.raises(TooLarge):
        _stage(archive, b"x" * 5000, tmp_path, max_bytes=4096)
    assert list(archive.iter_files()) == []


def test_discard_removes_the_temp_copy(tmp_path: Path) -> None:
    """discard() undoes stage(): no temp file remains."""
    archive = LocalArchive(tmp_path / "archive")
    staged = _stage(archive, b"abc", tmp_path)
    assert staged.temp_path.exists()
    assert stat.S_IMODE(staged.temp_path.stat().st_mode) == FILE_MODE
    archive.discard(staged)
    assert list(archive.iter_files()) == []


def test_path_of_refuses_escapes(tmp_path: Path) -> None:
    """A relative path with .. cannot reach outside the archive root."""
    archive = LocalArchive(tmp_path / "archive")
    with pytest.raises(ArchiveError):
        archive.path_of("../../etc/passwd")


def _adopt(archive: LocalArchive, src: Path) -> object:
    fd = os.open(src, os.O_RDONLY)
    try:
        return archive.adopt("acme", src, fd, max_bytes=10**9, when=WHEN)
    finally:
        os.close(fd)


def test_adopt_links_an_owned_file_instead_of_copying(tmp_path: Path) -> None:
    """adopt() archives a spool file by hard link: same inode, read-only, right hash."""
    archive = LocalArchive(tmp_path / "archive")
    src = tmp_path / "spooled"
    data = os.urandom(100_000)
    src.write_bytes(data)
    staged = _adopt(archive, src)
    archived = archive.commit(staged, "pdf")  # type: ignore[arg-type]
    final = tmp_path / "archive" / archived.relpath
    assert archived.sha256 == hashlib.sha256(data).hexdigest()
    assert os.stat(final).st_ino == os.stat(src).st_ino
    assert stat.S_IMODE(final.stat().st_mode) == FILE_MODE
    src.unlink()  # what intake does after COMMIT
    assert final.stat().st_nlink == 1
    assert final.read_bytes() == data


@pytest.mark.skipif(
    not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat("/tmp").st_dev,
    reason="needs a second filesystem (/dev/shm)",
)
def test_adopt_copies_across_filesystems(tmp_path: Path) -> None:
    """With the archive on another filesystem, adopt() falls back to a durable copy."""
    import tempfile

    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        archive = LocalArchive(Path(other) / "archive")
        src = tmp_path / "spooled"
        src.write_bytes(b"%PDF-1.4 across")
        archived = archive.commit(_adopt(archive, src), "pdf")  # type: ignore[arg-type]
        final = Path(other) / "archive" / archived.relpath
        assert final.read_bytes() == b"%PDF-1.4 across"
        assert os.stat(final).st_ino != os.stat(src).st_ino


def test_reading_inspect_and_remove_go_through_the_store(tmp_path: Path) -> None:
    """A stored file is read, described (size, mode, hash on request) and removed only
    through the store; removing it twice says it was already gone."""
    archive = LocalArchive(tmp_path / "archive")
    data = os.urandom(4096)
    rel = archive.commit(_stage(archive, data, tmp_path), "pdf").relpath
    with archive.reading(rel) as path:
        assert path.read_bytes() == data
    facts = archive.inspect(rel)
    assert facts is not None and facts.regular and facts.size == len(data)
    assert facts.mode == FILE_MODE
    assert archive.sha256(rel) == hashlib.sha256(data).hexdigest()
    assert archive.remove(rel) is True
    assert archive.inspect(rel) is None and archive.sha256(rel) is None
    assert archive.remove(rel) is False


def test_inspect_does_not_follow_a_link_in_place_of_a_file(tmp_path: Path) -> None:
    """A symlink where an archived file should be is reported as not regular, unread."""
    archive = LocalArchive(tmp_path / "archive")
    (tmp_path / "archive" / "acme").mkdir(parents=True)
    (tmp_path / "elsewhere").write_bytes(b"x" * 10)
    (tmp_path / "archive" / "acme" / "f.pdf").symlink_to(tmp_path / "elsewhere")
    facts = archive.inspect("acme/f.pdf")
    assert facts is not None and not facts.regular
    assert archive.sha256("acme/f.pdf") is None


def test_tenant_room_is_made_and_removed_by_name_only(tmp_path: Path) -> None:
    """prepare_tenant makes the tenant's directory; remove_tenant removes it with its
    files and counts them; a name that would walk out of the archive is refused."""
    archive = LocalArchive(tmp_path / "archive")
    archive.prepare_tenant("acme")
    assert (tmp_path / "archive" / "acme").is_dir()
    archive.commit(_stage(archive, b"one", tmp_path), "pdf")
    archive.commit(_stage(archive, b"two", tmp_path), "pdf")
    assert archive.remove_tenant("acme") == 2
    assert not (tmp_path / "archive" / "acme").exists()
    assert archive.remove_tenant("acme") == 0
    (tmp_path / "keep").mkdir()
    for bad in ("..", "../keep", "", "a/b"):
        with pytest.raises(ArchiveError):
            archive.remove_tenant(bad)
    assert (tmp_path / "keep").is_dir()
