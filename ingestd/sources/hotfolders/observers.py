"""One watchdog observer per hot folder, and re-arming it when its folder changes.

Each folder root is stat()ed every ``folder_check_interval`` (and on SIGHUP): a root that
vanished, or whose device/inode changed (deleted and recreated, a share unmounted to its
empty mount point or mounted again, a bind mount), is logged (``watch.folder_gone``,
``watch.folder_back``) and gets a new observer and a scan, without a restart.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileClosedNoWriteEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileOpenedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from ingestd.config.settings import HotfoldersConfig
from ingestd.events.outbox import EventLog
from ingestd.log import Logger
from ingestd.runtime import health
from ingestd.sources.hotfolders.folders import (
    AccessProblem,
    Folder,
    FolderKey,
    access_problem,
    dir_identity,
    ident_text,
    listening,
    local_fs,
)
from ingestd.sources.hotfolders.pending import Settler
from ingestd.sources.hotfolders.table import FileTable
from ingestd.sources.hotfolders.why import folder_report

# The events Handler acts on. Only these are asked of inotify, so opens, reads and
# closes without writing (intake's own, the writer check's: most events of a busy folder)
# never wake the observer threads.
_EVENTS = (
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    DirCreatedEvent,
    DirMovedEvent,
    DirDeletedEvent,
)


class Handler(FileSystemEventHandler):
    """An observer's events for one folder, turned into notes for the settler."""

    def __init__(self, observers: FolderObservers, folder: Folder) -> None:
        self.observers = observers
        self.settler = observers.settler
        self.folder = folder

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:
            self._dispatch(event)
        except Exception:  # an event must never kill the observer thread
            self.observers.log.exception("watch.event_error", fs_event=repr(event))

    def _dispatch(self, event: FileSystemEvent) -> None:
        src = os.fsdecode(event.src_path)
        if isinstance(event, FileOpenedEvent | FileClosedNoWriteEvent):
            return  # our own reads (and anyone's) would otherwise loop
        if isinstance(event, DirDeletedEvent | DirMovedEvent) and src == str(self.folder.cfg.path):
            # The root itself went (rm -rf, renamed away): this observer is deaf from now
            # on; have the folder check re-arm it at once rather than at its next round.
            self.observers.check_soon()
            return
        if isinstance(event, DirCreatedEvent | DirMovedEvent):
            # Files created in a new directory before its watch was added raise no event.
            target = os.fsdecode(event.dest_path) if isinstance(event, DirMovedEvent) else src
            self.settler.scan_tree(self.folder, Path(target))
            return
        if isinstance(event, FileMovedEvent):
            self.settler.forget(Path(src))
            self.settler.note(self.folder, Path(os.fsdecode(event.dest_path)))
        elif isinstance(event, FileDeletedEvent):
            self.settler.forget(Path(src))
        elif isinstance(event, FileCreatedEvent | FileModifiedEvent | FileClosedEvent):
            self.settler.note(self.folder, Path(src), closed=isinstance(event, FileClosedEvent))


