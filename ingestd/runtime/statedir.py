"""paths.state_dir belongs to the user the daemon runs as; keep it that way.

An admin runs ``sudo ingestd hostkeys`` (or ``sftp unban``, ``tenant delete``) before the
first start: as root, whatever the command makes under the state directory (host keys,
``server.secret``, unban requests, the directories on the way) is given to the state
directory's owner, or the daemon, running as that user, could not read it.

The daemon checks once at start that it can use what it needs (``check_usable``)
and refuses in one line naming the path, its owner and mode, and the fix, with
``ExitCode.state_unusable``: restarting would not help (systemd:
RestartPreventExitStatus).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ingestd.errors import StateUnusable

if TYPE_CHECKING:
    pass


def owner(state_dir: Path) -> tuple[int, int] | None:
    """(uid, gid) that what this process makes under ``state_dir`` must belong to: the
    state directory's owner, when we are root and it belongs to another user; else None
    (nothing to change: we already are that user, or root owns it)."""
    if os.geteuid() != 0:
        return None
    try:
        st = os.stat(state_dir)
    except OSError:
        return None
    return (st.st_uid, st.st_gid) if st.st_uid != 0 else None


def adopt(state_dir: Path, target: Path | int) -> None:
    """Give ``target`` (a path below ``state_dir`` or an open descriptor of one, just
    made by this process) to the state directory's owner, if it has to change hands."""
    who = owner(state_dir)
    if who is None:
        return
    try:
        if isinstance(target, int):
            os.fchown(target, *who)
        else:
            os.chown(target, *who, follow_symlinks=False)
    except OSError as exc:  # root_squash NFS, a read-only mount
        shown = target if isinstance(target, Path) else "a new file"
        raise StateUnusable(
            f"state unusable: cannot give {shown} to {user_name(who[0])}, "
            f"the owner of {state_dir}: {exc.strerror}"
        ) from None


def make_dirs(state_dir: Path, path: Path, mode: int = 0o700) -> None:
    """``mkdir -p path``; ``path`` gets ``mode``, and every directory made below
    ``state_dir`` on the way is given to its owner (see ``adopt``)."""
    missing: list[Path] = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=mode if d == path else 0o777)  # the umask applies to both
        except FileExistsError:
            continue  # another process made it first
        if state_dir in d.parents:
            adopt(state_dir, d)


def unusable(exc: OSError) -> StateUnusable | None:
    """``exc`` as a StateUnusable if it is a file's permission or read-only problem."""
    if exc.filename is None or exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        return None
    path = Path(os.fsdecode(exc.filename))
    return StateUnusable(f"state unusable: {path}: {exc.strerror}; {_fix(path)}")


def check_usable(dirs: Iterable[Path], files: Iterable[Path] = ()) -> None:
    """StateUnusable for the first directory this process cannot enter, list and create
    in (a missing one: the nearest existing parent must let it be made) or the first
    existing file it cannot read."""
    for d in dirs:
        existing = d
        while not os.path.lexists(existing) and existing != existing.parent:
            existing = existing.parent
        need = os.R_OK | os.W_OK | os.X_OK if existing == d else os.W_OK | os.X_OK
        if not os.path.isdir(existing):
            raise StateUnusable(f"state unusable: {existing} is not a directory")
        if not os.access(existing, need):
            raise StateUnusable(_cannot(existing, need))
    for f in files:
        if os.path.lexists(f) and not os.access(f, os.R_OK):
            raise StateUnusable(_cannot(f, os.R_OK))


def subdirs(path: Path) -> list[Path]:
    """The directories directly under ``path`` (none if it cannot be listed)."""
    with contextlib.suppress(OSError):
        return sorted(e for e in path.iterdir() if e.is_dir() and not e.is_symlink())
    return []


def _cannot(path: Path, need: int) -> str:
    verbs = [
        v for bit, v in ((os.R_OK, "read"), (os.W_OK, "write"), (os.X_OK, "enter")) if need & bit
    ]
    what = "/".join(verbs)
    try:
        st = os.stat(path)
        mode = stat.S_IMODE(st.st_mode)
        shown = f"owner {user_name(st.st_uid)}:{group_name(st.st_gid)}, mode {mode:04o}"
    except OSError as exc:
        shown = exc.strerror or "cannot stat it"
    me = user_name(os.geteuid())
    return f"state unusable: {path}: user {me} cannot {what} it ({shown}); {_fix(path)}"


def _fix(path: Path) -> str:
    with contextlib.suppress(OSError):
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "it is on a read-only mount (systemd: add it to ReadWritePaths=)"
    me, group = user_name(os.geteuid()), group_name(os.getegid())
    return (
        f"give it to the user ingestd runs as: chown -R {me}:{group} {path} (or run "
        "the command that made it as that user)"
    )


def user_name(uid: int) -> str:
    """The login name of ``uid``, or the number when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    """The name of group ``gid``, or the number when it has none."""
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
