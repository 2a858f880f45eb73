"""Hot folders: decide when a dropped file is complete, then hand it to intake.

The watcher never writes to the archive or the database. Its only jobs are:

* notice files: watchdog events (inotify, or polling for network mounts), a scan at
  start and a periodic rescan for anything whose event was lost;
* decide when a file is complete: size and mtime unchanged for ``stable_seconds`` and,
  where the kernel can tell (a Linux read lease), no local process holds it open for
  writing; temp and system names are never taken;
* afterwards: the source is gone (intake removed it after COMMIT) or moved to ``done``;
  a permanent refusal goes to ``failed`` with a note; a transient failure leaves the
  file where it is and retries with backoff. A file of a tenant that is not active stays
  too; it is reported once (``watch.tenant_not_active``), again when the tenant's status
  changes and at most once per ``TENANT_REPORT_INTERVAL`` while it waits.

A path is in at most one place at a time: *pending* (waiting to be stable or to be
retried), *in flight* (an intake thread has it) or *stuck* (committed, only its removal
is retried). So no file is queued twice.

The settle thread costs in proportion to what changed, not to what waits: pending and
stuck files sit in heaps ordered by when they are next due (lazy deletion: an entry whose
sequence number is no longer its file's is skipped), only due entries are looked at, and
no file is lstat()ed before its stability window can have passed. An event during the
window only moves the file's ``changed_at``; its entry, when due, reschedules itself.

Each folder root is stat()ed every ``folder_check_interval`` (and on SIGHUP): a root that
vanished, or whose device/inode changed (deleted and recreated, a share unmounted to its
empty mount point or mounted again, a bind mount), is logged (``watch.folder_gone``,
``watch.folder_back``) and gets a new observer and a scan, without a restart.
"""

from __future__ import annotations

import errno
import fcntl
import fnmatch
import heapq
import os
import re
import signal
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

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

from ingestd.config.settings import Config, HotfoldersConfig, WatchConfig
from ingestd.errors import IngestdError, SourceProtected, TenantError, TenantNotActive
from ingestd.intake.fsops import why_not_removable
from ingestd.intake.ingest import Disposal, Intake, IntakeItem, Outcome, move_source, remove_source
from ingestd.log import get_logger, new_trace_id
from ingestd.ops import health, metrics
from ingestd.ops.events import EventLog
from ingestd.sources import retry
from ingestd.sources.quarantine import ERROR_SUFFIX, quarantine

# F_SETLEASE and friends (Linux); absent elsewhere, then only the stability window counts.
_F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
_F_RDLCK = getattr(fcntl, "F_RDLCK", 0)
_F_UNLCK = getattr(fcntl, "F_UNLCK", 2)

# The daemon's state file (`ingestd status`) lists this many stuck files, and the total.
STUCK_SHOWN = 100

# A file waiting for its tenant to become active is reported again after this many seconds.
TENANT_REPORT_INTERVAL = 3600.0


def ignored(rel: Path, patterns: list[str]) -> bool:
    """A path below a hot folder that is never taken: any component matches a pattern
    (lower-cased globs, ``hotfolders.ignore``)."""
    return any(fnmatch.fnmatchcase(part.lower(), pat) for part in rel.parts for pat in patterns)


