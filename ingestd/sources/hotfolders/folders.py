"""A hot folder as configured, and what the observers need to know about its root.

Which names are never taken (``hotfolders.ignore``), which directory a root is (device
and inode, to notice it deleted, recreated, unmounted or mounted over), whether its
observer still listens, and whether its ctimes come from this kernel's clock.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from watchdog.observers.api import BaseObserver

from ingestd.config.settings import WatchConfig
from ingestd.runtime.statedir import group_name, user_name

# What needs a new observer when it changes: (path, polling).
FolderKey = tuple[str, bool]


@dataclass(frozen=True)
class Folder:
    """One [[watch]] entry with its resolved directories."""

    cfg: WatchConfig
    root: Path  # realpath of cfg.path, to check containment
    failed: Path

    @property
    def name(self) -> str:
        return str(self.cfg.path)

    @property
    def key(self) -> FolderKey:
        # What needs a new observer when it changes; everything else is swapped in place.
        return (str(self.cfg.path), self.cfg.polling)


def ignored(rel: Path, patterns: list[str]) -> bool:
    """A path below a hot folder that is never taken: any component matches a pattern
    (lower-cased globs, ``hotfolders.ignore``)."""
    return any(fnmatch.fnmatchcase(part.lower(), pat) for part in rel.parts for pat in patterns)


def ignore_matcher(patterns: list[str]) -> re.Pattern[str] | None:
    """``ignored`` as one compiled regex (every event and every scanned file is checked)."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


def dir_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the directory at ``path`` (links followed, as the observer does);
    None when there is none (vanished, not a directory, a dead mount)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


@dataclass(frozen=True)
class AccessProblem:
    """What this process may not do in a hot folder, and what would fix it."""

    cannot: tuple[str, ...]  # of "read", "enter", "remove files from"
    folder_owner: str
    running_as: str

    @property
    def unlistable(self) -> bool:
        return "read" in self.cannot or "enter" in self.cannot

    def fields(self) -> dict[str, object]:
        """For the log line and the operator event."""
        return {
            "cannot": list(self.cannot),
            "folder_owner": self.folder_owner,
            "running_as": self.running_as,
            "fix": "give the service user read, write and search access to the folder "
            "(its group: the README's hot folder ownership); a group added to the user "
            "takes effect when the daemon restarts, not on reload",
        }


def access_problem(path: Path) -> AccessProblem | None:
    """Why this process cannot list and take files from the folder at ``path``, or None.

    The daemon runs as the service user with the groups it had when it *started*: a
    folder of a group it was added to later is closed to it until a restart, and an
    observer on it hears nothing. So the folder check asks with this process's own
    credentials (``os.access``).
    """
    cannot = tuple(
        what
        for what, mode in (("read", os.R_OK), ("enter", os.X_OK), ("remove files from", os.W_OK))
        if not os.access(path, mode)
    )
    if not cannot:
        return None
    try:
        st = os.stat(path)
        owner = f"{user_name(st.st_uid)}:{group_name(st.st_gid)} {stat.filemode(st.st_mode)}"
    except OSError as exc:
        owner = f"unknown ({exc.strerror})"
    groups = sorted({os.getegid(), *os.getgroups()})
    running = f"{user_name(os.geteuid())} (groups {', '.join(group_name(g) for g in groups)})"
    return AccessProblem(cannot, owner, running)


def ident_text(ident: tuple[int, int] | None) -> str | None:
    return None if ident is None else f"{ident[0]}:{ident[1]}"


def listening(obs: BaseObserver) -> bool:
    """Whether ``obs`` still watches its folder: watchdog's emitters stop themselves when
    the watched root is deleted (inotify's IN_DELETE_SELF, a poll that finds no root)."""
    emitters = obs.emitters
    return (
        obs.is_alive()
        and bool(emitters)
        and all(e.is_alive() and e.should_keep_running() for e in emitters)
    )


# Filesystems whose timestamps come from another machine's clock (or a userspace daemon):
# a file's ctime there says nothing about how long ago it changed by our clock.
_REMOTE_FS = {
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "ncpfs",
    "ceph",
    "glusterfs",
    "9p",
    "afs",
    "lustre",
    "gpfs",
    "virtiofs",
    "davfs",
    "sshfs",
}


def local_fs(path: Path) -> bool:
    """Is ``path`` on a local filesystem (its ctimes are from this kernel's clock)? Read
    from /proc/self/mountinfo; unknown counts as not local."""
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return False
    real = os.path.realpath(path)
    best, fstype = -1, ""
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= best:  # the deepest; of stacked mounts the last
            best, fstype = len(mnt), right.split()[0]
    return best >= 0 and fstype not in _REMOTE_FS and not fstype.startswith("fuse")
