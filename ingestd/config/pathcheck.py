"""Configured paths never alias (DESIGN invariant 8): the rules, and the checks that
enforce them at load, start and reload, and before intake removes a source.

Every path ingestd writes or watches has a key (``paths.archive``, ``watch[2].done``) and
is compared with every other one four ways, cheapest first:

* as written, ``..`` collapsed (``os.path.normpath``): all ``parse_config`` can do
  without the filesystem (tests; the host that writes the config may not be the one
  that runs it);
* by real path: symlinks resolved; for a path that does not exist yet its nearest
  existing ancestor is resolved and the rest appended (``os.path.realpath``);
* by filesystem identity from /proc/self/mountinfo: the device and the path inside
  that filesystem (mount root + path below the mount point), the same for every bind
  mount of one directory; filesystems mounted *below* a path count as inside it;
* by ``(st_dev, st_ino)`` of the path and of every directory above it.

A pair is a problem if any of them shows a relation its roles do not allow. The
defaults nest on purpose (``<state_dir>/archive``, ``<state_dir>/derived``,
``<state_dir>/failed/<tenant>``), so the allowed nestings are listed in ``NESTS``;
watches may share done/failed folders (``SHARED``); every other pair is disjoint.
"""

from __future__ import annotations

import enum
import os
import posixpath
import re
import select
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ingestd.errors import SourceProtected

if TYPE_CHECKING:  # config imports this module; the model is only needed for types
    from ingestd.config.settings import Config

MOUNTINFO = Path("/proc/self/mountinfo")


class Role(enum.Enum):
    state = "state"
    archive = "archive"
    derived = "derived"
    spool = "spool"
    hot = "hot"  # a watched folder
    done = "done"
    failed = "failed"


# (inner, outer): a path of role inner may be strictly inside one of role outer (never
# the same folder, never the other way round).
NESTS: frozenset[tuple[Role, Role]] = frozenset(
    {
        (Role.archive, Role.state),  # the defaults <state_dir>/archive and .../derived
        (Role.derived, Role.state),
        (Role.spool, Role.state),
        (Role.done, Role.state),
        (Role.failed, Role.state),  # the default <state_dir>/failed/<tenant>
    }
)
# Files moved into a done or failed folder are never read again, so watches may share
# them (two departments of one tenant share <state_dir>/failed/<tenant>).
SHARED: frozenset[Role] = frozenset({Role.done, Role.failed})
# What intake must never remove a source from, whatever the config said.
PROTECTED: tuple[Role, ...] = (Role.archive, Role.derived, Role.state)


class Relation(enum.Enum):
    """How path a relates to path b; the values read as ``a <value> b``."""

    none = "is apart from"
    inside = "is inside"
    contains = "contains"
    same = "is the same folder as"


_LEXICAL = {
    Relation.inside: "it is inside it",
    Relation.contains: "it contains it",
    Relation.same: "they are the same folder",
}
_OWN_FOLDER = {
    Relation.inside: "must be outside the watched folder",
    Relation.contains: "must not contain the watched folder",
    Relation.same: "must not be the watched folder",
}


@dataclass(frozen=True, slots=True)
class NamedPath:
    key: str  # the config key, e.g. "watch[0].done"
    path: Path  # as configured, defaults filled in
    role: Role
    watch: int | None = None  # index of its [[watch]] entry


def configured_paths(config: Config) -> list[NamedPath]:
    """Every path of the config with its key, in config order."""
    p = config.paths
    out = [
        NamedPath("paths.state_dir", p.state_dir, Role.state),
        NamedPath("paths.archive", p.archive_dir, Role.archive),
        NamedPath("paths.derived", p.derived_dir, Role.derived),
        NamedPath("paths.spool", p.spool, Role.spool),
    ]
    for i, w in enumerate(config.watch):
        out.append(NamedPath(f"watch[{i}].path", w.path, Role.hot, i))
        if w.done is not None:
            out.append(NamedPath(f"watch[{i}].done", w.done, Role.done, i))
        out.append(NamedPath(f"watch[{i}].failed", w.failed_dir(p.state_dir), Role.failed, i))
    return out


def allowed(a: Role, b: Role) -> frozenset[Relation]:
    """The relations a path of role ``a`` may have to one of role ``b``."""
    if a in SHARED and b in SHARED:
        return frozenset(Relation)
    if (a, b) in NESTS:
        return frozenset({Relation.none, Relation.inside})
    if (b, a) in NESTS:
        return frozenset({Relation.none, Relation.contains})
    return frozenset({Relation.none})


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top if top.endswith("/") else top + "/")


