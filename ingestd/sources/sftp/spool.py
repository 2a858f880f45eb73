"""The durable SFTP spool: where an upload lives from CLOSE until intake has committed it.

Layout under ``paths.spool`` (one filesystem, so every hand-over is a rename):

    inbox/<account>/...     what the client sees: its directories and closed files that
                            still carry a temp name (``scan.pdf.part``)
    partial/<account>.<id>  the bytes of an open write handle; private to that handle,
                            so two scanners writing the same name never share a file
    queue/<id>.data         a completed upload's bytes, its metadata (account, tenant,
                            name, ...) in the file's extended attribute user.ingestd.entry
    queue/<id>.json         ... or beside it, where the filesystem keeps no such attribute
                            (and for entries written before the attribute was used)

The metadata is written into the partial file before its fsync, so the one fsync that
makes the bytes durable makes their metadata durable too (a second file would need its
own). An upload is acknowledged (the CLOSE reply) only after that fsync, the rename into
``queue/`` and the queue directory's fsync: from then on it survives
a crash or power loss, whether or not Postgres is up. Anything in ``partial/`` at start
belongs to a connection that dropped before CLOSE; it is deleted (no document).

Quota ledger: an account's pending bytes are what waits in the queue and in its inbox
(temp-named files), plus what its open uploads have reserved. Open reservations are kept
per *owner*, the SFTP process holding the upload (``LOCAL`` for this process's own
server): when an SFTP process dies, its open uploads die with it, and ``forget`` drops
their reservations and partial files in one go. SFTP processes reach this ledger and the
queue's index through their supervisor (``SpoolClient`` in spool_client.py); the files
they write themselves.
"""

from __future__ import annotations

import contextlib
import errno
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
from typing import Any, Protocol

from ingestd.durable import SharedDirFlush, fsync_dir, write_new
from ingestd.errors import ExitCode, IngestdError
from ingestd.log import get_logger
from ingestd.ops.faults import crashpoint

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


# The owner of the uploads this process's own server holds open (not an SFTP process's).
LOCAL = ""
# A queue file's entry (Entry.to_json) lives in this extended attribute of the file.
XATTR = "user.ingestd.entry"
# "No such attribute here", not a failing disk: the entry goes into a file beside the data.
_NO_XATTR = (errno.ENOTSUP, errno.EOPNOTSUPP, errno.E2BIG, errno.ERANGE)


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


def account_inbox(inbox_root: Path, account: str) -> Path:
    """The account's inbox (made on first use)."""
    path = inbox_root / account
    path.mkdir(mode=DIR_MODE, exist_ok=True)
    return path


def is_temp_name(patterns: Iterable[str], name: str) -> bool:
    """Whether ``name`` matches one of the (lower-case) temp-name patterns."""
    lowered = name.lower()
    return any(fnmatch.fnmatchcase(lowered, pattern) for pattern in patterns)


def make_entry(**fields: Any) -> Entry:
    received = datetime.now(UTC).isoformat(timespec="milliseconds")
    return Entry(id=_new_id(), received_at=received, **fields)


def new_partial(partial_dir: Path, account: str, owner: str) -> tuple[Path, int]:
    """A new private file for an open write handle; its name starts with its owner's."""
    prefix = f"{owner}-" if owner else ""
    path = partial_dir / f"{prefix}{account}.{_new_id()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return path, os.open(path, flags, FILE_MODE)


def label(target: int | Path, entry: Entry) -> bool:
    """Write ``entry`` into the extended attribute of its data file (a descriptor or a
    path): one fsync of the file then makes bytes and metadata durable together. False
    where the filesystem keeps no such attribute (or none that large): the entry then goes
    into a file of its own beside the data."""
    try:
        os.setxattr(target, XATTR, entry.to_json())
    except OSError as exc:
        if exc.errno in _NO_XATTR:
            return False
        raise
    return True


