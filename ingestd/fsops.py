"""Moving a file out of a folder ingestd does not own, without ever leaving two copies.

Used for a hot folder's ``done`` folder and for quarantine. Within one filesystem a move
is a rename, which either happens or not. Across filesystems it is copy + remove; if the
source cannot be removed (a sub-folder another user created with umask 022), the copy is
taken back, so a retry never piles up ``Scan.1.pdf``, ``Scan.2.pdf`` ... in the target.
"""

from __future__ import annotations

import contextlib
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
