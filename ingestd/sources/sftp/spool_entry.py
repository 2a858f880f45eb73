"""A completed upload's queue entry and how it is kept on disk beside its bytes.

An entry (account, tenant, name, ...) lives in the extended attribute ``XATTR`` of its
data file ``queue/<id>.data``, or, where the filesystem keeps no such attribute (and for
entries written before the attribute was used), in ``queue/<id>.json`` beside it.

The entry is written into the partial file before its fsync, so the one fsync that
makes the bytes durable makes their metadata durable too (a second file would need its
own). An upload is acknowledged (the CLOSE reply) only after that fsync, the rename into
``queue/`` and the queue directory's fsync (``write_entry``): from then on it survives a
crash or power loss, whether or not Postgres is up.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingestd.durable import SharedDirFlush, fsync_dir, write_new
from ingestd.runtime.faults import crashpoint
from ingestd.sources.sftp.spool_layout import FILE_MODE, new_id

# The fields an entry keeps on disk; the others are intake's runtime state.
PERSISTED = (
    "id",
    "account",
    "tenant",
    "filename",
    "subdir",
    "size",
    "mtime",
    "received_at",
    "remote_ip",
    "tags",
)


@dataclass
class Entry:
    """One completed upload waiting in the queue."""

    id: str
    account: str
    tenant: str
    filename: str
    subdir: str  # "a/b" below the account's inbox; "" for the top
    size: int
    mtime: float
    received_at: str
    remote_ip: str
    tags: list[str] = field(default_factory=list)
    # Runtime state, not persisted.
    attempts: int = field(default=0, compare=False)
    due: float = field(default=0.0, compare=False)
    claimed: bool = field(default=False, compare=False)
    reported: set[str] = field(default_factory=set, compare=False)

    def to_json(self) -> bytes:
        data = {k: v for k, v in asdict(self).items() if k in PERSISTED}
        return json.dumps({"version": 1, **data}, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> Entry:
        data = json.loads(raw)
        return cls(**{k: data[k] for k in PERSISTED})

    def persisted_copy(self) -> Entry:
        """A new entry with this one's persisted fields and fresh runtime state."""
        return Entry(**{k: getattr(self, k) for k in PERSISTED})


def make_entry(**fields: Any) -> Entry:
    """A new entry, with a new id and the time of receipt."""
    received = datetime.now(UTC).isoformat(timespec="milliseconds")
    return Entry(id=new_id(), received_at=received, **fields)


# A queue file's entry (Entry.to_json) lives in this extended attribute of the file.
XATTR = "user.ingestd.entry"
# "No such attribute here", not a failing disk: the entry goes into a file beside the data.
NO_XATTR = (errno.ENOTSUP, errno.EOPNOTSUPP, errno.E2BIG, errno.ERANGE)


def label(target: int | Path, entry: Entry) -> bool:
    """Write ``entry`` into the extended attribute of its data file (a descriptor or a
    path): one fsync of the file then makes bytes and metadata durable together. False
    where the filesystem keeps no such attribute (or none that large): the entry then goes
    into a file of its own beside the data."""
    try:
        os.setxattr(target, XATTR, entry.to_json())
    except OSError as exc:
        if exc.errno in NO_XATTR:
            return False
        raise
    return True


def load_entry(data: Path) -> Entry | None:
    """The entry of the queue file ``data``: from its attribute, else from the file beside
    it; None if it has neither. ValueError & co for metadata that does not parse."""
    try:
        raw = os.getxattr(data, XATTR)
    except OSError as exc:
        if exc.errno not in (*NO_XATTR, errno.ENODATA):
            raise
        try:
            raw = data.with_suffix(".json").read_bytes()
        except FileNotFoundError:
            return None
    return Entry.from_json(raw)


def write_entry(queue_dir: Path, src: Path, entry: Entry, *, labelled: bool = False) -> None:
    """Move the fsynced file ``src`` into ``queue_dir`` with its metadata; durable on return.
    ``labelled``: ``entry`` is in ``src``'s attribute already, written before its fsync
    (an upload's CLOSE does both), so the data and its metadata need no further flush."""
    sidecar: Path | None = None
    if not labelled and label(src, entry):
        fsync_path(src)  # the attribute as durable as the bytes
        labelled = True
    if not labelled:
        sidecar = queue_dir / f"{entry.id}.json"
        tmp = queue_dir / f".tmp-{entry.id}.json"
        # A full spool fails here (ENOSPC, nothing left behind): truncated metadata must
        # never be acked, nor trip recovery later.
        write_new(tmp, entry.to_json(), FILE_MODE)
        os.rename(tmp, sidecar)
    crashpoint("spool.before_queue")
    try:
        os.rename(src, queue_dir / f"{entry.id}.data")
    except OSError:
        if sidecar is not None:
            os.unlink(sidecar)  # e.g. another session renamed the same temp file first
        raise
    crashpoint("spool.after_data")
    # One directory flush makes the name durable; only then is the client told. Shared
    # by the sessions closing uploads at the same moment (group commit).
    queue_flush(queue_dir).flush()
    crashpoint("spool.after_flush")


def rewrite_entry(queue_dir: Path, updated: Entry) -> None:
    """Replace the metadata of the queued entry ``updated.id`` (a rename by the client):
    in the data file's attribute unless the entry already has a file beside it; durable
    on return."""
    data = queue_dir / f"{updated.id}.data"
    sidecar = queue_dir / f"{updated.id}.json"
    if not sidecar.exists() and label(data, updated):
        fsync_path(data)
        return
    tmp = queue_dir / f".tmp-{updated.id}.json"
    with open(tmp, "wb") as fh:
        fh.write(updated.to_json())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, sidecar)
    fsync_dir(queue_dir)


_flushes: dict[Path, SharedDirFlush] = {}
_flushes_lock = threading.Lock()


def queue_flush(queue_dir: Path) -> SharedDirFlush:
    """The one shared flush of ``queue_dir`` in this process."""
    with _flushes_lock:
        flush = _flushes.get(queue_dir)
        if flush is None:
            flush = _flushes[queue_dir] = SharedDirFlush(queue_dir)
        return flush


def fsync_path(path: Path) -> None:
    """fsync the file at ``path`` (not following a symlink)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
