"""Where each file of the hot folders is, and when it is due: one table, one lock.

A path is in at most one place at a time: *pending* (waiting to be stable or to be
retried), *in flight* (an intake thread has it) or *stuck* (committed, only its removal
is retried). So no file is queued twice.

Pending and stuck files sit in heaps ordered by when they are next due (lazy deletion:
an entry whose sequence number is no longer its file's is skipped), so the settle thread
looks only at what is due, not at everything that waits.
"""

from __future__ import annotations

import enum
import heapq
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from ingestd.log import new_trace_id
from ingestd.sources.hotfolders.folders import Folder, FolderKey


@dataclass
class PendingFile:
    folder: Folder
    # time.monotonic() of the last event (or of the first notice): the stability window
    # runs from here. Events move it; they never touch the heap (see Settler.settle_one).
    changed_at: float = 0.0
    # When the settle thread looks next, and the sequence number of that heap entry.
    due: float = 0.0
    seq: int = 0
    # (inode, size, mtime, ctime) when last looked at, and since when it is unchanged by
    # our own looks (folders whose ctimes cannot be trusted: network shares).
    seen: tuple[int, int, int, int] | None = None
    quiet_since: float = 0.0
    attempts: int = 0
    # The tenant status last reported for this file, and when (time.monotonic()).
    tenant_reported: tuple[str, float] | None = None
    # The file's correlation id, made when it is first taken (kept across retries).
    trace: str = field(default_factory=new_trace_id)
    # Why its last attempt left it in place (a retry.Cause) and the error's text.
    waiting_cause: str | None = None
    waiting_detail: str = ""
    # When it was first noticed (wall clock): the arrival time of its arrival row.
    first_seen: datetime = field(default_factory=lambda: datetime.now(UTC))


class StuckAction(enum.StrEnum):
    """What is still to be done with a committed file that cannot leave its folder."""

    remove = "remove"  # intake's removal after COMMIT failed
    move = "move"  # the move to the ``done`` folder failed
    keep = "keep"  # never to be touched: its folder resolves into the archive


@dataclass
class StuckFile:
    """A file whose intake is decided but that cannot leave the hot folder.

    ``remove``/``move``: committed (a document), but removing it (or moving it to done)
    failed, e.g. a sub-folder another user created with umask 022. Only that step is
    retried, with backoff; the file is never ingested or copied again. ``keep``: it must
    never be touched (its folder resolves into the archive). Either is forgotten when the
    file goes or changes (a new file of the same name is a new file).
    """

    folder: Folder
    identity: tuple[int, int, int, int]
    action: StuckAction
    reason: str
    document_id: int | None
    trace: str
    since: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    attempts: int = 0
    due: float = 0.0
    seq: int = 0  # of its entry in the stuck heap ("keep" has none)


# The heaps hold (due, sequence, path, entry); an entry is live while the entry's seq is
# that sequence and the entry is still its path's in the table (lazy deletion).
_E = TypeVar("_E", PendingFile, StuckFile)


class FileTable:
    """Pending, in-flight and stuck files and the folders being served; every attribute
    is read and written with ``lock`` held."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[Path, PendingFile] = {}
        self.inflight: set[Path] = set()
        self.stuck: dict[Path, StuckFile] = {}
        # Sub-folders a scan could not list (EACCES): their files are unseen until a
        # chmod/chown is noticed (unblock.py) or the next rescan.
        self.unlistable: dict[Path, Folder] = {}
        # The folders armed now: events and results of a folder not here are dropped.
        self.folders: dict[FolderKey, Folder] = {}
        # When each pending / stuck file is due next.
        self._pending_due: list[tuple[float, int, Path, PendingFile]] = []
        self._stuck_due: list[tuple[float, int, Path, StuckFile]] = []
        self._seq = 0

    def schedule_pending(self, path: Path, entry: PendingFile, due: float) -> None:
        """Make ``entry`` due at ``due`` (lock held); any older entry goes stale."""
        self._push(self._pending_due, path, entry, due)

    def schedule_stuck(self, path: Path, entry: StuckFile, due: float) -> None:
        """Make ``entry``'s next retry due at ``due`` (lock held)."""
        self._push(self._stuck_due, path, entry, due)

    def next_pending(self, now: float) -> tuple[Path, PendingFile] | None:
        """The next live pending file due by ``now`` (lock held), or None."""
        return self._pop_due(self._pending_due, self.pending, now)

    def next_stuck(self, now: float) -> tuple[Path, StuckFile] | None:
        """The next live stuck file due by ``now`` (lock held), or None."""
        return self._pop_due(self._stuck_due, self.stuck, now)

    def drop_folder(self, key: FolderKey, *, forget_stuck: bool) -> None:
        """Forget a folder that is disarmed, and its pending files (lock held); its stuck
        ones too if ``forget_stuck``."""
        # First, so that events still on their way are dropped by note().
        self.folders.pop(key, None)
        for path in [p for p, c in self.pending.items() if c.folder.key == key]:
            del self.pending[path]  # its heap entry is now stale
        if forget_stuck:
            for path in [p for p, s in self.stuck.items() if s.folder.key == key]:
                del self.stuck[path]
        for path in [p for p, f in self.unlistable.items() if f.key == key]:
            del self.unlistable[path]  # the folder's next scan finds them again

    def _push(
        self, heap: list[tuple[float, int, Path, _E]], path: Path, entry: _E, due: float
    ) -> None:
        self._seq += 1
        entry.due, entry.seq = due, self._seq
        heapq.heappush(heap, (due, self._seq, path, entry))
        if len(heap) > 2 * (len(self.pending) + len(self.stuck)) + 1024:
            self._compact()

    def _compact(self) -> None:
        """Drop stale heap entries (forgotten files, folders gone) so memory stays flat."""
        self._pending_due = [(c.due, c.seq, p, c) for p, c in self.pending.items()]
        heapq.heapify(self._pending_due)
        self._stuck_due = [
            (s.due, s.seq, p, s) for p, s in self.stuck.items() if s.action != StuckAction.keep
        ]
        heapq.heapify(self._stuck_due)

    @staticmethod
    def _pop_due(
        heap: list[tuple[float, int, Path, _E]], table: dict[Path, _E], now: float
    ) -> tuple[Path, _E] | None:
        while heap and heap[0][0] <= now:
            _due, seq, path, entry = heapq.heappop(heap)
            if entry.seq == seq and table.get(path) is entry:
                return path, entry
        return None
