"""The durable SFTP spool: where an upload lives from CLOSE until intake has committed it.

Layout under ``paths.spool`` (one filesystem, so every hand-over is a rename):

    inbox/<account>/...     what the client sees: its directories and closed files that
                            still carry a temp name (``scan.pdf.part``)
    partial/<account>.<id>  the bytes of an open write handle; private to that handle,
                            so two scanners writing the same name never share a file
    queue/<id>.json         a completed upload's metadata (account, tenant, name, ...)
    queue/<id>.data         ... and its bytes; the pair is what intake takes

An upload is acknowledged (the CLOSE reply) only after its bytes are fsynced and both
queue entries are renamed in and the queue directory is fsynced: from then on it survives
a crash or power loss, whether or not Postgres is up. Anything in ``partial/`` at start
belongs to a connection that dropped before CLOSE; it is deleted (no document).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingestd.durable import fsync_dir, write_new
from ingestd.errors import ExitCode, IngestdError
from ingestd.log import get_logger

DIR_MODE = 0o700
FILE_MODE = 0o600


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

    _PERSISTED = (
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

    def to_json(self) -> bytes:
        data = {k: v for k, v in asdict(self).items() if k in self._PERSISTED}
        return json.dumps({"version": 1, **data}, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> Entry:
        data = json.loads(raw)
        return cls(**{k: data[k] for k in cls._PERSISTED})


def _new_id() -> str:
    # Time-ordered, so the queue drains oldest first and a directory listing reads as a log.
    return f"{time.time_ns():020d}-{secrets.token_hex(4)}"


class QuotaExceeded(IngestdError):
    """A reservation would take the account over its quota; says by how much, for the client.

    Transient: the account's pending bytes go as intake takes its uploads, and the same
    upload fits again then (the client is refused now and may send it later).
    """

    exit_code = ExitCode.refused
    transient = True

    def __init__(self, used: int, limit: int) -> None:
        super().__init__(f"account holds {used} pending bytes, quota is {limit}")
        self.used = used
        self.limit = limit


class Spool:
    def __init__(self, root: Path, temp_names: Iterable[str]) -> None:
        self.root = root
        self.inbox_root = root / "inbox"
        self.partial_dir = root / "partial"
        self.queue_dir = root / "queue"
        self.temp_names = [p.lower() for p in temp_names]
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._usage: dict[str, int] = {}
        self.log = get_logger(component="spool")

    # -- start-up ---------------------------------------------------------------------
    def open(self) -> Spool:
        for d in (self.root, self.inbox_root, self.partial_dir, self.queue_dir):
            d.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        self._recover()
        return self

    def _recover(self) -> None:
        for partial in self.partial_dir.iterdir():
            # A write handle that never saw CLOSE: the client was not told it succeeded.
            with contextlib.suppress(FileNotFoundError):
                size = partial.lstat().st_size
                partial.unlink()
                self.log.info("spool.partial_discarded", file=partial.name, size=size)
        for meta in sorted(self.queue_dir.glob("*.json")):
            data = meta.with_suffix(".data")
            if not data.exists():
                meta.unlink()  # the data rename never happened: that upload was not acked
                continue
            try:
                entry = Entry.from_json(meta.read_bytes())
            except (ValueError, KeyError, TypeError) as exc:
                self.log.error("spool.bad_metadata", file=meta.name, detail=str(exc))
                continue
            self._entries[entry.id] = entry
            self._add_usage(entry.account, entry.size)
        for data in self.queue_dir.glob("*.data"):
            if not data.with_suffix(".json").exists():
                # Never deleted: these are someone's bytes. An admin looks at them.
                self.log.error("spool.orphan_data", file=str(data))
        for account_dir in self.inbox_root.iterdir():
            for dirpath, _dirs, files in os.walk(account_dir):
                for name in files:
                    with contextlib.suppress(OSError):
                        self._add_usage(account_dir.name, os.lstat(Path(dirpath, name)).st_size)
        if self._entries:
            self.log.info("spool.recovered", pending=len(self._entries))
            self.wake.set()

    # -- names ------------------------------------------------------------------------
    def is_temp_name(self, name: str) -> bool:
        lowered = name.lower()
        return any(fnmatch.fnmatchcase(lowered, pattern) for pattern in self.temp_names)

    def inbox(self, account: str) -> Path:
        path = self.inbox_root / account
        path.mkdir(mode=DIR_MODE, exist_ok=True)
        return path

    # -- quota ------------------------------------------------------------------------
    def _add_usage(self, account: str, nbytes: int) -> None:
        self._usage[account] = self._usage.get(account, 0) + nbytes

    def reserve(self, account: str, nbytes: int, limit: int) -> None:
        with self._lock:
            used = self._usage.get(account, 0)
            if nbytes > 0 and used + nbytes > limit:
                raise QuotaExceeded(used, limit)
            self._usage[account] = used + nbytes

    def release(self, account: str, nbytes: int) -> None:
        with self._lock:
            self._usage[account] = max(0, self._usage.get(account, 0) - nbytes)

    def usage(self, account: str) -> int:
        with self._lock:
            return self._usage.get(account, 0)

    # -- uploads ----------------------------------------------------------------------
    def new_partial(self, account: str) -> tuple[Path, int]:
        path = self.partial_dir / f"{account}.{_new_id()}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return path, os.open(path, flags, FILE_MODE)

    def enqueue(self, src: Path, entry: Entry) -> Entry:
        """Move the fsynced file ``src`` into the queue under ``entry``; durable on return."""
        meta = self.queue_dir / f"{entry.id}.json"
        tmp = self.queue_dir / f".tmp-{entry.id}.json"
        # A full spool fails here (ENOSPC, nothing left behind): truncated metadata must
        # never be acked, nor trip recovery later.
        write_new(tmp, entry.to_json(), FILE_MODE)
        os.rename(tmp, meta)
        try:
            os.rename(src, self.queue_dir / f"{entry.id}.data")
        except OSError:
            os.unlink(meta)  # e.g. another session renamed the same temp file first
            raise
        # One directory flush makes both names durable; only then is the client told.
        fsync_dir(self.queue_dir)
        with self._lock:
            self._entries[entry.id] = entry
        self.wake.set()
        return entry

    def make_entry(self, **fields: Any) -> Entry:
        received = datetime.now(UTC).isoformat(timespec="milliseconds")
        return Entry(id=_new_id(), received_at=received, **fields)

    def data_path(self, entry: Entry) -> Path:
        return self.queue_dir / f"{entry.id}.data"

    # -- the client's view of pending files ---------------------------------------------
    def pending(self, account: str, subdir: str) -> list[Entry]:
        with self._lock:
            return [
                e for e in self._entries.values() if e.account == account and e.subdir == subdir
            ]

    def pending_under(self, account: str, subdir: str) -> bool:
        prefix = subdir + "/"
        with self._lock:
            return any(
                e.account == account and (e.subdir == subdir or e.subdir.startswith(prefix))
                for e in self._entries.values()
            )

    def find(self, account: str, subdir: str, filename: str) -> Entry | None:
        found = [e for e in self.pending(account, subdir) if e.filename == filename]
        return max(found, key=lambda e: e.id) if found else None

    def remove(self, entry: Entry) -> bool:
        """Withdraw a pending upload (the client deleted it). False if intake has it."""
        with self._lock:
            if entry.claimed or entry.id not in self._entries:
                return False
            del self._entries[entry.id]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.data_path(entry))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.queue_dir / f"{entry.id}.json")
        fsync_dir(self.queue_dir)
        self.release(entry.account, entry.size)
        return True

    def rename(self, entry: Entry, subdir: str, filename: str) -> bool:
        """Change a pending upload's name (the client renamed it). False if intake has it."""
        with self._lock:
            if entry.claimed or entry.id not in self._entries:
                return False
            updated = Entry(**{k: getattr(entry, k) for k in Entry._PERSISTED})
            updated.subdir, updated.filename = subdir, filename
            tmp = self.queue_dir / f".tmp-{entry.id}.json"
            with open(tmp, "wb") as fh:
                fh.write(updated.to_json())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.queue_dir / f"{entry.id}.json")
            fsync_dir(self.queue_dir)
            entry.subdir, entry.filename = subdir, filename
            return True

    # -- the intake side ----------------------------------------------------------------
    def claim_ready(self, now: float, limit: int) -> list[Entry]:
        out: list[Entry] = []
        with self._lock:
            # Insertion order is upload order (ids are time-ordered; recovery inserts sorted).
            for entry in self._entries.values():
                if len(out) >= limit:
                    break
                if not entry.claimed and entry.due <= now:
                    entry.claimed = True
                    out.append(entry)
        return out

    def next_due(self) -> float | None:
        with self._lock:
            dues = [e.due for e in self._entries.values() if not e.claimed]
        return min(dues) if dues else None

    def unclaim(self, entry: Entry, delay: float) -> None:
        with self._lock:
            entry.attempts += 1
            entry.due = time.monotonic() + delay
            entry.claimed = False

    def finish(self, entry: Entry) -> None:
        """Intake committed (or quarantined) the entry: drop its metadata."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.data_path(entry))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.queue_dir / f"{entry.id}.json")
        with self._lock:
            self._entries.pop(entry.id, None)
        self.release(entry.account, entry.size)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {
                "pending": len(self._entries),
                "inflight": sum(1 for e in self._entries.values() if e.claimed),
                "bytes": sum(e.size for e in self._entries.values()),
            }


def spool_counts(spool_root: Path) -> dict[str, int]:
    """Pending uploads as seen on disk, for `ingestd status` (another process)."""
    queue = spool_root / "queue"
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