def load_entry(data: Path) -> Entry | None:
    """The entry of the queue file ``data``: from its attribute, else from the file beside
    it; None if it has neither. ValueError & co for metadata that does not parse."""
    try:
        raw = os.getxattr(data, XATTR)
    except OSError as exc:
        if exc.errno not in (*_NO_XATTR, errno.ENODATA):
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
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SpoolView(Protocol):
    """What an SFTP session uses of the spool: the ``Spool`` itself in this process, a
    ``SpoolClient`` in an SFTP process."""

    temp_names: list[str]

    def is_temp_name(self, name: str) -> bool: ...
    def inbox(self, account: str) -> Path: ...
    def new_partial(self, account: str) -> tuple[Path, int]: ...
    def upload_ended(self, account: str) -> None: ...
    def reserve(self, account: str, nbytes: int, limit: int) -> None: ...
    def release(self, account: str, nbytes: int) -> None: ...
    def stage(self, account: str, reserved: int, size: int) -> None: ...
    def release_staged(self, account: str, nbytes: int) -> None: ...
    def make_entry(self, **fields: Any) -> Entry: ...
    def enqueue(
        self, src: Path, entry: Entry, *, reserved: int, staged: int = 0, labelled: bool = False
    ) -> Entry: ...
    def pending(self, account: str, subdir: str) -> list[Entry]: ...
    def pending_under(self, account: str, subdir: str) -> bool: ...
    def find(self, account: str, subdir: str, filename: str) -> Entry | None: ...
    def remove(self, entry: Entry) -> bool: ...
    def rename(self, entry: Entry, subdir: str, filename: str) -> bool: ...


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

    def __reduce__(self) -> tuple[type[QuotaExceeded], tuple[int, int]]:
        return QuotaExceeded, (self.used, self.limit)  # crosses from the supervisor


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
        # account -> bytes waiting in the queue and in its inbox (temp-named files)
        self._held: dict[str, int] = {}
        # (owner, account) -> bytes reserved by that owner's open uploads
        self._open: dict[tuple[str, str], int] = {}
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
        for meta in self.queue_dir.glob("*.json"):
            if not meta.with_suffix(".data").exists():
                meta.unlink()  # the data rename never happened: that upload was not acked
        for data in sorted(self.queue_dir.glob("*.data")):  # ids are time-ordered
            try:
                entry = load_entry(data)
            except (ValueError, KeyError, TypeError) as exc:
                self.log.error("spool.bad_metadata", file=data.name, detail=str(exc))
                continue
            if entry is None:
                # Never deleted: these are someone's bytes. An admin looks at them.
                self.log.error("spool.orphan_data", file=str(data))
                continue
            self._entries[entry.id] = entry
            self._hold(entry.account, entry.size)
        for account, nbytes in inbox_usage(self.inbox_root).items():
            self._hold(account, nbytes)
        if self._entries:
            self.log.info("spool.recovered", pending=len(self._entries))
            self.wake.set()

    # -- names ------------------------------------------------------------------------
    def is_temp_name(self, name: str) -> bool:
        return is_temp_name(self.temp_names, name)

    def inbox(self, account: str) -> Path:
        return account_inbox(self.inbox_root, account)

    # -- quota ------------------------------------------------------------------------
    def _hold(self, account: str, nbytes: int) -> None:
        """With the lock held (or at start): ``nbytes`` more (or fewer) waiting."""
        self._held[account] = max(0, self._held.get(account, 0) + nbytes)

    def _reserved(self, owner: str, account: str, nbytes: int) -> None:
        key = (owner, account)
        left = max(0, self._open.get(key, 0) + nbytes)
        if left:
            self._open[key] = left
        else:
            self._open.pop(key, None)

    def _usage(self, account: str) -> int:
        opened = sum(n for (_, acct), n in self._open.items() if acct == account)
        return self._held.get(account, 0) + opened

    def reserve(self, account: str, nbytes: int, limit: int, owner: str = LOCAL) -> None:
        """``nbytes`` more for an open upload, or QuotaExceeded."""
        self.grant(account, nbytes, nbytes, limit, owner)

    def grant(self, account: str, want: int, need: int, limit: int, owner: str) -> int:
        """Reserve ``want`` bytes if they fit under ``limit``, else ``need``, else raise
        QuotaExceeded (with what the account holds besides ``owner``'s reservations).
        SFTP processes ask for more than they need so that not every WRITE is a round
        trip; what they do not use they give back when their last upload ends."""
        with self._lock:
            used = self._usage(account)
            for amount in (want, need):
                if amount <= 0 or used + amount <= limit:
                    self._reserved(owner, account, max(0, amount))
                    return max(0, amount)
            # An SFTP process adds what its own uploads hold (SpoolClient.reserve); the
            # credit it holds but has not spent is not the account's.
            mine = self._open.get((owner, account), 0) if owner != LOCAL else 0
        raise QuotaExceeded(used - mine, limit)

    def release(self, account: str, nbytes: int, owner: str = LOCAL) -> None:
        """An open upload gave back ``nbytes`` (it ended without a file, or shrank)."""
        with self._lock:
            self._reserved(owner, account, -nbytes)

    def stage(self, account: str, reserved: int, size: int, owner: str = LOCAL) -> None:
        """An open upload that reserved ``reserved`` bytes is now a ``size``-byte temp-named
        file in the inbox."""
        with self._lock:
            self._reserved(owner, account, -reserved)
            self._hold(account, size)

    def release_staged(self, account: str, nbytes: int) -> None:
        """A temp-named file of ``nbytes`` left the inbox (removed, replaced, swept)."""
        with self._lock:
            self._hold(account, -nbytes)

    def forget(self, owner: str) -> int:
        """``owner`` (an SFTP process) is gone: its open uploads' reservations and partial
        files go too (those clients were never told their uploads succeeded). Returns the
        number of partial files deleted."""
        with self._lock:
            for key in [k for k in self._open if k[0] == owner]:
                del self._open[key]
        removed = 0
        for partial in self.partial_dir.glob(f"{owner}-*"):
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
                removed += 1
        return removed

    def usage(self, account: str) -> int:
        with self._lock:
            return self._usage(account)

    # -- uploads ----------------------------------------------------------------------
    def new_partial(self, account: str, owner: str = LOCAL) -> tuple[Path, int]:
        return new_partial(self.partial_dir, account, owner)

    def upload_ended(self, account: str) -> None:
        """An upload handle is done (here: nothing to settle; see SpoolClient)."""

    def enqueue(
        self,
        src: Path,
        entry: Entry,
        *,
        reserved: int,
        staged: int = 0,
        labelled: bool = False,
        owner: str = LOCAL,
    ) -> Entry:
        """Move the fsynced file ``src`` into the queue under ``entry``; durable on return.
        ``reserved``: what its open upload had reserved; ``staged``: its bytes already
        held as a temp-named inbox file (a rename to the final name); ``labelled``: see
        ``write_entry``."""
        write_entry(self.queue_dir, src, entry, labelled=labelled)
        return self.accept(entry, reserved=reserved, staged=staged, owner=owner)

    def accept(self, entry: Entry, *, reserved: int, staged: int, owner: str) -> Entry:
        """``entry`` is durable in the queue (written here or by an SFTP process): index it
        and wake intake."""
        with self._lock:
            self._reserved(owner, entry.account, -reserved)
            self._hold(entry.account, entry.size - staged)
            self._entries[entry.id] = entry
        self.wake.set()
        return entry

    def make_entry(self, **fields: Any) -> Entry:
        return make_entry(**fields)

    def data_path(self, entry: Entry) -> Path:
        return self.queue_dir / f"{entry.id}.data"

    # -- the client's view of pending files ---------------------------------------------
    def reindex(self) -> int:
        """Index queue entries that are on disk but not known here: an SFTP process that
        died between writing an entry and reporting it. Returns how many were found."""
        found = 0
        for data in sorted(self.queue_dir.glob("*.data")):
            entry_id = data.name.removesuffix(".data")
            with self._lock:
                if entry_id in self._entries:
                    continue
            try:
                entry = load_entry(data)
            except (OSError, ValueError, KeyError, TypeError):
                continue  # gone meanwhile, or as bad as recovery at start will say
            if entry is None:
                continue
            with self._lock:
                self._entries[entry.id] = entry
            found += 1
        # What the queue and the inboxes hold, counted again: a process may also have died
        # between moving a temp-named file into the queue and saying so.
        held: dict[str, int] = {}
        with self._lock:
            for e in self._entries.values():
                held[e.account] = held.get(e.account, 0) + e.size
        for account, nbytes in inbox_usage(self.inbox_root).items():
            held[account] = held.get(account, 0) + nbytes
        with self._lock:
            self._held = held
        if found:
            self.wake.set()
        return found

    def entry(self, entry_id: str) -> Entry | None:
        with self._lock:
            return self._entries.get(entry_id)

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
        self.release_staged(entry.account, entry.size)
        return True

    def rename(self, entry: Entry, subdir: str, filename: str) -> bool:
        """Change a pending upload's name (the client renamed it). False if intake has it."""
        with self._lock:
            if entry.claimed or entry.id not in self._entries:
                return False
            updated = Entry(**{k: getattr(entry, k) for k in Entry._PERSISTED})
            updated.subdir, updated.filename = subdir, filename
            data = self.data_path(entry)
            sidecar = self.queue_dir / f"{entry.id}.json"
            if not sidecar.exists() and label(data, updated):
                fsync_path(data)
            else:
                tmp = self.queue_dir / f".tmp-{entry.id}.json"
                with open(tmp, "wb") as fh:
                    fh.write(updated.to_json())
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, sidecar)
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
            self._hold(entry.account, -entry.size)

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
