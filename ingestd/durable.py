"""Making a change to a directory durable: the one primitive every writer of ingestd's
files shares (archive, spool, quarantine, state files). A file's own fsync does not make
its name durable; the directory holding it must be synced too."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """fsync the directory ``path``: entries created, renamed or removed in it survive a
    crash from now on."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SharedDirFlush:
    """``fsync_dir`` of one directory for many threads at once (group commit): a caller
    whose change is covered by a flush that *started after* it called waits for that
    flush instead of starting one of its own. Twenty sessions closing uploads into the
    spool queue together then cost a few directory flushes, not twenty, and each still
    returns only once its own rename is durable. A flush that fails covers nobody: the
    waiting callers flush again themselves (and see the error themselves)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cond = threading.Condition()
        self._started = 0  # flushes begun (numbered from 1)
        self._done = 0  # the number of the last flush that succeeded
        self._running = False

    def flush(self) -> None:
        with self._cond:
            # A flush numbered at least this one begins after our change was made.
            needed = self._started + 1
            while True:
                if self._done >= needed:
                    return
                if not self._running:
                    self._running = True
                    self._started += 1
                    mine = self._started
                    break
                self._cond.wait()
        ok = False
        try:
            fsync_dir(self.path)
            ok = True
        finally:
            with self._cond:
                self._running = False
                if ok:
                    self._done = max(self._done, mine)
                self._cond.notify_all()


def write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` (never an existing file, never through a link), write all of
    ``data`` and fsync it; on any failure nothing is left behind. A short write means the
    filesystem filled up: ENOSPC, never a truncated file that looks complete."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
    os.close(fd)


def replace_whole(
    path: Path, data: bytes, mode: int, *, prepare: Callable[[Path], None] | None = None
) -> None:
    """``path`` says ``data``, whole, replacing what it said: written and fsynced under a
    hidden temp name beside it, ``prepare(temp)`` (a chown), renamed over ``path``, the
    directory fsynced. A reader sees the old text or the new, never a part."""
    tmp = path.with_name(f".tmp-{secrets.token_hex(6)}-{path.name}")
    write_new(tmp, data, mode)
    try:
        if prepare is not None:
            prepare(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(path.parent)


def copy_whole(source: Path, path: Path, *, prepare: Callable[[Path], None] | None = None) -> None:
    """``path`` becomes a durable copy of ``source`` (its mode and times too), as
    ``replace_whole`` writes: never a half-copied file under the name, even after a crash."""
    import shutil

    tmp = path.with_name(f".tmp-{secrets.token_hex(6)}-{path.name}")
    try:
        shutil.copy2(source, tmp)
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if prepare is not None:
            prepare(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(path.parent)


def publish_new(
    path: Path, data: bytes, mode: int, *, prepare: Callable[[Path], None] | None = None
) -> bool:
    """Give ``path`` all of ``data`` at once, never replacing a file already there: it is
    written and fsynced under a temp name beside it, then linked (link(2) fails if the
    name exists). False if another process made ``path`` first (its file stays: two
    first starts keep one key). ``prepare(temp)`` runs before the link (a chown)."""
    tmp = path.with_name(f".tmp-{secrets.token_hex(6)}-{path.name}")
    write_new(tmp, data, mode)
    try:
        if prepare is not None:
            prepare(tmp)
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(path.parent)
    return True
