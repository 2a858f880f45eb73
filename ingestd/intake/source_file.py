"""Taking a source file and letting go of it: its name checked, opened as one regular
file (never through a link), and after COMMIT removed or moved (never two copies)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from ingestd.config.pathcheck import ProtectedPaths
from ingestd.durable import fsync_dir
from ingestd.errors import SourceUnavailable
from ingestd.intake.fsops import move_entry
from ingestd.intake.items import Reason, Refused


def check_filename(name: str, max_bytes: int) -> None:
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(Reason.bad_filename, "file name is not valid UTF-8") from None
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        # Newlines and escapes in names forge log lines and break the tools of whoever
        # reads the archive later.
        raise Refused(Reason.bad_filename, "file name contains control characters")
    if len(encoded) > max_bytes:
        raise Refused(
            Reason.bad_filename, f"file name is {len(encoded)} bytes, limit is {max_bytes}"
        )
    if name in ("", ".", "..") or "/" in name:
        raise Refused(Reason.bad_filename, "file name is empty or not a plain name")


def unavailable(what: str, exc: OSError) -> SourceUnavailable:
    """An OSError of the environment (not of the file) as the transient error it is."""
    name = errno.errorcode.get(exc.errno or 0, "EIO")
    return SourceUnavailable(f"cannot {what}: {exc.strerror or exc} ({name})", name)


def open_regular(path: Path, *, owned: bool = False) -> tuple[int, os.stat_result]:
    """Open ``path`` only if it is one regular file; never follow a symlink or block.

    Refused (permanent) only for what the file is: a link, not a regular file, a hard
    link. Any other failure (EMFILE, ENFILE, ENOMEM, EIO, EACCES, ...) is the
    environment's and transient: ``SourceUnavailable``, the file stays for a retry.
    """
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise unavailable("stat the file", exc) from exc
    if stat.S_ISLNK(before.st_mode):
        raise Refused(Reason.symlink, "symbolic links are not followed")
    if not stat.S_ISREG(before.st_mode):
        kind = {
            stat.S_IFIFO: "FIFO",
            stat.S_IFCHR: "character device",
            stat.S_IFBLK: "block device",
            stat.S_IFSOCK: "socket",
            stat.S_IFDIR: "directory",
        }.get(stat.S_IFMT(before.st_mode), "special file")
        raise Refused(Reason.not_regular, f"not a regular file ({kind})")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # swapped for a symlink between lstat and open
            raise Refused(Reason.symlink, "symbolic links are not followed") from exc
        if isinstance(exc, FileNotFoundError):
            raise
        raise unavailable("open the file", exc) from exc
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise unavailable("stat the open file", exc) from exc
    if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Refused(Reason.not_regular, "file was replaced while it was opened")
    if st.st_nlink > 1 and not owned:
        # A hard link to a file elsewhere (e.g. /etc/shadow) must not be archived with
        # our privileges, and deleting "the source" would not remove the other name.
        os.close(fd)
        raise Refused(Reason.hardlink, f"file has {st.st_nlink} hard links")
    return fd, st


def remove_source(
    path: Path, protected: ProtectedPaths | None = None, *, owned: bool = False
) -> None:
    """Unlink the source after COMMIT, unless its folder resolves into the archive,
    derived or state directory (``SourceProtected``): whatever the config said, a hot
    folder swapped for a link into the archive must not wipe it as "duplicates".

    No directory fsync here: if a crash undoes the unlink, the source comes back, a
    re-run finds its SHA-256 recorded and only removes it again (idempotent intake).
    Skipping that flush is worth ~25% of intake throughput.
    """
    if protected is not None:
        protected.check(path, action="remove", owned=owned)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def move_source(path: Path, target_dir: Path, protected: ProtectedPaths | None = None) -> Path:
    """Move the source into ``target_dir`` without overwriting anything there; refused
    like ``remove_source`` for a source inside the archive, derived or state directory.
    All or nothing (``fsops.move_entry``): a source that cannot be removed leaves no copy
    in ``target_dir``, so a retry cannot pile up ``name.1.pdf``, ``name.2.pdf`` ..."""
    if protected is not None:
        protected.check(path, action="move", owned=False)
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / path.name
    n = 1
    while os.path.lexists(target):
        target = target_dir / f"{path.stem}.{n}{path.suffix}"
        n += 1
    move_entry(path, target)
    fsync_dir(target_dir)
    with contextlib.suppress(FileNotFoundError):
        fsync_dir(path.parent)
    return target
