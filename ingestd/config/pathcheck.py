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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ingestd.config.mounts import (
    MOUNTS,
    Identity,
    Mount,
    device_name,
    identify,
    read_mounts,
    within,
)
from ingestd.errors import SourceProtected


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


Finding = tuple[Relation, str]  # the relation and how it comes about ("" if plainly)


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


class Configured(Protocol):
    """What the checks read of a config (``ingestd.config.settings.Config``, which imports
    this module: a protocol here, not an import back)."""

    def named_paths(self) -> list[NamedPath]:
        """Every path of the config with its key, in config order."""
        ...


def allowed(a: Role, b: Role) -> frozenset[Relation]:
    """The relations a path of role ``a`` may have to one of role ``b``."""
    if a in SHARED and b in SHARED:
        return frozenset(Relation)
    if (a, b) in NESTS:
        return frozenset({Relation.none, Relation.inside})
    if (b, a) in NESTS:
        return frozenset({Relation.none, Relation.contains})
    return frozenset({Relation.none})


def _compare(a: str, b: str) -> Relation:
    if a == b:
        return Relation.same
    if within(a, b):
        return Relation.inside
    if within(b, a):
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
def lexical_problems(config: Configured) -> list[str]:
    """Overlaps visible in the text of the config (``..`` collapsed); no filesystem."""
    named = config.named_paths()
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
        if m.device == other.device and other.in_fs and within(other.in_fs, m.root):
            how = f"{m.point} shows {m.root} of device {m.device}, where {other.path} is"
            yield rel, f"through a bind mount ({how} {other.in_fs})"


def _by_inode(a: Identity, b: Identity) -> Iterator[Finding]:
    if a.inode is not None and a.inode == b.inode:
        dev, ino = device_name(a.inode[0]), a.inode[1]
        yield Relation.same, f"through a bind mount (both are inode {ino} on device {dev})"
        return
    for x, y, rel in ((a, b, Relation.inside), (b, a, Relation.contains)):
        for ident, directory in x.above:
            if ident == y.inode:
                dev, ino = device_name(ident[0]), ident[1]
                how = f"{directory}, above {x.path}, is inode {ino} on device {dev} like {y.path}"
                yield rel, f"through a bind mount ({how})"


def findings(a: Identity, b: Identity) -> Iterator[Finding]:
    """Every way ``a`` relates to ``b``, the plainest explanation first."""
    yield from _by_text(a, b)
    yield from _by_real(a, b)
    yield from _by_mount(a, b)
    yield from _by_mounts_below(a, b)
    yield from _by_inode(a, b)


def filesystem_problems(config: Configured, mounts: Sequence[Mount] | None = None) -> list[str]:
    """Every pair of configured paths that aliases on this machine, by real path,
    filesystem identity or inode; each problem names both keys and how they alias."""
    named = config.named_paths()
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
    def from_config(cls, config: Configured) -> ProtectedPaths:
        named = {n.role: n for n in config.named_paths()}
        # The most specific first: a folder in the archive is reported as in the archive.
        return cls([named[role] for role in PROTECTED], named[Role.spool].path)

    def problem(self, source: Path, *, action: str, owned: bool = False) -> str | None:
        """Why ``source`` must not be removed/moved, or None."""
        mounts = MOUNTS.current()  # a bind mount may have appeared since start
        folder = identify(source.parent, mounts, deep=not mounts)
        in_spool = owned and self._spool is not None and within(folder.real, self._spool)
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
