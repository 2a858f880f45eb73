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


def test_a_shared_dir_flush_groups_concurrent_callers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty threads flushing at once cost a few fsyncs; each returns only after a flush
    that began after it called; a failed flush covers nobody."""
    import threading
    import time

    from ingestd import durable

    calls: list[float] = []
    real = durable.fsync_dir

    def slow_fsync(path: Path) -> None:
        calls.append(time.monotonic())
        time.sleep(0.05)
        real(path)

    monkeypatch.setattr(durable, "fsync_dir", slow_fsync)
    shared = durable.SharedDirFlush(tmp_path)
    entered: dict[int, float] = {}
    returned: dict[int, float] = {}

    def caller(i: int) -> None:
        entered[i] = time.monotonic()
        shared.flush()
        returned[i] = time.monotonic()

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(returned) == 20
    assert len(calls) < 20
    for i in range(20):  # some flush started at or after the call and before the return
        assert any(entered[i] <= c <= returned[i] for c in calls)

    def failing(path: Path) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(durable, "fsync_dir", failing)
    with pytest.raises(OSError, match="Input/output"):
        shared.flush()