def _ignore_matcher(patterns: list[str]) -> re.Pattern[str] | None:
    """``ignored`` as one compiled regex (every event and every scanned file is checked)."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


def _dir_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the directory at ``path`` (links followed, as the observer does);
    None when there is none (vanished, not a directory, a dead mount)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def _listening(obs: BaseObserver) -> bool:
    """Whether ``obs`` still watches its folder: watchdog's emitters stop themselves when
    the watched root is deleted (inotify's IN_DELETE_SELF, a poll that finds no root)."""
    emitters = obs.emitters
    return (
        obs.is_alive()
        and bool(emitters)
        and all(e.is_alive() and e.should_keep_running() for e in emitters)
    )


# Filesystems whose timestamps come from another machine's clock (or a userspace daemon):
# a file's ctime there says nothing about how long ago it changed by our clock.
_REMOTE_FS = {
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "ncpfs",
    "ceph",
    "glusterfs",
    "9p",
    "afs",
    "lustre",
    "gpfs",
    "virtiofs",
    "davfs",
    "sshfs",
}


def _local_fs(path: Path) -> bool:
    """Is ``path`` on a local filesystem (its ctimes are from this kernel's clock)? Read
    from /proc/self/mountinfo; unknown counts as not local."""
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return False
    real = os.path.realpath(path)
    best, fstype = -1, ""
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= best:  # the deepest; of stacked mounts the last
            best, fstype = len(mnt), right.split()[0]
    return best >= 0 and fstype not in _REMOTE_FS and not fstype.startswith("fuse")


# `ingestd status` counts at most this many entries per folder (a share with a million
# files must not make status hang).
BACKLOG_SCAN_LIMIT = 100_000


def backlog_on_disk(config: Config) -> list[dict[str, Any]]:
    """Files waiting in each hot folder as seen on disk (``ingestd status``, also while the
    database and the daemon are down): count, bytes, oldest mtime."""
    patterns = [p.lower() for p in config.hotfolders.ignore]
    out: list[dict[str, Any]] = []
    for w in config.watch:
        entry: dict[str, Any] = {
            "folder": str(w.path),
            "tenant": w.tenant,
            "files": 0,
            "bytes": 0,
            "oldest_mtime": None,
            "truncated": False,
        }
        if not w.path.is_dir():
            entry["missing"] = True
            out.append(entry)
            continue
        seen = 0
        oldest: float | None = None
        for dirpath, dirs, files in os.walk(w.path, followlinks=False):
            base = Path(dirpath)
            dirs[:] = [d for d in dirs if not ignored((base / d).relative_to(w.path), patterns)]
            for name in files:
                seen += 1
                path = base / name
                if ignored(path.relative_to(w.path), patterns):
                    continue
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                entry["files"] += 1
                entry["bytes"] += st.st_size
                oldest = st.st_mtime if oldest is None else min(oldest, st.st_mtime)
            if seen >= BACKLOG_SCAN_LIMIT:
                entry["truncated"] = True
                break
        entry["oldest_mtime"] = oldest
        out.append(entry)
    return out


@dataclass(frozen=True)
class Folder:
    """One [[watch]] entry with its resolved directories."""

    cfg: WatchConfig
    root: Path  # realpath of cfg.path, to check containment
    failed: Path

    @property
    def name(self) -> str:
        return str(self.cfg.path)

    @property
    def key(self) -> tuple[str, bool]:
        # What needs a new observer when it changes; everything else is swapped in place.
        return (str(self.cfg.path), self.cfg.polling)


@dataclass
class _Pending:
    folder: Folder
    # time.monotonic() of the last event (or of the first notice): the stability window
    # runs from here. Events move it; they never touch the heap (see _settle_one).
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


StuckAction = Literal["remove", "move", "keep"]


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _ident_text(ident: tuple[int, int] | None) -> str | None:
    return None if ident is None else f"{ident[0]}:{ident[1]}"


@dataclass
class _Stuck:
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
_E = TypeVar("_E", _Pending, _Stuck)


class WriterCheck:
    """Ask the kernel whether anyone holds a file open for writing (Linux read lease).

    A read lease is granted only when no process has the file open for writing. The
    lease is dropped at once; should a writer open the file in that instant, the kernel
    signals the lease holder (SIGIO), so that signal is ignored process-wide.
    Returns None when the kernel cannot tell (NFS/SMB, not our file without CAP_LEASE).
    """

    def __init__(self) -> None:
        self.enabled = threading.current_thread() is threading.main_thread()
        if self.enabled:
            signal.signal(signal.SIGIO, signal.SIG_IGN)

    def writer_active(self, path: Path) -> bool | None:
        if not self.enabled:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.fcntl(fd, _F_SETLEASE, _F_RDLCK)
        except OSError as exc:
            return True if exc.errno in (errno.EAGAIN, errno.EBUSY) else None
        else:
            fcntl.fcntl(fd, _F_SETLEASE, _F_UNLCK)
            return False
        finally:
            os.close(fd)


# The events _Handler acts on. Only these are asked of inotify, so opens, reads and
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


class _Handler(FileSystemEventHandler):
    def __init__(self, hot: HotFolders, folder: Folder) -> None:
        self.hot = hot
        self.folder = folder

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:
            self._dispatch(event)
        except Exception:  # an event must never kill the observer thread
            self.hot.log.exception("watch.event_error", fs_event=repr(event))

    def _dispatch(self, event: FileSystemEvent) -> None:
        src = os.fsdecode(event.src_path)
        if isinstance(event, FileOpenedEvent | FileClosedNoWriteEvent):
            return  # our own reads (and anyone's) would otherwise loop
        if isinstance(event, DirDeletedEvent | DirMovedEvent) and src == str(self.folder.cfg.path):
            # The root itself went (rm -rf, renamed away): this observer is deaf from now
            # on; have the folder check re-arm it at once rather than at its next round.
            self.hot.check_folders_soon()
            return
        if isinstance(event, DirCreatedEvent | DirMovedEvent):
            # Files created in a new directory before its watch was added raise no event.
            target = os.fsdecode(event.dest_path) if isinstance(event, DirMovedEvent) else src
            self.hot.scan_tree(self.folder, Path(target))
            return
        if isinstance(event, FileMovedEvent):
            self.hot.forget(Path(src))
            self.hot.note(self.folder, Path(os.fsdecode(event.dest_path)))
        elif isinstance(event, FileDeletedEvent):
            self.hot.forget(Path(src))
        elif isinstance(event, FileCreatedEvent | FileModifiedEvent | FileClosedEvent):
            self.hot.note(self.folder, Path(src), closed=isinstance(event, FileClosedEvent))


class HotFolders:
    """All [[watch]] folders of one daemon; thread-safe; reloadable."""

    def __init__(
        self, config: Config, intake: Intake, *, tick: float = 0.1, events: EventLog | None = None
    ) -> None:
        self.intake = intake
        # Quarantined and stuck files are operator events (file.quarantined, ...).
        self.events = events
        self.log = get_logger(component="watch")
        self._lock = threading.Lock()
        self._pending: dict[Path, _Pending] = {}
        self._inflight: set[Path] = set()
        self._stuck: dict[Path, _Stuck] = {}
        # When each pending / stuck file is due next (see the module docstring).
        self._pending_due: list[tuple[float, int, Path, _Pending]] = []
        self._stuck_due: list[tuple[float, int, Path, _Stuck]] = []
        self._seq = 0
        self._observers: dict[tuple[str, bool], BaseObserver] = {}
        self._folders: dict[tuple[str, bool], Folder] = {}
        # Per armed folder: (device, inode) of its root when its observer was started, and
        # whether its ctimes are from our clock (a local filesystem, not polled).
        self._armed: dict[tuple[str, bool], tuple[int, int]] = {}
        self._local: dict[tuple[str, bool], bool] = {}
        # Folders that were armed and went away (reported once, until they are back).
        self._gone: set[tuple[str, bool]] = set()
        self._missing_reported: set[str] = set()
        # Arming and disarming (start, reload, the folder check, the rescan) one at a time.
        self._sync_lock = threading.Lock()
        self._check_now = threading.Event()
        self._stop = threading.Event()
        # Set when an intake thread frees a slot, so the next due file goes at once
        # instead of waiting for the next tick.
        self._wake = threading.Event()
        self._tick = tick
        self.tenant_report_interval = TENANT_REPORT_INTERVAL
        # What the settle thread did (tests, benchmarks): files looked at (one lstat each),
        # heap entries popped, files handed to intake; and folder checks (one stat a root).
        self.stats = {"looked": 0, "popped": 0, "taken": 0, "folder_checks": 0}
        self._writers = WriterCheck()
        self._threads: list[threading.Thread] = []
        self._apply_settings(config)
        self._executor = ThreadPoolExecutor(
            max_workers=self.settings.workers, thread_name_prefix="watch-intake"
        )
        self._desired = self._folders_from(config)

    # -- configuration ------------------------------------------------------------------
    def _apply_settings(self, config: Config) -> None:
        self.settings: HotfoldersConfig = config.hotfolders
        self._ignore = [p.lower() for p in config.hotfolders.ignore]
        self._ignore_re = _ignore_matcher(self._ignore)
        self._state_dir = config.paths.state_dir

    def _folders_from(self, config: Config) -> dict[tuple[str, bool], Folder]:
        out = {}
        for w in config.watch:
            folder = Folder(w, Path(os.path.realpath(w.path)), w.failed_dir(config.paths.state_dir))
            out[folder.key] = folder
        return out

    def start(self) -> None:
        self._sync_observers()
        for target, name in (
            (self._settle_loop, "watch-settle"),
            (self._rescan_loop, "watch-rescan"),
            (self._folder_loop, "watch-folders"),
        ):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def reload(self, config: Config) -> None:
        """Apply a new config: add/remove folders without touching the others; re-arm any
        folder that is gone or was replaced (SIGHUP)."""
        self._apply_settings(config)
        self._desired = self._folders_from(config)
        # A folder check stuck on a dead network share must not hang SIGHUP: the check
        # applies this config itself once it is free.
        if not self._sync_lock.acquire(timeout=10):
            self.log.warning(
                "watch.reload_deferred",
                detail="a folder check is still running (a share not answering?)",
            )
            self._check_now.set()
            return
        try:
            self._sync_locked()
        finally:
            self._sync_lock.release()

    def check_folders_soon(self) -> None:
        """Have the folder check run now (an observer saw its root go)."""
        self._check_now.set()

    def _folder_loop(self) -> None:
        while not self._stop.is_set():
            health.beat("watch.folders", self.settings.folder_check_interval)
            self._check_now.wait(self.settings.folder_check_interval)
            self._check_now.clear()
            if self._stop.is_set():
                break
            try:
                self._sync_observers()
            except Exception:
                self.log.exception("watch.folder_check_error")

    def _sync_observers(self) -> None:
        with self._sync_lock:
            self._sync_locked()

    def _sync_locked(self) -> None:
        """Make the observers match the config and the folders as they are on disk: one
        stat() of each root."""
        self.stats["folder_checks"] += 1
        desired = dict(self._desired)
        for key in [k for k in self._observers if k not in desired]:
            self._disarm(key, forget_stuck=True)
            self.log.info("watch.removed", folder=key[0])
        self._gone &= set(desired)
        for key, folder in desired.items():
            ident = _dir_identity(folder.cfg.path)
            if key in self._observers:
                armed = self._armed.get(key)
                deaf = not _listening(self._observers[key])
                if ident == armed and not deaf:
                    with self._lock:
                        self._folders[key] = folder  # tags/tenant/done/failed may have changed
                    continue
                # Deleted (and maybe recreated), unmounted or mounted over: the observer
                # watches an inode that is no longer the folder. Files still in flight
                # finish; pending ones are forgotten (the scan below finds them again);
                # stuck ones stay (not retried while it is gone; forgotten once their file
                # is seen gone or changed).
                self._disarm(key, forget_stuck=False)
                self._gone.add(key)
                reason = "removed" if ident is None else "replaced"
                if ident is None:
                    detail = "no directory there"
                elif ident == armed:
                    # rm -rf + mkdir often gets the freed inode number back: only the
                    # observer, which saw its root deleted and stopped, can tell.
                    detail = "deleted and created again (with the same inode number)"
                else:
                    detail = (
                        "a different directory now (recreated, or a share unmounted or mounted)"
                    )
                self.log.error(
                    "watch.folder_gone",
                    folder=key[0],
                    tenant=folder.cfg.tenant,
                    reason=reason,
                    was=_ident_text(armed),
                    now=_ident_text(ident),
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
            if ident is None:
                if key not in self._gone and key[0] not in self._missing_reported:
                    # Never create it: an unmounted share would then fill the local disk.
                    self.log.error("watch.folder_missing", folder=key[0], tenant=folder.cfg.tenant)
                    self._missing_reported.add(key[0])
                continue
            back = key in self._gone or key[0] in self._missing_reported
            if not self._arm(key, folder, ident):
                continue
            found = self.scan_tree(folder, folder.cfg.path)
            if back:
                self._gone.discard(key)
                self._missing_reported.discard(key[0])
                self.log.warning(
                    "watch.folder_back",
                    folder=key[0],
                    tenant=folder.cfg.tenant,
                    polling=folder.cfg.polling,
                    device_inode=_ident_text(ident),
                    files=found,
                )
                if self.events is not None:
                    self.events.emit(
                        "folder.back", "info", folder.cfg.tenant, {"folder": key[0], "files": found}
                    )
            else:
                self.log.info(
                    "watch.added",
                    folder=key[0],
                    tenant=folder.cfg.tenant,
                    polling=folder.cfg.polling,
                )

    def _arm(self, key: tuple[str, bool], folder: Folder, ident: tuple[int, int]) -> bool:
        """Start an observer on ``folder`` whose root is ``ident``; False if it vanished."""
        obs = (
            PollingObserver(timeout=self.settings.poll_interval)
            if folder.cfg.polling
            else Observer()
        )
        try:
            obs.schedule(
                _Handler(self, folder),
                str(folder.cfg.path),
                recursive=True,
                event_filter=list(_EVENTS),
            )
        except (FileNotFoundError, NotADirectoryError):
            obs.stop()  # (an inotify observer has its reader thread running already)
            return False  # gone between the stat and now: the next check sees it
        obs.daemon = True
        obs.start()
        local = not folder.cfg.polling and _local_fs(folder.cfg.path)
        with self._lock:
            self._observers[key] = obs
            self._folders[key] = folder
            self._armed[key] = ident
            self._local[key] = local
        return True

    def _disarm(self, key: tuple[str, bool], *, forget_stuck: bool) -> None:
        """Stop ``key``'s observer and forget its pending files (and its stuck ones)."""
        with self._lock:
            obs = self._observers.pop(key, None)
            # First, so that events still on their way are dropped by note().
            self._folders.pop(key, None)
            self._armed.pop(key, None)
            for path in [p for p, c in self._pending.items() if c.folder.key == key]:
                del self._pending[path]  # its heap entry is now stale
            if forget_stuck:
                for path in [p for p, s in self._stuck.items() if s.folder.key == key]:
                    del self._stuck[path]
        if obs is not None:
            try:
                obs.stop()
                obs.join(timeout=5)
            except Exception:  # an observer of a vanished root may fail to stop cleanly
                self.log.exception("watch.observer_stop_error", folder=key[0])

    def stop(self, timeout: float = 30.0) -> None:
        """Stop observing; let running intakes finish (each is one short transaction)."""
        self._stop.set()
        self._wake.set()
        self._check_now.set()
        got = self._sync_lock.acquire(timeout=10)  # not forever: a share may hang a check
        try:
            observers = list(self._observers.values())
            self._observers.clear()
        finally:
            if got:
                self._sync_lock.release()
        for obs in observers:
            obs.stop()
        for obs in observers:
            obs.join(timeout=5)
        for t in self._threads:
            t.join(timeout=5)
        self._executor.shutdown(wait=True, cancel_futures=True)

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
        with self._lock:
            if path in self._inflight:
                return
            stuck = self._stuck.get(path)
        if stuck is not None and self._still_stuck(path, stuck):
            return  # decided already: only its removal is retried (_retry_stuck)
        with self._lock:
            current = self._folders.get(folder.key)
            if current is None:
                return
            window = self.settings.stable_seconds
            pending = self._pending.get(path)
            if pending is None:
                pending = self._pending[path] = _Pending(current, changed_at=now)
                self._schedule(self._pending_due, path, pending, now + window)
                metrics.WATCH_SEEN.labels(current.cfg.tenant).inc()
            elif pending.attempts == 0:
                # Activity: the window starts again (a retry keeps its backoff instead).
                # Its heap entry stays; when due it sees the new changed_at and moves on.
                pending.changed_at = now
                if pending.due > now + window:
                    self._schedule(self._pending_due, path, pending, now + window)

    def forget(self, path: Path) -> None:
        with self._lock:
            self._pending.pop(path, None)  # its heap entry is now stale

    def _schedule(
        self, heap: list[tuple[float, int, Path, _E]], path: Path, entry: _E, due: float
    ) -> None:
        """Make ``entry`` due at ``due`` (self._lock held); any older entry goes stale."""
        self._seq += 1
        entry.due, entry.seq = due, self._seq
        heapq.heappush(heap, (due, self._seq, path, entry))
        if len(heap) > 2 * (len(self._pending) + len(self._stuck)) + 1024:
            self._compact()

    def _compact(self) -> None:
        """Drop stale heap entries (forgotten files, folders gone) so memory stays flat."""
        self._pending_due = [(c.due, c.seq, p, c) for p, c in self._pending.items()]
        heapq.heapify(self._pending_due)
        self._stuck_due = [
            (s.due, s.seq, p, s) for p, s in self._stuck.items() if s.action != "keep"
        ]
        heapq.heapify(self._stuck_due)

    @staticmethod
    def _pop_due(
        heap: list[tuple[float, int, Path, _E]], table: dict[Path, _E], now: float
    ) -> tuple[Path, _E] | None:
        """The next live entry due by ``now`` (self._lock held), or None."""
        while heap and heap[0][0] <= now:
            _due, seq, path, entry = heapq.heappop(heap)
            if entry.seq == seq and table.get(path) is entry:
                return path, entry
        return None

    def scan_tree(self, folder: Folder, top: Path) -> int:
        """Note every file below ``top`` (startup, rescan, new sub-folder). No links followed."""
        found = 0
        for dirpath, dirs, files in os.walk(top, followlinks=False):
            base = Path(dirpath)
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

    def _rescan_loop(self) -> None:
        while not self._stop.wait(self.settings.rescan_interval):
            try:
                self._sync_observers()  # folders that were missing may have appeared
                for folder in list(self._folders.values()):
                    self.scan_tree(folder, folder.cfg.path)
            except Exception:
                self.log.exception("watch.rescan_error")

    # -- deciding completeness ----------------------------------------------------------
    def _settle_loop(self) -> None:
        while not self._stop.is_set():
            health.beat("watch.settle", self._tick)
            self._wake.wait(self._tick)
            self._wake.clear()
            try:
                self._settle_once()
            except Exception:
                self.log.exception("watch.settle_error")

    def _settle_once(self) -> None:
        """Look at what is due, nothing else: O(due · log pending) per pass."""
        now = time.monotonic()
        while True:
            with self._lock:
                item = self._pop_due(self._stuck_due, self._stuck, now)
                if item is not None and self._folders.get(item[1].folder.key) is None:
                    # Its folder is gone (unmounted, say): not a reason to forget a
                    # committed file that may come back with it. Asked again later.
                    self._schedule(self._stuck_due, *item, now + self.settings.retry_max_delay)
                    continue
            if item is None:
                break
            if item[1].action != "keep":
                self._retry_stuck(*item)
        capacity = self.settings.workers * 2  # bounded hand-off queue: memory stays flat
        while True:
            with self._lock:
                if len(self._inflight) >= capacity:
                    break  # the due rest waits in the heap; a finished intake wakes us
                got = self._pop_due(self._pending_due, self._pending, now)
            if got is None:
                break
            self.stats["popped"] += 1
            self._settle_one(*got, now)

    def _settle_one(self, path: Path, pending: _Pending, now: float) -> None:
        """A due pending file: hand it to intake, or schedule its next look."""
        window = self.settings.stable_seconds
        changed_at = pending.changed_at
        if pending.attempts == 0 and now < changed_at + window:
            # Events restarted its window since it was scheduled: no lstat, look later.
            with self._lock:
                if self._pending.get(path) is pending:
                    self._schedule(self._pending_due, path, pending, changed_at + window)
            return
        verdict = self._ready(path, pending, now)
        with self._lock:
            if self._pending.get(path) is not pending:
                return  # forgotten meanwhile (deleted, its folder gone)
            if verdict is None:
                del self._pending[path]
                return
            if verdict is not True or pending.changed_at != changed_at:
                due = verdict if verdict is not True else pending.changed_at + window
                self._schedule(self._pending_due, path, pending, due)
                return
            del self._pending[path]
            self._inflight.add(path)
        self.stats["taken"] += 1
        self._executor.submit(self._ingest, path, pending)

    def _ready(self, path: Path, pending: _Pending, now: float) -> Literal[True] | float | None:
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
        if self._local.get(pending.folder.key, False) and age >= 0:
            quiet_since = now - age
        elif seen != pending.seen:  # (also a local ctime in the future: clock set back)
            quiet_since = now
        else:
            quiet_since = pending.quiet_since
        pending.seen, pending.quiet_since = seen, quiet_since
        last = quiet_since if pending.attempts else max(pending.changed_at, quiet_since)
        if now - last < window:
            return last + window
        if self._writers.writer_active(path):
            # Someone still has it open for writing (a paused writer): not complete.
            pending.quiet_since = now
            return now + window
        return True

    # -- taking a file ------------------------------------------------------------------
    def _item(self, folder: Folder, path: Path, trace: str | None = None) -> IntakeItem:
        rel = path.relative_to(folder.cfg.path)
        parts = rel.parts[:-1]
        tags = list(folder.cfg.tags)
        if folder.cfg.subfolder_tags:
            tags.extend(p for p in parts if p not in tags)
        return IntakeItem(
            path=path,
            tenant=folder.cfg.tenant,
            source=f"watch:{folder.cfg.path}",
            filename=path.name,
            subdir="/".join(parts),
            tags=tuple(tags),
            trace=trace,
        )

    def _contained(self, folder: Folder, path: Path) -> bool:
        # Every directory between the root and the file must be a real directory: a
        # symlinked sub-folder must not smuggle in /etc/passwd (O_NOFOLLOW only guards
        # the last component).
        real_parent = Path(os.path.realpath(path.parent))
        rel_parent = path.parent.relative_to(folder.cfg.path)
        return real_parent == folder.root / rel_parent

    def _ingest(self, path: Path, pending: _Pending) -> None:
        folder = pending.folder
        tenant = folder.cfg.tenant
        log = self.log.bind(
            tenant=tenant, folder=folder.name, filename=path.name, trace=pending.trace
        )
        cause: retry.Cause | None = None
        try:
            item = self._item(folder, path, pending.trace)
            if not self._contained(folder, path):
                log.warning("watch.escape_refused", path=str(path))
                return
            disposal = Disposal.keep if folder.cfg.done else Disposal.delete
            result = self.intake.ingest(item, disposal=disposal)
            if result.outcome is Outcome.refused:
                self._quarantine(path, pending, item, result.reason, result.detail, log)
            elif result.source_left is not None:
                self._mark_stuck(path, pending, "remove", result.source_left, result.document_id)
            elif folder.cfg.done:
                self._move_to_done(path, pending, item, result.document_id)
        except FileNotFoundError:
            pass  # gone (moved away by a user): nothing to do
        except TenantError as exc:
            cause = retry.Cause.tenant_inactive
            self._report_tenant(path, pending, exc)
        except Exception as exc:
            cause = retry.cause_of(exc)
            detail = exc.message if isinstance(exc, IngestdError) else str(exc)
            if cause is None:
                # Its folder resolves into the archive (a hot folder swapped for a link or
                # bind mount after start): never touched again, not even re-read.
                log.error("watch.source_protected", detail=detail)
                self._mark_stuck(path, pending, "keep", detail, None, log_it=False)
            elif cause is retry.Cause.internal:
                log.exception("watch.intake_error")
            else:
                log.warning(
                    "watch.retry", cause=str(cause), attempt=pending.attempts + 1, detail=detail
                )
        finally:
            with self._lock:
                self._inflight.discard(path)
                self._wake.set()
                # Not for a folder gone or removed meanwhile: its scan finds the file again.
                if (
                    cause is not None
                    and not self._stop.is_set()
                    and self._folders.get(pending.folder.key) is not None
                ):
                    pending.attempts += 1
                    wait = retry.delay(pending.attempts, self.settings.retry_max_delay, cause)
                    # What it looked like stays recorded: if the file did not change
                    # meanwhile it is taken as soon as the delay is over, with no second
                    # stability window.
                    if self._pending.setdefault(path, pending) is pending:
                        self._schedule(self._pending_due, path, pending, time.monotonic() + wait)
            if cause is not None:
                metrics.WATCH_RETRIED.labels(tenant, str(cause)).inc()

    def _quarantine(
        self, path: Path, pending: _Pending, item: IntakeItem, reason: Any, detail: str, log: Any
    ) -> None:
        """A permanent refusal: to the failed folder with its note, and tell someone."""
        folder = pending.folder
        protected = self.intake.protected
        if protected is not None:
            protected.check(path, action="quarantine")  # never move a file out of the archive
        note = quarantine(
            path,
            folder.failed,
            subdir=item.subdir,
            tenant=folder.cfg.tenant,
            reason=str(reason),
            detail=detail,
        )
        metrics.WATCH_QUARANTINED.labels(folder.cfg.tenant, str(reason)).inc()
        log.warning("watch.quarantined", reason=str(reason), note=str(note))
        if self.events is not None:
            self.events.emit(
                "file.quarantined",
                "warning",
                folder.cfg.tenant,
                {
                    "filename": item.name,
                    "source": item.source,
                    "reason": str(reason),
                    "detail": detail,
                    "moved_to": str(note).removesuffix(ERROR_SUFFIX),
                },
                trace_id=pending.trace,
            )

    def _done_dir(self, folder: Folder, subdir: str) -> Path:
        assert folder.cfg.done is not None
        return folder.cfg.done / subdir if subdir else folder.cfg.done

    def _move_to_done(
        self, path: Path, pending: _Pending, item: IntakeItem, document_id: int | None
    ) -> None:
        try:
            move_source(path, self._done_dir(pending.folder, item.subdir), self.intake.protected)
        except FileNotFoundError:
            raise
        except OSError as exc:
            # Committed: only the move is retried; never ingested or copied again.
            self._mark_stuck(path, pending, "move", why_not_removable(path, exc), document_id)

    def _mark_stuck(
        self,
        path: Path,
        pending: _Pending,
        action: StuckAction,
        reason: str,
        document_id: int | None,
        *,
        log_it: bool = True,
    ) -> None:
        try:
            identity = _identity(os.lstat(path))
        except OSError:
            return  # gone meanwhile: nothing is stuck
        stuck = _Stuck(pending.folder, identity, action, reason, document_id, pending.trace)
        due = time.monotonic() + retry.delay(0, self.settings.retry_max_delay, retry.Cause.source)
        with self._lock:
            self._stuck[path] = stuck
            if action != "keep":  # never touched again: not even retried
                self._schedule(self._stuck_due, path, stuck, due)
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

    def _still_stuck(self, path: Path, stuck: _Stuck) -> bool:
        """Is ``path`` still the file that got stuck? Forgets it if not."""
        try:
            same = _identity(os.lstat(path)) == stuck.identity
        except OSError:
            same = False
        if not same:
            with self._lock:
                if self._stuck.get(path) is stuck:
                    del self._stuck[path]
        return same

    def _retry_stuck(self, path: Path, stuck: _Stuck) -> None:
        """Try the removal (or the move to done) of a committed file once more."""
        if not self._still_stuck(path, stuck):
            return
        try:
            if stuck.action == "remove":
                remove_source(path, self.intake.protected)
            else:
                rel = path.relative_to(stuck.folder.cfg.path)
                subdir = "/".join(rel.parts[:-1])
                move_source(path, self._done_dir(stuck.folder, subdir), self.intake.protected)
        except (OSError, SourceProtected) as exc:
            stuck.attempts += 1
            due = time.monotonic() + retry.delay(
                stuck.attempts, self.settings.retry_max_delay, retry.Cause.source
            )
            with self._lock:
                if isinstance(exc, SourceProtected):
                    stuck.action, stuck.reason = "keep", exc.message
                elif self._stuck.get(path) is stuck:
                    self._schedule(self._stuck_due, path, stuck, due)
            return
        with self._lock:
            self._stuck.pop(path, None)
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

    def _report_tenant(self, path: Path, pending: _Pending, exc: TenantError) -> None:
        """One line per waiting file; again only if the status changed or an hour passed."""
        status = exc.status if isinstance(exc, TenantNotActive) else "missing"
        now = time.monotonic()
        last = pending.tenant_reported
        if last is not None and last[0] == status and now - last[1] < self.tenant_report_interval:
            return  # retried quietly until the tenant is active
        pending.tenant_reported = (status, now)
        self.log.warning(
            "watch.tenant_not_active",
            tenant=pending.folder.cfg.tenant,
            status=status,
            reason="tenant_unknown" if status == "missing" else f"tenant_{status}",
            filename=path.name,
            path=str(path),
            folder=pending.folder.name,
            detail=exc.message,
        )

    # -- introspection (status, tests) --------------------------------------------------
    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {"pending": len(self._pending), "inflight": len(self._inflight)}

    def status_snapshot(self) -> dict[str, Any]:
        """For the daemon's state file (`ingestd status`)."""
        with self._lock:
            items = sorted(self._stuck.items())
        stuck = [
            {
                "path": str(p),
                "tenant": s.folder.cfg.tenant,
                "action": s.action,
                "reason": s.reason,
                "document_id": s.document_id,
                "since": s.since,
                "attempts": s.attempts,
                "trace": s.trace,
            }
            for p, s in items[:STUCK_SHOWN]
        ]
        return {**self.snapshot(), "stuck": stuck, "stuck_total": len(items)}

    def idle(self) -> bool:
        with self._lock:
            return not self._pending and not self._inflight

    def folders(self) -> list[Folder]:
        return list(self._folders.values())
