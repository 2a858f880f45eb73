"""Where a path really is: the mount table (/proc/self/mountinfo), a path's filesystem
identity (device, path inside that filesystem, inodes on the way) and what two
identities say about each other. The rules that use them are ``pathcheck``'s."""

from __future__ import annotations

import os
import posixpath
import re
import select
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")


def within(path: str, top: str) -> bool:
    return path == top or path.startswith(top if top.endswith("/") else top + "/")


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of /proc/self/mountinfo."""

    device: str  # major:minor, shared by every mount of one filesystem
    root: str  # the directory of that filesystem that is mounted here
    point: str  # where it is mounted


_OCTAL = re.compile(rb"\\([0-7]{3})")


def _unescape(field: bytes) -> str:
    # The kernel writes space, tab, newline and backslash in paths as \040 etc.
    return os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), field))


def _parse_mounts(raw: bytes) -> tuple[Mount, ...]:
    mounts = []
    for line in raw.splitlines():
        fields = line.split(b" ")
        if len(fields) >= 5:
            device = fields[2].decode("ascii", "replace")
            mounts.append(Mount(device, _unescape(fields[3]), _unescape(fields[4])))
    return tuple(mounts)


def read_mounts(path: Path = MOUNTINFO) -> tuple[Mount, ...]:
    """The mount table of this process; empty where there is none (then the real-path
    and inode checks still run)."""
    try:
        return _parse_mounts(path.read_bytes())
    except OSError:
        return ()


class MountTable:
    """The mount table, read again only after it changed: the kernel marks an open
    /proc/self/mountinfo with POLLPRI after every mount and unmount. Reading and parsing
    it costs ~100 us, a poll ~1 us; intake asks before every removal."""

    def __init__(self, path: Path = MOUNTINFO) -> None:
        self._lock = threading.Lock()
        self._path = path
        self._pid = -1
        self._fd: int | None = None
        self._poll = select.poll()
        self._mounts: tuple[Mount, ...] = ()

    def current(self) -> tuple[Mount, ...]:
        with self._lock:
            if self._pid != os.getpid():
                self._open()  # after a fork the open file (and its events) is shared
            elif self._fd is not None and self._poll.poll(0):
                self._mounts = self._read(self._fd)
            return self._mounts

    def _open(self) -> None:
        if self._fd is not None:
            self._poll.unregister(self._fd)
            os.close(self._fd)
            self._fd = None
        self._pid = os.getpid()
        try:
            self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._mounts = ()
            return
        self._poll.register(self._fd, select.POLLPRI | select.POLLERR)
        self._mounts = self._read(self._fd)

    @staticmethod
    def _read(fd: int) -> tuple[Mount, ...]:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return _parse_mounts(b"".join(chunks))


MOUNTS = MountTable()  # one per process, like the mount table itself


def _mount_of(real: str, mounts: Sequence[Mount]) -> Mount | None:
    best: Mount | None = None
    for m in mounts:
        # The longest mount point wins; of two on one point the later one, which is on top.
        if within(real, m.point) and (best is None or len(m.point) >= len(best.point)):
            best = m
    return best


InodeId = tuple[int, int]  # (st_dev, st_ino)


@dataclass(frozen=True, slots=True)
class Identity:
    """Where a path really is, by every measure this module compares."""

    path: str  # as configured
    normal: str  # '..' collapsed
    real: str  # symlinks resolved
    device: str | None  # of the filesystem it is on (mountinfo)
    in_fs: str | None  # its path inside that filesystem
    below: tuple[Mount, ...]  # filesystems mounted below it: reachable through it
    inode: InodeId | None  # None while it does not exist
    above: tuple[tuple[InodeId, str], ...]  # every existing directory above it (if deep)


def identify(path: Path | str, mounts: Sequence[Mount], *, deep: bool = True) -> Identity:
    """Resolve ``path`` every way. ``deep=False`` (enough to tell whether it is *inside*
    another path, given a mount table) skips what is mounted below it and the inodes of
    the directories above it: a bind mount at any of those is in the mount table."""
    text = os.fspath(path)
    real = os.path.realpath(text)
    mount = _mount_of(real, mounts)
    in_fs = None
    if mount is not None:
        below_point = posixpath.relpath(real, mount.point)
        in_fs = posixpath.normpath(posixpath.join(mount.root, below_point))
    below = tuple(m for m in mounts if m.point != real and within(m.point, real)) if deep else ()
    return Identity(
        text,
        os.path.normpath(text),
        real,
        mount.device if mount else None,
        in_fs,
        below,
        _inode(real),
        _inodes_above(real) if deep else (),
    )


def _inode(path: str) -> InodeId | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _inodes_above(real: str) -> tuple[tuple[InodeId, str], ...]:
    out = []
    current = real
    while (parent := os.path.dirname(current)) != current:
        ident = _inode(parent)
        if ident is not None:
            out.append((ident, parent))
        current = parent
    return tuple(out)


def device_name(st_dev: int) -> str:
    return f"{os.major(st_dev)}:{os.minor(st_dev)}"
