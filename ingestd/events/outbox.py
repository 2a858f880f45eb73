"""Operator events decided outside a transaction: the daemon's (a file quarantined or
refused, an SFTP ban), written even while Postgres is down.

``EventLog.emit`` inserts the event into ``operator_events`` (the outbox of
notifications, migration 0008) with an event id and time made here. If the database is
unavailable, the event is written as a JSON file under ``<state_dir>/events/`` instead
(temp file, fsync, rename, directory fsync: a crash leaves a whole file or none), and
``flush`` inserts those files in the order they were written once the database is back,
deleting each after its COMMIT. The insert is idempotent by event id, so a crash between
the COMMIT and the delete only makes the next flush a no-op for that file.

While any event waits on disk, new ones go to disk too (and the database is not tried
from the caller's thread at all): the order of events stays the order they happened,
and an SFTP or intake thread never waits for a database that is down. The background
thread (``start``/``stop``) flushes every few seconds.

The buffer is bounded (``max_files``): past it the oldest files are dropped, with one
warning line per outage (``events.buffer_full``) and the count in the line that reports
the flush once the database is back (``events.flushed``).

The detail keys the notification texts use (``worker/notify.py``), for the callers:

- ``file.quarantined`` / ``file.refused``: ``filename``, ``source`` (``sftp:<account>``,
  ``watch:<folder>``), ``reason`` (a short code or phrase), ``detail`` (the sentence),
  ``moved_to`` (where the file is now, beside its ``.error.txt``)
- ``arrival.<outcome>``: not operator events but arrivals (ingestd/arrivals/record.py),
  written to the ``arrivals`` table through the same buffer
- ``sftp.banned``: ``remote_ip``, ``seconds`` (the ban's length), ``ban_count``,
  optionally ``username`` (the last one tried)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

from ingestd import log
from ingestd.arrivals.record import EVENT_PREFIX, event_params
from ingestd.db.database import Database, Tx, jsonb
from ingestd.durable import fsync_dir
from ingestd.errors import DatabaseError, DatabaseUnavailable
from ingestd.textsafe import recordable, recordable_text

Severity = Literal["info", "warning", "error"]
SEVERITIES: tuple[str, ...] = ("info", "warning", "error")
# The CHECK of operator_events.type: checked here, so a file on disk can always be inserted.
EVENT_TYPE = re.compile(r"^[a-z_]+(\.[a-z_]+)+$")
TENANT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")

DEFAULT_MAX_FILES = 10_000  # about 1 KiB each
DEDUPE_SECONDS = 600.0
DEDUPE_KEYS = 10_000
DEFAULT_FLUSH_EVERY = 5.0
FLUSH_BATCH = 200  # events per transaction
_TMP_PREFIX = ".tmp-"
_STALE_TMP = 3600.0  # a temp file this old was left by a crash (ours are renamed at once)
_MAX_DETAIL = 64 * 1024


class EventLog:
    """Record operator events from code that has no transaction at hand. Thread-safe."""

    def __init__(
        self,
        db: Database,
        state_dir: Path,
        *,
        max_files: int = DEFAULT_MAX_FILES,
        flush_every: float = DEFAULT_FLUSH_EVERY,
    ) -> None:
        if max_files < 1:
            raise ValueError("max_files must be at least 1")
        self.db = db
        self.dir = Path(state_dir) / "events"
        self.max_files = max_files
        self.flush_every = flush_every
        self.log = log.get_logger(component="events")
        self._lock = threading.Lock()  # the buffer: its file count, offline, dropped
        self._flush_lock = threading.Lock()  # one flush at a time
        self._seq = itertools.count()
        self._files = -1  # files on disk; -1: not counted yet
        self._offline = False  # the last database attempt failed: go to disk first
        self._dropped = 0  # dropped since the buffer last filled up
        self._warned = False  # a flush failed for another reason than "unavailable"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # dedupe key -> time.monotonic() it was last emitted (see ``emit``).
        self._recent: dict[str, float] = {}

    # -- writing ------------------------------------------------------------------------
    def emit(
        self,
        type: str,
        severity: Severity,
        tenant: str | None,
        detail: Mapping[str, Any] | None = None,
        trace_id: str | None = None,
        *,
        dedupe: str | None = None,
        dedupe_seconds: float = DEDUPE_SECONDS,
    ) -> str:
        """Record one event; returns its event id. Never raises for the database or the
        disk (a database that is down buffers it; a disk that fails logs an error);
        ValueError for an event the table would refuse (a bug in the caller).

        ``dedupe``: events with the same key within ``dedupe_seconds`` are one event (a
        scanner that retries a refused upload every minute must not send a mail every
        minute); the repeats return "" and are in the log lines only.
        """
        if dedupe is not None and not self._first_in_window(dedupe, dedupe_seconds):
            return ""
        if not EVENT_TYPE.match(type):
            raise ValueError(f"event type {type!r} must look like 'file.quarantined'")
        if severity not in SEVERITIES:
            raise ValueError(f"severity {severity!r} must be one of {', '.join(SEVERITIES)}")
        if tenant is not None and not TENANT.match(tenant):
            raise ValueError(f"tenant {tenant!r} is not a tenant name")
        # Through JSON now: what is inserted is exactly what a buffered file would hold. A
        # file name's undecodable bytes and NUL are escaped first (ingestd/textsafe.py):
        # Postgres and a UTF-8 file refuse them, and the event must be recorded anyway.
        body = cast(
            dict[str, Any], recordable(json.loads(json.dumps(dict(detail or {}), default=str)))
        )
        if len(json.dumps(body)) > _MAX_DETAIL:
            body = {"truncated": True, "keys": sorted(body)[:100]}
        event_id = str(uuid.uuid4())
        record = {
            "event_id": event_id,
            "type": type,
            "severity": severity,
            "tenant": tenant,
            "detail": body,
            "trace_id": recordable_text(trace_id) if trace_id is not None else None,
            "created_at": datetime.now(UTC).isoformat(),
        }
        with self._lock:
            buffered = self._offline or self._count() > 0
        if not buffered:
            try:
                with self.db.transaction() as tx:
                    _insert(tx, record)
                return event_id
            except DatabaseError as exc:
                # Down (or not migrated yet): keep it on disk for flush().
                with self._lock:
                    first = not self._offline
                    self._offline = True
                if first:
                    self.log.warning("events.buffering", dir=str(self.dir), error=exc.message)
        self._write(record)
        self._wake.set()
        return event_id

    def _first_in_window(self, key: str, seconds: float) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._recent.get(key)
            if last is not None and now - last < seconds:
                return False
            self._recent[key] = now
            if len(self._recent) > DEDUPE_KEYS:  # bounded: forget the expired ones
                self._recent = {k: t for k, t in self._recent.items() if now - t < seconds}
        return True

    def _count(self) -> int:
        # With the lock held.
        if self._files < 0:
            self._files = len(self._pending())
        return self._files

    def _pending(self) -> list[Path]:
        """The buffered event files, oldest first (their names sort by time)."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return [
            self.dir / n
            for n in sorted(names)
            if n.endswith(".json") and not n.startswith(_TMP_PREFIX)
        ]

    def _write(self, record: dict[str, Any]) -> None:
        name = f"{time.time_ns():020d}-{next(self._seq) % 1_000_000:06d}-{record['event_id']}.json"
        data = json.dumps(record, ensure_ascii=False, sort_keys=True).encode()
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o750)
            tmp = self.dir / f"{_TMP_PREFIX}{name}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, self.dir / name)
            fsync_dir(self.dir)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(self.dir / f"{_TMP_PREFIX}{name}")
            self.log.error(
                "events.lost",
                event_type=record["type"],
                tenant=record["tenant"],
                event_id=record["event_id"],
                dir=str(self.dir),
                error=exc.strerror or str(exc),
            )
            return
        with self._lock:
            self._files = self._count() + 1
            over = self._files - self.max_files
        if over > 0:
            self._drop_oldest(over)

    def _drop_oldest(self, n: int) -> None:
        dropped = 0
        for path in self._pending()[:n]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                dropped += 1
        with self._lock:
            self._files = max(0, self._files - dropped)
            first = self._dropped == 0
            self._dropped += dropped
        if first and dropped:
            self.log.warning(
                "events.buffer_full",
                dir=str(self.dir),
                max_files=self.max_files,
                detail="the database is still unavailable; the oldest buffered "
                "events are being dropped",
            )

    # -- flushing -----------------------------------------------------------------------
    def pending(self) -> int:
        """How many events wait on disk."""
        with self._lock:
            self._files = len(self._pending())
            return self._files

    def flush(self) -> int:
        """Insert the buffered events, oldest first, and delete their files; returns how
        many were inserted (an event already in the table counts as done, not inserted).
        Stops at the first database failure; the rest wait for the next flush."""
        with self._flush_lock:
            self._remove_stale_temp()
            inserted = 0
            failed = False
            while True:
                batch = self._pending()[:FLUSH_BATCH]
                if not batch:
                    break
                records = [(p, r) for p in batch if (r := self._read(p)) is not None]
                try:
                    with self.db.transaction() as tx:
                        inserted += sum(_insert(tx, r) for _, r in records)
                except DatabaseError as exc:
                    failed = True
                    with self._lock:
                        self._offline = True
                        warn = not isinstance(exc, DatabaseUnavailable) and not self._warned
                        self._warned = self._warned or warn
                    if warn:  # once until a flush succeeds: not every few seconds
                        self.log.warning(
                            "events.flush_failed", error=exc.message, pending=len(self._pending())
                        )
                    break
                for path, _ in records:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                with contextlib.suppress(OSError):
                    fsync_dir(self.dir)
            with self._lock:
                self._files = len(self._pending())
                dropped = self._dropped
                was_offline = self._offline
                if not failed and self._files == 0:
                    self._offline = False
                    self._dropped = 0
                    self._warned = False
            if inserted or (was_offline and not failed):
                self.log.info("events.flushed", inserted=inserted, dropped=dropped)
            return inserted

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            record = json.loads(path.read_bytes())
            _params(record)  # every key there, with a usable value
            if str(record["type"]).startswith(EVENT_PREFIX):
                event_params(record)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Not one of ours as written (atomic renames leave whole files): keep nothing
            # that would block every later event.
            self.log.error("events.unreadable", file=str(path), error=str(exc))
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        return dict(record)

    def _remove_stale_temp(self) -> None:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return
        now = time.time()
        for name in names:
            if name.startswith(_TMP_PREFIX):
                path = self.dir / name
                with contextlib.suppress(OSError):
                    if now - path.stat().st_mtime > _STALE_TMP:
                        path.unlink()

    # -- the background thread ----------------------------------------------------------
    def start(self) -> None:
        """Flush now and then every ``flush_every`` seconds (sooner after an emit that
        went to disk) in a daemon thread, until ``stop``."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="event-log", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread (one last flush is tried first)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        self._wake.set()
        thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                if self.pending():
                    self.flush()
            except Exception as exc:  # a bug or the disk: say so, keep the thread
                self.log.error("events.flush_error", error=f"{type(exc).__name__}: {exc}")
            if self._stop.is_set():
                return
            self._wake.wait(self.flush_every)
            self._wake.clear()
            if self._stop.is_set():
                with contextlib.suppress(Exception):
                    if self.pending():
                        self.flush()
                return


def _insert(tx: Tx, record: Mapping[str, Any]) -> int:
    """Write one event: an ``arrival.*`` event is a row of ``arrivals`` (idempotent by its
    trace id, ingestd/arrivals/record.py), every other one a row of the outbox."""
    if str(record["type"]).startswith(EVENT_PREFIX):
        tx.one("arrival_note", event_params(record))
        return 1
    return tx.run("operator_event_insert", _params(record))


def _params(record: Mapping[str, Any]) -> dict[str, Any]:
    """The ``operator_event_insert`` parameters of a record (as emitted or read back)."""
    severity = record["severity"]
    if severity not in SEVERITIES or not EVENT_TYPE.match(str(record["type"])):
        raise ValueError("not an operator event")
    detail = record["detail"]
    if not isinstance(detail, dict):
        raise ValueError("detail is not an object")
    return {
        "event_id": str(uuid.UUID(str(record["event_id"]))),
        "type": str(record["type"]),
        "severity": str(severity),
        "tenant": record["tenant"],
        "detail": jsonb(detail),
        "trace_id": record["trace_id"],
        "created_at": datetime.fromisoformat(str(record["created_at"])),
    }
