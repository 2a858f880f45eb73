"""Moving a file out of a folder ingestd does not own, without ever leaving two copies.

Used for a hot folder's ``done`` folder and for quarantine. Within one filesystem a move
is a rename, which either happens or not. Across filesystems it is copy + remove; if the
source cannot be removed (a sub-folder another user created with umask 022), the copy is
taken back, so a retry never piles up ``Scan.1.pdf``, ``Scan.2.pdf`` ... in the target.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path


def same_filesystem(path: Path, directory: Path) -> bool:
    return os.lstat(path).st_dev == os.stat(directory).st_dev


def move_entry(path: Path, target: Path) -> None:
    """Move ``path`` to ``target`` (which must not exist); all or nothing.

    A symlink, FIFO or device is moved as the directory entry (rename never follows or
    opens it); across filesystems such an entry has no content to keep and is removed.
    """
    st = os.lstat(path)
    if st.st_dev == os.stat(target.parent).st_dev:
        os.rename(path, target)
        return
    if not stat.S_ISREG(st.st_mode):
        os.unlink(path)
        return
    tmp = target.with_name(f".{target.name}.copying")
    try:
        shutil.copy2(path, tmp, follow_symlinks=False)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.rename(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:
        os.unlink(path)
    except BaseException:
        # The source stays (a retry moves it again): no second copy may be left behind.
        with contextlib.suppress(OSError):
            os.unlink(target)
        raise


def why_not_removable(path: Path, exc: OSError) -> str:
    """A sentence for the operator: why ``path`` could not be removed, and the fix.

    The usual cause on a Samba or NFS hot folder: a sub-folder created by a department's
    user with umask 022 (mode 0755, owned by them), where the ingestd user may read but
    not remove. The sentence names owner, group and mode of the folder and who we are.
    """
    import grp
    import pwd

    def user(uid: int) -> str:
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return str(uid)

    def group(gid: int) -> str:
        try:
            return grp.getgrgid(gid).gr_name
        except KeyError:
            return str(gid)

    what = f"cannot remove {path}: {exc.strerror or exc}"
    try:
        st = os.stat(path.parent)
    except OSError:
        return what
    mode = stat.S_IMODE(st.st_mode)
    me = f"{user(os.geteuid())} (uid {os.geteuid()})"
    folder = f"the folder {path.parent} is {user(st.st_uid)}:{group(st.st_gid)} mode {mode:04o}"
    if exc.errno not in (errno.EACCES, errno.EPERM):
        return f"{what}; {folder}"
    if mode & stat.S_ISVTX:
        hint = (
            "its sticky bit lets only a file's owner remove it: clear it (chmod -t) or "
            "have the share create files as the ingestd user"
        )
    else:
        hint = (
            "give the folder the share's group with group write and setgid "
            "(chgrp -R GROUP; chmod -R g+w; find . -type d -exec chmod g+s {} +) and "
            "a create mask that keeps group write (Samba: 'create mask = 0660', "
            "'directory mask = 2770'; NFS: umask 002)"
        )
    return f"{what}; {folder} and ingestd runs as {me}: {hint}"