def _compare(a: str, b: str) -> Relation:
    if a == b:
        return Relation.same
    if _within(a, b):
        return Relation.inside
    if _within(b, a):
        return Relation.contains
    return Relation.none


def _pairs(named: Sequence[NamedPath]) -> Iterator[tuple[int, int]]:
    # The later key first, so that messages read "watch[1].path ... watch[0].path" and
    # "watch[0].path ... paths.archive".
    for j in range(len(named)):
        for i in range(j):
            yield j, i


def _nest_note(a: NamedPath, b: NamedPath) -> str:
    for inner, outer in ((a, b), (b, a)):
        if (inner.role, outer.role) in NESTS:
            return f" ({inner.key} may only be a sub-folder of {outer.key})"
    return ""


# -- as written ---------------------------------------------------------------------------
def lexical_problems(config: Config) -> list[str]:
    """Overlaps visible in the text of the config (``..`` collapsed); no filesystem."""
    named = configured_paths(config)
    normal = [os.path.normpath(n.path) for n in named]
    problems = []
    for j, i in _pairs(named):
        a, b = named[j], named[i]
        rel = _compare(normal[j], normal[i])
        if rel not in allowed(a.role, b.role):
            problems.append(_lexical_message(a, b, rel, normal[j], normal[i]))
    return problems


def _lexical_message(a: NamedPath, b: NamedPath, rel: Relation, na: str, nb: str) -> str:
    # No "; " in here: parse_config splits a validator's message on it.
    dots = [f"{n.path} is {norm}" for n, norm in ((a, na), (b, nb)) if str(n.path) != norm]
    resolved = f" once '..' is resolved ({', '.join(dots)})" if dots else ""
    if a.watch is not None and a.watch == b.watch and b.role is Role.hot:
        return f"{a.key} ({a.path}) {_OWN_FOLDER[rel]} {b.key} ({b.path}){resolved}"
    return f"{a.key} ({a.path}) overlaps {b.key} ({b.path}): {_LEXICAL[rel]}{resolved}" + (
        _nest_note(a, b)
    )


# -- on the filesystem --------------------------------------------------------------------
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
        if _within(real, m.point) and (best is None or len(m.point) >= len(best.point)):
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
    below = tuple(m for m in mounts if m.point != real and _within(m.point, real)) if deep else ()
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


def _device_name(st_dev: int) -> str:
    return f"{os.major(st_dev)}:{os.minor(st_dev)}"


Finding = tuple[Relation, str]  # the relation and how it comes about ("" if plainly)


def _by_text(a: Identity, b: Identity) -> Iterator[Finding]:
    rel = _compare(a.normal, b.normal)
    if rel is not Relation.none:
        dots = [f"{x.path} is {x.normal}" for x in (a, b) if x.path != x.normal]
        yield rel, f"once '..' is resolved ({', '.join(dots)})" if dots else ""


def _by_real(a: Identity, b: Identity) -> Iterator[Finding]:
    rel = _compare(a.real, b.real)
    if rel is not Relation.none:
        links = [f"{x.path} -> {x.real}" for x in (a, b) if x.real != x.normal]
        kind = "a symlink" if len(links) == 1 else "symlinks"
        yield rel, f"through {kind} ({', '.join(links)})" if links else ""


def _by_mount(a: Identity, b: Identity) -> Iterator[Finding]:
    if a.device is None or a.device != b.device or not a.in_fs or not b.in_fs:
        return
    rel = _compare(a.in_fs, b.in_fs)
    if rel is not Relation.none:
        how = f"on device {a.device}, {a.path} is {a.in_fs} and {b.path} is {b.in_fs}"
        yield rel, f"through a bind mount ({how})"


def _by_mounts_below(a: Identity, b: Identity) -> Iterator[Finding]:
    # A filesystem mounted below a hot folder is walked and watched with it.
    for m, rel, other in [(m, Relation.contains, b) for m in a.below] + [
        (m, Relation.inside, a) for m in b.below
    ]:
        if m.device == other.device and other.in_fs and _within(other.in_fs, m.root):
            how = f"{m.point} shows {m.root} of device {m.device}, where {other.path} is"
            yield rel, f"through a bind mount ({how} {other.in_fs})"


