"""Whether anyone still holds a file open for writing: the kernel's answer (Linux)."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import threading
from pathlib import Path

# F_SETLEASE and friends (Linux); absent elsewhere, then only the stability window counts.
_F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
_F_RDLCK = getattr(fcntl, "F_RDLCK", 0)
_F_UNLCK = getattr(fcntl, "F_UNLCK", 2)


class WriterCheck:
    """Ask the kernel whether anyone holds a file open for writing (Linux read lease).

    A read lease is granted only when no process has the file open for writing. The
    lease is dropped at once; should a writer open the file in that instant, the kernel
    signals the lease holder (SIGIO), so that signal is ignored process-wide.
    Returns None when the kernel cannot tell (NFS/SMB, not our file without CAP_LEASE).
    """

    def __init__(self) -> None:
        self.enabled = threading.current_thread() is threading.main_thread()
        if self.enabled:
            signal.signal(signal.SIGIO, signal.SIG_IGN)

    def writer_active(self, path: Path) -> bool | None:
        if not self.enabled:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.fcntl(fd, _F_SETLEASE, _F_RDLCK)
        except OSError as exc:
            return True if exc.errno in (errno.EAGAIN, errno.EBUSY) else None
        else:
            fcntl.fcntl(fd, _F_SETLEASE, _F_UNLCK)
            return False
        finally:
            os.close(fd)
