"""The index of the queue's entries in memory, and intake's claims on them.

Insertion order is upload order (ids are time-ordered; recovery and reindexing insert
them sorted), so intake takes the oldest first. An entry intake has claimed belongs to
intake: the client can no longer remove or rename it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ingestd.sources.sftp.spool_entry import Entry


class SpoolIndex:
    """The queue's entries by id, with intake's claims and retry times."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def add(self, entry: Entry) -> None:
        with self._lock:
            self._entries[entry.id] = entry

    def get(self, entry_id: str) -> Entry | None:
        with self._lock:
            return self._entries.get(entry_id)

    def __contains__(self, entry_id: str) -> bool:
        with self._lock:
            return entry_id in self._entries

    def held(self) -> dict[str, int]:
        """Bytes of the indexed entries per account."""
        held: dict[str, int] = {}
        with self._lock:
            for e in self._entries.values():
                held[e.account] = held.get(e.account, 0) + e.size
        return held

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

    def withdraw(self, entry: Entry) -> bool:
        """Drop a pending entry the client removed. False if intake has it (or it is gone)."""
        with self._lock:
            if entry.claimed or entry.id not in self._entries:
                return False
            del self._entries[entry.id]
            return True

    def rename(
        self, entry: Entry, subdir: str, filename: str, write: Callable[[Entry], None]
    ) -> bool:
        """Rename a pending entry: ``write`` makes the renamed copy durable, with the lock
        held, so intake cannot claim the entry meanwhile. False if intake has it."""
        with self._lock:
            if entry.claimed or entry.id not in self._entries:
                return False
            updated = entry.persisted_copy()
            updated.subdir, updated.filename = subdir, filename
            write(updated)
            entry.subdir, entry.filename = subdir, filename
            return True

    # -- the intake side ----------------------------------------------------------------
    def claim_ready(self, now: float, limit: int) -> list[Entry]:
        """Claim up to ``limit`` entries due by ``now``, oldest first."""
        out: list[Entry] = []
        with self._lock:
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
        """Intake gives ``entry`` back, to be tried again in ``delay`` seconds."""
        with self._lock:
            entry.attempts += 1
            entry.due = time.monotonic() + delay
            entry.claimed = False

    def pop(self, entry: Entry) -> None:
        with self._lock:
            self._entries.pop(entry.id, None)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {
                "pending": len(self._entries),
                "inflight": sum(1 for e in self._entries.values() if e.claimed),
                "bytes": sum(e.size for e in self._entries.values()),
            }
