"""Crash points for the crash-matrix tests.

``crashpoint(name)`` kills the current process with SIGKILL when the environment variable
``INGESTD_CRASHPOINT`` equals ``name``. SIGKILL, not an exception: nothing may run after
it (no finally, no atexit), exactly like a power cut or the OOM killer. Unset in
production, the cost is one dict lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "INGESTD_CRASHPOINT"
# With this set to a path, only the first process to reach the point dies (it creates the
# file): a replaced SFTP process must not die at the same point again.
ONCE_ENV = "INGESTD_CRASHPOINT_ONCE"


def crashpoint(name: str) -> None:
    if os.environ.get(ENV) != name:
        return
    once = os.environ.get(ONCE_ENV)
    if once:
        try:
            os.close(os.open(once, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)