def _by_inode(a: Identity, b: Identity) -> Iterator[Finding]:
    if a.inode is not None and a.inode == b.inode:
        dev, ino = _device_name(a.inode[0]), a.inode[1]
        yield Relation.same, f"through a bind mount (both are inode {ino} on device {dev})"
        return
    for x, y, rel in ((a, b, Relation.inside), (b, a, Relation.contains)):
        for ident, directory in x.above:
            if ident == y.inode:
                dev, ino = _device_name(ident[0]), ident[1]
                how = f"{directory}, above {x.path}, is inode {ino} on device {dev} like {y.path}"
                yield rel, f"through a bind mount ({how})"


def findings(a: Identity, b: Identity) -> Iterator[Finding]:
    """Every way ``a`` relates to ``b``, the plainest explanation first."""
    yield from _by_text(a, b)
    yield from _by_real(a, b)
    yield from _by_mount(a, b)
    yield from _by_mounts_below(a, b)
    yield from _by_inode(a, b)


def filesystem_problems(config: Config, mounts: Sequence[Mount] | None = None) -> list[str]:
    """Every pair of configured paths that aliases on this machine, by real path,
    filesystem identity or inode; each problem names both keys and how they alias."""
    named = configured_paths(config)
    table = read_mounts() if mounts is None else mounts
    ids = [identify(n.path, table) for n in named]
    problems = []
    for j, i in _pairs(named):
        problem = _pair_problem(named[j], ids[j], named[i], ids[i])
        if problem is not None:
            problems.append(problem)
    return problems


def _pair_problem(a: NamedPath, ia: Identity, b: NamedPath, ib: Identity) -> str | None:
    ok = allowed(a.role, b.role)
    for rel, how in findings(ia, ib):
        if rel not in ok:
            text = f"{a.key} ({a.path}) {rel.value} {b.key} ({b.path})"
            return (f"{text} {how}" if how else text) + _nest_note(a, b)
    return None


# -- at runtime ---------------------------------------------------------------------------
class ProtectedPaths:
    """The folders intake must never remove (or move) a source from: archive, derived and
    state directory, as they were when the config was loaded (one that did not exist yet:
    as it is now).

    The config check happens at load; this one happens before every removal, so a hot
    folder replaced by a symlink or bind mount into the archive after start still cannot
    make intake delete archived files as "duplicates". Files intake owns (the SFTP spool's
    queue files) may be removed from the spool even when the spool is inside state_dir.
    """

    def __init__(self, protected: Sequence[NamedPath], spool: Path | None = None) -> None:
        mounts = MOUNTS.current()
        self._guarded = [(n, identify(n.path, mounts)) for n in protected]
        self._spool = None if spool is None else os.path.realpath(spool)

    @classmethod
    def from_config(cls, config: Config) -> ProtectedPaths:
        named = {n.role: n for n in configured_paths(config) if n.role in PROTECTED}
        # The most specific first: a folder in the archive is reported as in the archive.
        return cls([named[role] for role in PROTECTED], config.paths.spool)

    def problem(self, source: Path, *, action: str, owned: bool = False) -> str | None:
        """Why ``source`` must not be removed/moved, or None."""
        mounts = MOUNTS.current()  # a bind mount may have appeared since start
        folder = identify(source.parent, mounts, deep=not mounts)
        in_spool = owned and self._spool is not None and _within(folder.real, self._spool)
        for i, (named, at_start) in enumerate(self._guarded):
            if in_spool and named.role is Role.state:
                continue  # the spool may be inside state_dir, and its queue files are ours
            how = _inside(folder, at_start)
            if how is None and at_start.inode is None:
                # It did not exist at start (a fresh archive): look at it as it is now,
                # and keep that once it exists.
                now = identify(named.path, mounts, deep=not mounts)
                if now.inode is not None:
                    self._guarded[i] = (named, now)
                how = _inside(folder, now)
            if how is not None:
                where = f"{named.key} ({named.path})" + (f" {how}" if how else "")
                return f"refusing to {action} {source}: its folder is inside {where}"
        return None

    def check(self, source: Path, *, action: str, owned: bool = False) -> None:
        """Raise SourceProtected if ``source`` is inside a protected folder."""
        problem = self.problem(source, action=action, owned=owned)
        if problem is not None:
            raise SourceProtected(problem)


def _inside(folder: Identity, protected: Identity) -> str | None:
    """How ``folder`` is inside (or is) ``protected``; None if it is not."""
    for rel, how in findings(folder, protected):
        if rel in (Relation.inside, Relation.same):
            return how
    return None
