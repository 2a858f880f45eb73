"""Committed files that cannot leave their hot folder: only their removal is retried.

A file whose document is committed but whose removal (or move to ``done``) failed is
never ingested or copied again; the removal is retried quietly with backoff, reported
once (``watch.source_not_removable``, a ``file.not_removable`` event) and once more when
it worked (``watch.source_removed``). A file that must never be touched (its folder
resolves into the archive) is kept without retries. A stuck file is forgotten when it
goes or changes: a new file of the same name is a new file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ingestd.config.pathcheck import ProtectedPaths
from ingestd.config.settings import HotfoldersConfig
from ingestd.errors import SourceProtected
from ingestd.events.outbox import EventLog
from ingestd.intake.fsops import why_not_removable
from ingestd.intake.source_file import move_source, remove_source
from ingestd.log import Logger
from ingestd.runtime import metrics
from ingestd.sources import retry
from ingestd.sources.hotfolders.folders import Folder
from ingestd.sources.hotfolders.table import FileTable, PendingFile, StuckAction, StuckFile
from ingestd.sources.hotfolders.why import access_fix

# The daemon's state file (`ingestd status`) lists this many stuck files, and the total.
STUCK_SHOWN = 100


def identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What makes a file the same file: device, inode, size, mtime."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def done_dir(folder: Folder, subdir: str) -> Path:
    """Where a committed file of ``folder``'s ``subdir`` is moved (``done`` configured)."""
    assert folder.cfg.done is not None
    return folder.cfg.done / subdir if subdir else folder.cfg.done


class StuckFiles:
    """The stuck files of all hot folders (in ``table.stuck``, under ``table.lock``)."""

    def __init__(
        self, table: FileTable, settings: HotfoldersConfig, log: Logger, events: EventLog | None
    ) -> None:
        self.table = table
        self.settings = settings  # swapped on reload
        self.log = log
        self.events = events

    def mark(
        self,
        path: Path,
        pending: PendingFile,
        action: StuckAction,
        reason: str,
        document_id: int | None,
        *,
        log_it: bool = True,
    ) -> None:
        try:
            ident = identity(os.lstat(path))
        except OSError:
            return  # gone meanwhile: nothing is stuck
        stuck = StuckFile(pending.folder, ident, action, reason, document_id, pending.trace)
        due = time.monotonic() + retry.delay(0, self.settings.retry_max_delay, retry.Cause.source)
        with self.table.lock:
            self.table.stuck[path] = stuck
            if action != StuckAction.keep:  # never touched again: not even retried
                self.table.schedule_stuck(path, stuck, due)
        tenant = pending.folder.cfg.tenant
        metrics.WATCH_RETRIED.labels(tenant, f"stuck_{action}").inc()
        if not log_it:
            return
        # Once per file: its removal is retried quietly until it works.
        self.log.error(
            "watch.source_not_removable",
            tenant=tenant,
            folder=pending.folder.name,
            filename=path.name,
            path=str(path),
            document_id=document_id,
            action=action,
            reason=reason,
            trace=pending.trace,
        )
        if self.events is not None:
            self.events.emit(
                "file.not_removable",
                "warning",
                tenant,
                {
                    "filename": path.name,
                    "path": str(path),
                    "document_id": document_id,
                    "source": f"watch:{pending.folder.cfg.path}",
                    "reason": f"cannot {action}",
                    "detail": reason,
                },
                trace_id=pending.trace,
                dedupe=f"stuck:{path.parent}",
            )

    def still_stuck(self, path: Path, stuck: StuckFile) -> bool:
        """Is ``path`` still the file that got stuck? Forgets it if not."""
        try:
            same = identity(os.lstat(path)) == stuck.identity
        except OSError:
            same = False
        if not same:
            with self.table.lock:
                if self.table.stuck.get(path) is stuck:
                    del self.table.stuck[path]
        return same

    def retry(self, path: Path, stuck: StuckFile, protected: ProtectedPaths | None) -> None:
        """Try the removal (or the move to done) of a committed file once more."""
        if not self.still_stuck(path, stuck):
            return
        try:
            if stuck.action == StuckAction.remove:
                remove_source(path, protected)
            else:
                rel = path.relative_to(stuck.folder.cfg.path)
                subdir = "/".join(rel.parts[:-1])
                move_source(path, done_dir(stuck.folder, subdir), protected)
        except (OSError, SourceProtected) as exc:
            stuck.attempts += 1
            due = time.monotonic() + retry.delay(
                stuck.attempts, self.settings.retry_max_delay, retry.Cause.source
            )
            with self.table.lock:
                if isinstance(exc, SourceProtected):
                    stuck.action, stuck.reason = StuckAction.keep, exc.message
                elif self.table.stuck.get(path) is stuck:
                    # As it is now (`ingestd status` must not show a mode fixed since).
                    stuck.reason = why_not_removable(path, exc)
                    self.table.schedule_stuck(path, stuck, due)
            return
        with self.table.lock:
            self.table.stuck.pop(path, None)
        self.log.info(
            "watch.source_removed",
            tenant=stuck.folder.cfg.tenant,
            folder=stuck.folder.name,
            filename=path.name,
            action=stuck.action,
            after_attempts=stuck.attempts + 1,
            document_id=stuck.document_id,
            trace=stuck.trace,
        )

    def status(self) -> tuple[list[dict[str, Any]], int]:
        """The first ``STUCK_SHOWN`` stuck files for the state file, and how many there are."""
        with self.table.lock:
            items = sorted(self.table.stuck.items())
        shown = [
            {
                "path": str(p),
                "tenant": s.folder.cfg.tenant,
                "action": s.action,
                "reason": s.reason,
                "document_id": s.document_id,
                "since": s.since,
                "attempts": s.attempts,
                "trace": s.trace,
                "fix": _fix(p, s),
            }
            for p, s in items[:STUCK_SHOWN]
        ]
        return shown, len(items)


def _fix(path: Path, stuck: StuckFile) -> str | None:
    """The command that lets this process remove ``path`` (or move it to done), if the
    folder's permissions are what stops it."""
    if stuck.action == StuckAction.keep or os.access(path.parent, os.W_OK | os.X_OK):
        return None
    return access_fix(path.parent, "wx")