class FolderObservers:
    """The observers of all folders: made to match ``desired`` and the disk by ``sync``."""

    def __init__(
        self,
        table: FileTable,
        settler: Settler,
        settings: HotfoldersConfig,
        *,
        log: Logger,
        events: EventLog | None,
        stats: dict[str, int],
    ) -> None:
        self.table = table
        self.settler = settler
        self.settings = settings  # swapped on reload
        self.log = log
        self.events = events
        self.stats = stats
        # The folders the config asks for (swapped on reload, applied by the next sync).
        self.desired: dict[FolderKey, Folder] = {}
        self._observers: dict[FolderKey, BaseObserver] = {}
        # Per armed folder: (device, inode) of its root when its observer was started, and
        # whether its ctimes are from our clock (a local filesystem, not polled).
        self._armed: dict[FolderKey, tuple[int, int]] = {}
        self._local: dict[FolderKey, bool] = {}
        # Folders that were armed and went away (reported once, until they are back).
        self._gone: set[FolderKey] = set()
        self._missing_reported: set[str] = set()
        # Folders this process may not list (and why, as last logged): not armed.
        self._unreadable: dict[str, str] = {}
        # What the last check found wrong with each folder, for `ingestd status`.
        self._problems: dict[str, dict[str, object]] = {}
        # Arming and disarming (start, reload, the folder check, the rescan) one at a time.
        self.sync_lock = threading.Lock()
        self._check_now = threading.Event()
        # Run after each folder check (HotFolders: files whose access changed go now).
        self.after_check: Callable[[], None] | None = None

    def is_local(self, key: FolderKey) -> bool:
        return self._local.get(key, False)

    def check_soon(self) -> None:
        """Have the folder check run now (an observer saw its root go)."""
        self._check_now.set()

    def run(self, stop: threading.Event) -> None:
        """The folder check thread: a sync every ``folder_check_interval``, or when asked."""
        while not stop.is_set():
            health.beat("watch.folders", self.settings.folder_check_interval)
            self._check_now.wait(self.settings.folder_check_interval)
            self._check_now.clear()
            if stop.is_set():
                break
            try:
                self.sync()
                if self.after_check is not None:
                    self.after_check()
            except Exception:
                self.log.exception("watch.folder_check_error")

    def sync(self) -> None:
        with self.sync_lock:
            self.sync_locked()

    def sync_within(self, timeout: float) -> bool:
        """``sync``, unless a folder check holds the lock for ``timeout`` seconds (a share
        not answering): then False, and the check applies ``desired`` itself once free."""
        if not self.sync_lock.acquire(timeout=timeout):
            self._check_now.set()
            return False
        try:
            self.sync_locked()
        finally:
            self.sync_lock.release()
        return True

    def sync_locked(self) -> None:
        """Make the observers match the config and the folders as they are on disk: one
        stat() of each root (``sync_lock`` held)."""
        self.stats["folder_checks"] += 1
        desired = dict(self.desired)
        for key in [k for k in self._observers if k not in desired]:
            self._disarm(key, forget_stuck=True)
            self.log.info("watch.removed", folder=key[0])
        self._gone &= set(desired)
        # `status` reads the list while this runs (a share that does not answer can hold a
        # check for minutes): each folder's finding replaces its last one, and the whole
        # list is published at once, so a reader never sees it half made or emptied.
        names = {key[0] for key in desired}
        problems = {name: p for name, p in self._problems.items() if name in names}
        for key, folder in desired.items():
            problems.pop(key[0], None)
            self._check_folder(key, folder, problems)
            self._problems = dict(problems)
        self._problems = problems  # (also when no folder is left to check)

    def _check_folder(
        self, key: FolderKey, folder: Folder, problems: dict[str, dict[str, object]]
    ) -> None:
        """One folder of ``sync_locked``: arm, disarm or report it; what is wrong with it
        goes into ``problems``."""
        ident = dir_identity(folder.cfg.path)
        if key in self._observers:
            armed = self._armed.get(key)
            deaf = not listening(self._observers[key])
            if ident == armed and not deaf:
                with self.table.lock:
                    self.table.folders[key] = folder  # tags/tenant/done/failed may change
                # Asked again each check, so `status` shows a fixed mode as fixed.
                problem = access_problem(folder.cfg.path)
                if problem is not None:
                    problems[key[0]] = folder_report(folder, problem)
                elif self._unreadable.pop(key[0], None) is not None:
                    self.log.info("watch.folder_writable", folder=key[0])
                return
            # Deleted (and maybe recreated), unmounted or mounted over: the observer
            # watches an inode that is no longer the folder. Files still in flight
            # finish; pending ones are forgotten (the scan below finds them again);
            # stuck ones stay (not retried while it is gone; forgotten once their file
            # is seen gone or changed).
            self._disarm(key, forget_stuck=False)
            self._gone.add(key)
            self._report_gone(key, folder, armed, ident)
        if ident is None:
            problems[key[0]] = folder_report(folder, None)
            if key not in self._gone and key[0] not in self._missing_reported:
                # Never create it: an unmounted share would then fill the local disk.
                self.log.error("watch.folder_missing", folder=key[0], tenant=folder.cfg.tenant)
                self._missing_reported.add(key[0])
            return
        was = self._unreadable.get(key[0])
        problem = access_problem(folder.cfg.path)
        if problem is not None:
            problems[key[0]] = folder_report(folder, problem)
        if problem is not None and problem.unlistable:
            if was != "read":
                self._unreadable[key[0]] = "read"
                self._report_unreadable(key[0], folder, problem)
            return  # not armed: the next check asks again
        if problem is None:
            self._unreadable.pop(key[0], None)
        elif was != "write":
            # Listed and taken, but each file would end stuck (archived, not removable).
            self._unreadable[key[0]] = "write"
            self.log.error(
                "watch.folder_not_writable",
                folder=key[0],
                tenant=folder.cfg.tenant,
                **problem.fields(),
            )
        back = key in self._gone or key[0] in self._missing_reported or was == "read"
        if not self._arm(key, folder, ident):
            return
        found = self.settler.scan_tree(folder, folder.cfg.path)
        if back:
            self._gone.discard(key)
            self._missing_reported.discard(key[0])
            self.log.warning(
                "watch.folder_back",
                folder=key[0],
                tenant=folder.cfg.tenant,
                polling=folder.cfg.polling,
                device_inode=ident_text(ident),
                files=found,
            )
            if self.events is not None:
                self.events.emit(
                    "folder.back", "info", folder.cfg.tenant, {"folder": key[0], "files": found}
                )
        else:
            self.log.info(
                "watch.added", folder=key[0], tenant=folder.cfg.tenant, polling=folder.cfg.polling
            )

    def access_report(self) -> list[dict[str, object]]:
        """The folders the last check found missing or closed to this process, each with
        what it may not do, the owner and mode, and the command that fixes it."""
        problems = self._problems  # one published list (``sync_locked`` replaces it whole)
        return [problems[name] for name in sorted(problems)]

    def _report_unreadable(self, name: str, folder: Folder, problem: AccessProblem) -> None:
        fields = problem.fields()
        self.log.error("watch.folder_unreadable", folder=name, tenant=folder.cfg.tenant, **fields)
        if self.events is not None:
            self.events.emit(
                "folder.unreadable",
                "error",
                folder.cfg.tenant,
                {"folder": name, **fields},
                dedupe=f"folder.unreadable:{name}",
            )

    def _report_gone(
        self,
        key: FolderKey,
        folder: Folder,
        armed: tuple[int, int] | None,
        ident: tuple[int, int] | None,
    ) -> None:
        reason = "removed" if ident is None else "replaced"
        if ident is None:
            detail = "no directory there"
        elif ident == armed:
            # rm -rf + mkdir often gets the freed inode number back: only the
            # observer, which saw its root deleted and stopped, can tell.
            detail = "deleted and created again (with the same inode number)"
        else:
            detail = "a different directory now (recreated, or a share unmounted or mounted)"
        self.log.error(
            "watch.folder_gone",
            folder=key[0],
            tenant=folder.cfg.tenant,
            reason=reason,
            was=ident_text(armed),
            now=ident_text(ident),
            detail=detail,
        )
        if self.events is not None:
            self.events.emit(
                "folder.gone",
                "error",
                folder.cfg.tenant,
                {"folder": key[0], "reason": reason, "detail": detail},
                dedupe=f"folder.gone:{key[0]}",
            )

    def _arm(self, key: FolderKey, folder: Folder, ident: tuple[int, int]) -> bool:
        """Start an observer on ``folder`` whose root is ``ident``; False if it vanished."""
        obs = (
            PollingObserver(timeout=self.settings.poll_interval)
            if folder.cfg.polling
            else Observer()
        )
        try:
            obs.schedule(
                Handler(self, folder),
                str(folder.cfg.path),
                recursive=True,
                event_filter=list(_EVENTS),
            )
        except (FileNotFoundError, NotADirectoryError):
            obs.stop()  # (an inotify observer has its reader thread running already)
            return False  # gone between the stat and now: the next check sees it
        obs.daemon = True
        obs.start()
        local = not folder.cfg.polling and local_fs(folder.cfg.path)
        with self.table.lock:
            self._observers[key] = obs
            self.table.folders[key] = folder
            self._armed[key] = ident
            self._local[key] = local
        return True

    def _disarm(self, key: FolderKey, *, forget_stuck: bool) -> None:
        """Stop ``key``'s observer and forget its pending files (and its stuck ones)."""
        with self.table.lock:
            obs = self._observers.pop(key, None)
            self.table.drop_folder(key, forget_stuck=forget_stuck)
            self._armed.pop(key, None)
        if obs is not None:
            try:
                obs.stop()
                obs.join(timeout=5)
            except Exception:  # an observer of a vanished root may fail to stop cleanly
                self.log.exception("watch.observer_stop_error", folder=key[0])

    def stop_all(self) -> None:
        """Stop every observer (the daemon stops); not forever waiting for a folder check
        that a share hangs."""
        self._check_now.set()
        got = self.sync_lock.acquire(timeout=10)
        try:
            observers = list(self._observers.values())
            self._observers.clear()
        finally:
            if got:
                self.sync_lock.release()
        for obs in observers:
            obs.stop()
        for obs in observers:
            obs.join(timeout=5)
