"""Hot folders: the watcher of all [[watch]] folders, and what it does with a complete file.

The watcher never writes to the archive or the database. Its only jobs are:

* notice files: watchdog events (inotify, or polling for network mounts), a scan at
  start and a periodic rescan for anything whose event was lost (``observers``,
  ``pending``);
* decide when a file is complete (``pending``);
* afterwards (``handoff``, the same as the SFTP spool's): the source is gone (intake
  removed it after COMMIT) or moved to ``done``; a permanent refusal goes to ``failed``
  with a note; a transient failure leaves the file where it is and retries with backoff;
  a committed file that cannot be removed is stuck (``stuck``). A file of a tenant that
  is not active stays too; it is reported once (``watch.tenant_not_active``), again when
  the tenant's status changes and at most once per ``TENANT_REPORT_INTERVAL`` while it
  waits.

Where each file is, and when it is due, is one table under one lock (``table``).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ingestd.config.settings import Config
from ingestd.errors import DatabaseError, TenantError
from ingestd.events.outbox import EventLog
from ingestd.intake.fsops import why_not_removable
from ingestd.intake.ingest import Intake
from ingestd.intake.items import Disposal, IntakeItem, IntakeResult, SourcePolicy
from ingestd.intake.source_file import move_source
from ingestd.log import get_logger
from ingestd.sources import retry
from ingestd.sources.handoff import Handoff, Source, subfolder_tags, tenant_reason, tenant_status_of
from ingestd.sources.hotfolders.folders import Folder
from ingestd.sources.hotfolders.observers import FolderObservers
from ingestd.sources.hotfolders.pending import Settler
from ingestd.sources.hotfolders.stuck import StuckFiles, done_dir
from ingestd.sources.hotfolders.table import FileTable, PendingFile, StuckAction
from ingestd.sources.hotfolders.unblock import Unblocker
from ingestd.states import TenantStatus

# A file waiting for its tenant to become active is reported again after this many seconds.
TENANT_REPORT_INTERVAL = 3600.0


class HotFolders:
    """All [[watch]] folders of one daemon; thread-safe; reloadable."""

    def __init__(
        self, config: Config, intake: Intake, *, tick: float = 0.1, events: EventLog | None = None
    ) -> None:
        self.intake = intake
        # Quarantined and stuck files are operator events (file.quarantined, ...).
        self.events = events
        self.handoff = Handoff(Source.watch, events)
        self.log = get_logger(component="watch")
        self.files = FileTable()
        self._stop = threading.Event()
        self.tenant_report_interval = TENANT_REPORT_INTERVAL
        # What the settle thread did (tests, benchmarks): files looked at (one lstat each),
        # heap entries popped, files handed to intake; and folder checks (one stat a root).
        self.stats = {"looked": 0, "popped": 0, "taken": 0, "folder_checks": 0}
        self._threads: list[threading.Thread] = []
        settings = config.hotfolders
        self.settings = settings
        self.stuck = StuckFiles(self.files, settings, self.log, events)
        self.settler = Settler(
            self.files,
            self.stuck,
            settings,
            take=self._submit,
            local=lambda key: self.observers.is_local(key),
            protected=lambda: self.intake.protected,
            stats=self.stats,
            tick=tick,
        )
        self.observers = FolderObservers(
            self.files, self.settler, settings, log=self.log, events=events, stats=self.stats
        )
        # A chmod/chown above a waiting file makes it due now (checked with the folders).
        self.unblocker = Unblocker(self.files, self.log, lambda f, top: self.scan_tree(f, top))
        self.observers.after_check = self._unblock
        self._apply_settings(config)
        self._executor = ThreadPoolExecutor(
            max_workers=settings.workers, thread_name_prefix="watch-intake"
        )

    # -- configuration ------------------------------------------------------------------
    def _apply_settings(self, config: Config) -> None:
        self.settings = config.hotfolders
        self.stuck.settings = self.observers.settings = config.hotfolders
        self.settler.apply(config.hotfolders)
        state_dir = config.paths.state_dir
        folders = [
            Folder(w, Path(os.path.realpath(w.path)), w.failed_dir(state_dir)) for w in config.watch
        ]
        self.observers.desired = {f.key: f for f in folders}
        # By configured path, re-read on every reload (a folder whose split or date source
        # changed keeps its observer): the policy is taken with each file, so a reload
        # applies at once to files not yet taken.
        self.policies = {
            w.path: SourcePolicy(config.split_policy(w.tenant, w.split), w.date_source)
            for w in config.watch
        }

    def start(self) -> None:
        self.observers.sync()
        for target, name in (
            (lambda: self.settler.run(self._stop, self.log), "watch-settle"),
            (self._rescan_loop, "watch-rescan"),
            (lambda: self.observers.run(self._stop), "watch-folders"),
        ):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def reload(self, config: Config) -> None:
        """Apply a new config: add/remove folders without touching the others; re-arm any
        folder that is gone or was replaced (SIGHUP)."""
        self._apply_settings(config)
        # A folder check stuck on a dead network share must not hang SIGHUP: the check
        # applies this config itself once it is free.
        if not self.observers.sync_within(10):
            self.log.warning(
                "watch.reload_deferred",
                detail="a folder check is still running (a share not answering?)",
            )

    def _unblock(self) -> None:
        """After each folder check: files whose cause was fixed go now (unblock.py)."""
        due = self.unblocker.check()
        tenants = self.unblocker.tenants_waiting()
        if tenants:
            try:
                with self.intake.db.transaction() as tx:
                    statuses = {r["name"]: r["status"] for r in tx.all("tenant_statuses")}
            except DatabaseError:
                statuses = {}  # their own retry takes them once it is back
            active = {t for t in tenants if statuses.get(t) == TenantStatus.active}
            if active:
                due += self.unblocker.tenants_active(active)
        if due:
            self.settler.wake.set()

    def check_folders_soon(self) -> None:
        """Have the folder check run now (an observer saw its root go)."""
        self.observers.check_soon()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop observing; let running intakes finish (each is one short transaction)."""
        self._stop.set()
        self.settler.wake.set()
        self.observers.stop_all()
        for t in self._threads:
            t.join(timeout=5)
        self._executor.shutdown(wait=True, cancel_futures=True)

    def scan_tree(self, folder: Folder, top: Path) -> int:
        """Note every file below ``top`` (startup, rescan, new sub-folder). No links followed."""
        return self.settler.scan_tree(folder, top)

    def _rescan_loop(self) -> None:
        while not self._stop.wait(self.settings.rescan_interval):
            try:
                self.observers.sync()  # folders that were missing may have appeared
                with self.files.lock:
                    folders = list(self.files.folders.values())
                for folder in folders:
                    self.settler.scan_tree(folder, folder.cfg.path)
            except Exception:
                self.log.exception("watch.rescan_error")

    # -- taking a file ------------------------------------------------------------------
    def _submit(self, path: Path, pending: PendingFile) -> None:
        self._executor.submit(self._ingest, path, pending)

    def _item(self, folder: Folder, path: Path, trace: str | None = None) -> IntakeItem:
        subdir = "/".join(path.relative_to(folder.cfg.path).parts[:-1])
        policy = self.policies.get(folder.cfg.path, SourcePolicy())
        return IntakeItem(
            path=path,
            tenant=folder.cfg.tenant,
            source=f"watch:{folder.cfg.path}",
            filename=path.name,
            subdir=subdir,
            tags=subfolder_tags(
                folder.cfg.tags,
                subdir,
                enabled=folder.cfg.subfolder_tags,
                date_folders=folder.cfg.date_folder_tags,
            ),
            trace=trace,
            split=policy.split,
            date_source=policy.date_source,
        )

    def _contained(self, folder: Folder, path: Path) -> bool:
        # Every directory between the root and the file must be a real directory: a
        # symlinked sub-folder must not smuggle in /etc/passwd (O_NOFOLLOW only guards
        # the last component).
        real_parent = Path(os.path.realpath(path.parent))
        rel_parent = path.parent.relative_to(folder.cfg.path)
        return real_parent == folder.root / rel_parent

    def _ingest(self, path: Path, pending: PendingFile) -> None:
        folder = pending.folder
        tenant = folder.cfg.tenant
        log = self.log.bind(
            tenant=tenant, folder=folder.name, filename=path.name, trace=pending.trace
        )
        item = dataclasses.replace(
            self._item(folder, path, pending.trace), arrived=pending.first_seen
        )
        protected = self.intake.protected

        def before_quarantine() -> None:
            if protected is not None:
                protected.check(path, action="quarantine")  # never move a file out of the archive

        def committed(result: IntakeResult) -> None:
            if result.source_left is not None:
                self.stuck.mark(
                    path, pending, StuckAction.remove, result.source_left, result.document_id
                )
            elif folder.cfg.done:
                self._move_to_done(path, pending, item, result.document_id)

        def keep(detail: str) -> None:
            # Its folder resolves into the archive (a hot folder swapped for a link or
            # bind mount after start): never touched again, not even re-read.
            log.error("watch.source_protected", detail=detail)
            self.stuck.mark(path, pending, StuckAction.keep, detail, None, log_it=False)

        cause: retry.Cause | None = None
        try:
            if not self._contained(folder, path):
                log.warning("watch.escape_refused", path=str(path))
                return
            attempt = self.handoff.attempt(
                self.intake,
                item,
                failed_dir=folder.failed,
                log=log,
                attempts=pending.attempts,
                disposal=Disposal.keep if folder.cfg.done else Disposal.delete,
                before_quarantine=before_quarantine,
                committed=committed,
                tenant_waiting=lambda exc: self._report_tenant(path, pending, exc),
                protected=keep,
            )
            cause = attempt.cause
            pending.waiting_cause = None if cause is None else str(cause)
            pending.waiting_detail = attempt.detail
        finally:
            self._requeue(path, pending, cause)

    def _requeue(self, path: Path, pending: PendingFile, cause: retry.Cause | None) -> None:
        """An intake thread is done with ``path``: free its slot; for ``cause``, try again
        after the backoff."""
        table = self.files
        with table.lock:
            table.inflight.discard(path)
            self.settler.wake.set()
            # Not for a folder gone or removed meanwhile: its scan finds the file again.
            if (
                cause is not None
                and not self._stop.is_set()
                and table.folders.get(pending.folder.key) is not None
            ):
                pending.attempts += 1
                wait = retry.delay(pending.attempts, self.settings.retry_max_delay, cause)
                # What it looked like stays recorded: if the file did not change
                # meanwhile it is taken as soon as the delay is over, with no second
                # stability window.
                if table.pending.setdefault(path, pending) is pending:
                    table.schedule_pending(path, pending, time.monotonic() + wait)
        if cause is not None:
            self.handoff.count_retry(pending.folder.cfg.tenant, str(cause))

    def _move_to_done(
        self, path: Path, pending: PendingFile, item: IntakeItem, document_id: int | None
    ) -> None:
        try:
            move_source(path, done_dir(pending.folder, item.subdir), self.intake.protected)
        except FileNotFoundError:
            raise
        except OSError as exc:
            # Committed: only the move is retried; never ingested or copied again.
            self.stuck.mark(
                path, pending, StuckAction.move, why_not_removable(path, exc), document_id
            )

    def _report_tenant(self, path: Path, pending: PendingFile, exc: TenantError) -> None:
        """One line per waiting file; again only if the status changed or an hour passed."""
        status = tenant_status_of(exc)
        now = time.monotonic()
        last = pending.tenant_reported
        if last is not None and last[0] == status and now - last[1] < self.tenant_report_interval:
            return  # retried quietly until the tenant is active
        pending.tenant_reported = (status, now)
        self.log.warning(
            "watch.tenant_not_active",
            tenant=pending.folder.cfg.tenant,
            status=status,
            reason=tenant_reason(status),
            filename=path.name,
            path=str(path),
            folder=pending.folder.name,
            detail=exc.message,
        )

    # -- introspection (status, tests) --------------------------------------------------
    def snapshot(self) -> dict[str, int]:
        with self.files.lock:
            return {"pending": len(self.files.pending), "inflight": len(self.files.inflight)}

    def status_snapshot(self) -> dict[str, Any]:
        """For the daemon's state file (`ingestd status`): what waits, stuck files and
        folders this process may not use, each with its reason and fix."""
        from ingestd.sources.hotfolders.why import unlistable_report, waiting_files

        stuck, total = self.stuck.status()
        with self.files.lock:
            pending = [(p, c) for p, c in self.files.pending.items() if c.attempts > 0]
            unlistable = dict(self.files.unlistable)
        waiting = waiting_files(pending)
        return {
            **self.snapshot(),
            "stuck": stuck,
            "stuck_total": total,
            "waiting": waiting,
            "folders": self.observers.access_report(),
            "unlistable": unlistable_report(unlistable),
        }

    def idle(self) -> bool:
        with self.files.lock:
            return not self.files.pending and not self.files.inflight

    def folders(self) -> list[Folder]:
        with self.files.lock:
            return list(self.files.folders.values())
