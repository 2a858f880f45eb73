"""Pending files: noticing them, and deciding when one is complete.

A file is complete when its size and mtime are unchanged for ``stable_seconds`` and,
where the kernel can tell (a Linux read lease), no local process holds it open for
writing; temp and system names (``hotfolders.ignore``) are never taken.

The settle thread costs in proportion to what changed, not to what waits: only due heap
entries are looked at (see ``table``), and no file is lstat()ed before its stability
window can have passed. An event during the window only moves the file's
``changed_at``; its entry, when due, reschedules itself.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ingestd.config.pathcheck import ProtectedPaths
from ingestd.config.settings import HotfoldersConfig
from ingestd.log import Logger
from ingestd.runtime import health, metrics
from ingestd.sources.hotfolders.folders import Folder, FolderKey, ignore_matcher
from ingestd.sources.hotfolders.stuck import StuckFiles
from ingestd.sources.hotfolders.table import FileTable, PendingFile, StuckAction
from ingestd.sources.hotfolders.writers import WriterCheck


class Settler:
    """Notes files as events and scans find them; hands each to ``take`` once complete.

    ``local(key)``: whether the folder's ctimes are from our clock. ``protected()``: the
    paths intake must never remove (for the retry of a stuck file). Both are asked at
    each use: a reload swaps them.
    """

    def __init__(
        self,
        table: FileTable,
        stuck: StuckFiles,
        settings: HotfoldersConfig,
        *,
        take: Callable[[Path, PendingFile], None],
        local: Callable[[FolderKey], bool],
        protected: Callable[[], ProtectedPaths | None],
        stats: dict[str, int],
        tick: float,
    ) -> None:
        self.table = table
        self.stuck = stuck
        self.take = take
        self.local = local
        self.protected = protected
        self.stats = stats
        self.tick = tick
        # Set when an intake thread frees a slot, so the next due file goes at once
        # instead of waiting for the next tick.
        self.wake = threading.Event()
        self.writers = WriterCheck()
        self.apply(settings)

    def apply(self, settings: HotfoldersConfig) -> None:
        self.settings = settings
        self._ignore_re = ignore_matcher([p.lower() for p in settings.ignore])

    # -- noticing files -----------------------------------------------------------------
    def _ignored(self, folder: Folder, path: Path) -> bool:
        try:
            rel = path.relative_to(folder.cfg.path)
        except ValueError:
            return True  # not below this folder at all
        match = self._ignore_re
        return match is not None and any(match.match(part.lower()) for part in rel.parts)

    def note(self, folder: Folder, path: Path, *, closed: bool = False) -> None:
        """A file may have appeared or changed: (re)start its stability window. No lstat:
        the settle thread looks once the window can have passed. ``closed`` (its writer
        closed it) restarts the window like any other event."""
        if self._ignored(folder, path):
            return
        now = time.monotonic()
        table = self.table
        with table.lock:
            if path in table.inflight:
                return
            stuck = table.stuck.get(path)
        if stuck is not None and self.stuck.still_stuck(path, stuck):
            return  # decided already: only its removal is retried (StuckFiles.retry)
        with table.lock:
            current = table.folders.get(folder.key)
            if current is None:
                return
            window = self.settings.stable_seconds
            pending = table.pending.get(path)
            if pending is None:
                pending = table.pending[path] = PendingFile(current, changed_at=now)
                table.schedule_pending(path, pending, now + window)
                metrics.WATCH_SEEN.labels(current.cfg.tenant).inc()
            elif pending.attempts == 0:
                # Activity: the window starts again (a retry keeps its backoff instead).
                # Its heap entry stays; when due it sees the new changed_at and moves on.
                pending.changed_at = now
                if pending.due > now + window:
                    table.schedule_pending(path, pending, now + window)

    def forget(self, path: Path) -> None:
        with self.table.lock:
            self.table.pending.pop(path, None)  # its heap entry is now stale

    def scan_tree(self, folder: Folder, top: Path) -> int:
        """Note every file below ``top`` (startup, rescan, new sub-folder). No links followed."""
        found = 0
        table = self.table

        def unlistable(err: OSError) -> None:
            if isinstance(err, PermissionError) and err.filename is not None:
                with table.lock:
                    table.unlistable[Path(os.fsdecode(err.filename))] = folder

        for dirpath, dirs, files in os.walk(top, followlinks=False, onerror=unlistable):
            base = Path(dirpath)
            if table.unlistable:  # listed now: no longer in the way
                with table.lock:
                    table.unlistable.pop(base, None)
            keep = []
            for d in dirs:
                if (base / d).is_symlink():
                    files.append(d)  # a symlinked folder is refused like a symlinked file
                elif not self._ignored(folder, base / d):
                    keep.append(d)
            dirs[:] = keep
            for f in files:
                self.note(folder, base / f)
                found += 1
        return found

    # -- deciding completeness ----------------------------------------------------------
    def run(self, stop: threading.Event, log: Logger) -> None:
        """The settle thread: a pass every ``tick`` or as soon as a slot frees."""
        while not stop.is_set():
            health.beat("watch.settle", self.tick)
            self.wake.wait(self.tick)
            self.wake.clear()
            try:
                self.settle_once()
            except Exception:
                log.exception("watch.settle_error")

    def settle_once(self) -> None:
        """Look at what is due, nothing else: O(due · log pending) per pass."""
        now = time.monotonic()
        table = self.table
        while True:
            with table.lock:
                item = table.next_stuck(now)
                if item is not None and table.folders.get(item[1].folder.key) is None:
                    # Its folder is gone (unmounted, say): not a reason to forget a
                    # committed file that may come back with it. Asked again later.
                    table.schedule_stuck(*item, now + self.settings.retry_max_delay)
                    continue
            if item is None:
                break
            if item[1].action != StuckAction.keep:
                self.stuck.retry(*item, self.protected())
        capacity = self.settings.workers * 2  # bounded hand-off queue: memory stays flat
        while True:
            with table.lock:
                if len(table.inflight) >= capacity:
                    break  # the due rest waits in the heap; a finished intake wakes us
                got = table.next_pending(now)
            if got is None:
                break
            self.stats["popped"] += 1
            self.settle_one(*got, now)

    def settle_one(self, path: Path, pending: PendingFile, now: float) -> None:
        """A due pending file: hand it to intake, or schedule its next look."""
        window = self.settings.stable_seconds
        changed_at = pending.changed_at
        table = self.table
        if pending.attempts == 0 and now < changed_at + window:
            # Events restarted its window since it was scheduled: no lstat, look later.
            with table.lock:
                if table.pending.get(path) is pending:
                    table.schedule_pending(path, pending, changed_at + window)
            return
        verdict = self.ready(path, pending, now)
        with table.lock:
            if table.pending.get(path) is not pending:
                return  # forgotten meanwhile (deleted, its folder gone)
            if verdict is None:
                del table.pending[path]
                return
            if verdict is not True or pending.changed_at != changed_at:
                due = verdict if verdict is not True else pending.changed_at + window
                table.schedule_pending(path, pending, due)
                return
            del table.pending[path]
            table.inflight.add(path)
        self.stats["taken"] += 1
        self.take(path, pending)

    def ready(self, path: Path, pending: PendingFile, now: float) -> Literal[True] | float | None:
        """Is ``path`` complete? True: take it; a time: look again then; None: it is gone.

        Complete: unchanged for ``stable_seconds`` (no event, and by the file itself) and,
        where the kernel can tell, open for writing nowhere. On a local filesystem the file
        says since when it is unchanged (its ctime: any write, truncate, utimes or rename
        sets it, and only the kernel can), so one look suffices; on a network share, whose
        clock may differ from ours, our own two looks a window apart must agree. A retry
        whose file did not change is taken at once (no second window).
        """
        self.stats["looked"] += 1
        window = self.settings.stable_seconds
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError:
            return now + window
        if not stat.S_ISREG(st.st_mode):
            return True  # links, FIFOs, devices: no content to wait for; intake refuses them
        seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        age = (time.time_ns() - st.st_ctime_ns) / 1e9
        if self.local(pending.folder.key) and age >= 0:
            quiet_since = now - age
        elif seen != pending.seen:  # (also a local ctime in the future: clock set back)
            quiet_since = now
        else:
            quiet_since = pending.quiet_since
        pending.seen, pending.quiet_since = seen, quiet_since
        last = quiet_since if pending.attempts else max(pending.changed_at, quiet_since)
        if now - last < window:
            return last + window
        if self.writers.writer_active(path):
            # Someone still has it open for writing (a paused writer): not complete.
            pending.quiet_since = now
            return now + window
        return True
