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


def crashpoint(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
