"""Where the spool keeps what, under ``paths.spool``: one filesystem, so every hand-over
is a rename. The supervisor's ``Spool`` and an SFTP process's ``SpoolClient`` share it.

    inbox/<account>/...     what the client sees: its directories and closed files that
                            still carry a temp name (``scan.pdf.part``)
    partial/<account>.<id>  the bytes of an open write handle; private to that handle,
                            so two scanners writing the same name never share a file
    queue/<id>.data         a completed upload's bytes, its entry (account, tenant, name,
                            ...) in the file's extended attribute (spool_entry.py)
    queue/<id>.json         ... or beside it, where the filesystem keeps no such attribute

Also what is there on disk: the bytes of each inbox, the queue's count for `ingestd status`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import secrets
import time
from collections.abc import Iterable
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def new_id() -> str:
    """A new queue or partial id. Time-ordered, so the queue drains oldest first and a
    directory listing reads as a log."""
    return f"{time.time_ns():020d}-{secrets.token_hex(4)}"


def is_temp_name(patterns: Iterable[str], name: str) -> bool:
    """Whether ``name`` matches one of the (lower-case) temp-name patterns."""
    lowered = name.lower()
    return any(fnmatch.fnmatchcase(lowered, pattern) for pattern in patterns)


class SpoolLayout:
    """The spool's directories under ``root`` and the names of the files in them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.inbox_root = root / "inbox"
        self.partial_dir = root / "partial"
        self.queue_dir = root / "queue"

    def make_dirs(self) -> None:
        for d in (self.root, self.inbox_root, self.partial_dir, self.queue_dir):
            d.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)

    def inbox(self, account: str) -> Path:
        """The account's inbox (made on first use)."""
        path = self.inbox_root / account
        path.mkdir(mode=DIR_MODE, exist_ok=True)
        return path

    def new_partial(self, account: str, owner: str) -> tuple[Path, int]:
        """A new private file for an open write handle; its name starts with its owner's."""
        return new_partial(self.partial_dir, account, owner)

    def data_path(self, entry_id: str) -> Path:
        """A queue entry's bytes."""
        return self.queue_dir / f"{entry_id}.data"

    def sidecar_path(self, entry_id: str) -> Path:
        """A queue entry's metadata, where it is not in the data file's attribute."""
        return self.queue_dir / f"{entry_id}.json"


def new_partial(partial_dir: Path, account: str, owner: str) -> tuple[Path, int]:
    """A new private file in ``partial_dir`` for an open write handle; its name starts
    with its owner's (so ``Spool.forget`` finds a dead SFTP process's files)."""
    prefix = f"{owner}-" if owner else ""
    path = partial_dir / f"{prefix}{account}.{new_id()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return path, os.open(path, flags, FILE_MODE)


def inbox_usage(inbox_root: Path) -> dict[str, int]:
    """Bytes of the files (temp-named uploads) in each account's inbox."""
    usage: dict[str, int] = {}
    for account_dir in inbox_root.iterdir():
        for dirpath, _dirs, files in os.walk(account_dir):
            for name in files:
                with contextlib.suppress(OSError):
                    size = os.lstat(Path(dirpath, name)).st_size
                    usage[account_dir.name] = usage.get(account_dir.name, 0) + size
    return usage


def spool_counts(spool_root: Path) -> dict[str, int]:
    """Pending uploads as seen on disk, for `ingestd status` (another process)."""
    queue = SpoolLayout(spool_root).queue_dir
    try:
        names = os.listdir(queue)
    except FileNotFoundError:
        return {"pending": 0, "bytes": 0}
    size = 0
    count = 0
    for name in names:
        if name.endswith(".data"):
            count += 1
            with contextlib.suppress(OSError):
                size += os.lstat(queue / name).st_size
    return {"pending": count, "bytes": size}
