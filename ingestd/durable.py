"""Making a change to a directory durable: the one primitive every writer of ingestd's
files shares (archive, spool, quarantine, state files). A file's own fsync does not make
its name durable; the directory holding it must be synced too."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """fsync the directory ``path``: entries created, renamed or removed in it survive a
    crash from now on."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
