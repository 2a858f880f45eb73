"""One ``ingestd serve`` per state directory and per spool: a lock held for the daemon's life.

Two daemons on the same state and spool would take the same spool files, the same hot
folders and write the same state files. Ports do not prevent that (two configs may
differ only in ``sftp.listen``), so each of the two directories holds a ``serve.lock``:
an ``flock`` taken without waiting at start and released by the kernel when the process
ends, however it ends (SIGKILL included: no stale lock to clean up). The file names the
holder's pid, so the refusal says who: "already running (pid N)", exit code
``already_running``. The descriptor is close-on-exec and not passed to the SFTP
processes, so a lock never outlives the daemon that took it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from ingestd.errors import AlreadyRunning, StateUnusable

LOCK_NAME = "serve.lock"


def _holder(fd: int) -> str:
    """The pid written in a held lock file ("unknown" while its holder has not written it)."""
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        if text.isdigit():
            return text
    return "unknown"


def _take(directory: Path) -> int:
    """An open descriptor of ``directory``/serve.lock, locked by this process with our pid
    in it; AlreadyRunning if another process holds it."""
    path = directory / LOCK_NAME
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o750)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise StateUnusable(f"state unusable: cannot open {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        pid = _holder(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise AlreadyRunning(
                f"already running (pid {pid}): another ingestd serve holds {path}"
            ) from None
        raise StateUnusable(f"state unusable: cannot lock {path}: {exc.strerror}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


@contextlib.contextmanager
def held(*directories: Path) -> Iterator[None]:
    """``serve.lock`` in each of ``directories`` (the same real directory once), held until
    the block ends; AlreadyRunning, before anything is started, if another daemon holds one."""
    fds: list[int] = []
    seen: set[Path] = set()
    try:
        for d in directories:
            real = d.resolve()
            if real not in seen:
                seen.add(real)
                fds.append(_take(d))
        yield
    finally:
        for fd in fds:
            os.close(fd)  # the lock goes with the last descriptor; the file stays
