"""Durable writes: a new file is made whole and synced, never over an existing one or
through a link, and a failed write leaves nothing behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ingestd.durable import write_new


def test_new_file_has_its_bytes_and_mode(tmp_path: Path) -> None:
    """write_new creates the file with exactly the data and the mode asked for."""
    target = tmp_path / "note.txt"
    write_new(target, b"reason: bad type\n", 0o640)
    assert target.read_bytes() == b"reason: bad type\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_existing_file_and_link_are_never_written(tmp_path: Path) -> None:
    """An existing file is left as it is; a symlink in the way is not followed."""
    existing = tmp_path / "existing"
    existing.write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        write_new(existing, b"new", 0o600)
    assert existing.read_bytes() == b"keep"
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(FileExistsError):
        write_new(tmp_path / "link", b"new", 0o600)
    assert victim.read_bytes() == b"untouched"


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    """Data that cannot be written (here: not bytes) removes the half-made file."""
    target = tmp_path / "half"
    with pytest.raises(TypeError):
        write_new(target, "not bytes", 0o600)  # type: ignore[arg-type]
    assert not os.path.lexists(target)


def test_publish_new_never_replaces_and_leaves_no_temp(tmp_path: object) -> None:
    """The second of two first writers loses: the first file stays whole, no temp is left."""
    from pathlib import Path

    from ingestd.durable import publish_new

    path = Path(str(tmp_path)) / "seal.key"
    assert publish_new(path, b"first\n", 0o600) is True
    assert publish_new(path, b"second\n", 0o600) is False
    assert path.read_bytes() == b"first\n" and oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == ["seal.key"]
