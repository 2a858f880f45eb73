"""The account's chrooted view: ``/`` is its inbox under ``paths.spool``; nothing else exists.

Every path from the client is canonicalised here and only here (``resolve``); a NUL
byte, a control character or a ``..`` above the root is refused with an SFTP error and a
log line naming the account and the path. We never create symlinks, and any found on the
way (an admin's mistake) is refused, not followed. Uploads go to a private partial file
per handle; CLOSE fsyncs it and hands it to the spool (see spool.py). Content intake would
refuse (by its first bytes: ``filetypes``) fails the upload itself, with the reason in the
status message, so the scanner shows the error instead of a success nobody sees undone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
from paramiko.sftp import (
    CMD_CLOSE,
    CMD_EXTENDED,
    CMD_EXTENDED_REPLY,
    CMD_FSETSTAT,
    CMD_FSTAT,
    CMD_INIT,
    CMD_NAMES,
    CMD_OPEN,
    CMD_OPENDIR,
    CMD_READ,
    CMD_READDIR,
    CMD_RENAME,
    CMD_VERSION,
    CMD_WRITE,
    SFTP_FAILURE,
    SFTP_NO_SUCH_FILE,
    SFTP_OK,
    SFTP_OP_UNSUPPORTED,
    SFTP_PERMISSION_DENIED,
)

from ingestd.config.settings import SftpAccountConfig
from ingestd.durable import fsync_dir
from ingestd.intake import filetypes
from ingestd.intake.ingest import Reason, Refused, check_filename
from ingestd.ops import metrics
from ingestd.ops.events import EventLog
from ingestd.ops.logflood import FloodGate
from ingestd.sources.sftp.spool import Entry, QuotaExceeded, Spool
from ingestd.sources.sftp.tenant_status import MISSING, TenantStatusCache

_HANDLE_COMMANDS = {CMD_CLOSE, CMD_READ, CMD_WRITE, CMD_FSTAT, CMD_FSETSTAT, CMD_READDIR}
PENDING_FILE_MODE = 0o100640
DIR_ATTR_MODE = 0o040750


class SftpRefusal(Exception):
    """A request we refuse; carries the SFTP status code, the reason for the log and the
    message the client sees. ``quiet``: already logged (a refusal repeated, not a new one)."""

    def __init__(self, code: int, reason: str, message: str, *, quiet: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.quiet = quiet


def _refuse(reason: str, message: str, code: int = SFTP_PERMISSION_DENIED) -> SftpRefusal:
    return SftpRefusal(code, reason, message)


_NO_SPACE = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}
# Refusals that are an operator's business, not only the scanner's: wrong content, limits,
# a full spool. (Bad names, links and paths are refused quietly: attacks and typos.)
OPERATOR_REASONS = frozenset({"bad_type", "empty", "too_large", "quota_exceeded", "spool_full"})


def storage_refusal(
    exc: OSError, reason: str, outcome: str = "the upload was not stored"
) -> SftpRefusal:
    """What the client reads when the spool's filesystem fails us. A full disk is said as
    such: the scanner's operator cannot fix it, but must know to call the admin, not retry."""
    if exc.errno in _NO_SPACE:
        return _refuse(
            "spool_full",
            f"the server's spool is full ({_NO_SPACE[exc.errno]}); {outcome}",
            SFTP_FAILURE,
        )
    return _refuse(reason, f"cannot store the data: {exc.strerror or exc}; {outcome}", SFTP_FAILURE)


def content_refusal(header: bytes, size: int, allowed: frozenset[str]) -> SftpRefusal | None:
    """Why intake would refuse a file of ``size`` bytes starting with ``header``, or None.

    The same test as intake's (``filetypes.detect`` against the allowed types), said
    while the scanner still waits for its answer: refused later, in intake, the file only
    lands in the failed folder and the scanner shows success.
    """
    if size == 0:
        return _refuse(str(Reason.empty), "refused: file is empty", SFTP_FAILURE)
    ftype = filetypes.detect(header)
    if ftype is None or ftype.name not in allowed:
        return _refuse(
            str(Reason.bad_type),
            f"refused: content is {filetypes.describe(header)}; "
            f"allowed types: {', '.join(sorted(allowed))}",
            SFTP_FAILURE,
        )
    return None


def read_header(path: Path) -> bytes:
    """The first ``HEADER_BYTES`` of a file the server wrote (a partial or a temp upload)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return os.pread(fd, filetypes.HEADER_BYTES, 0)
    finally:
        os.close(fd)


def _uncovered(gaps: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """``gaps`` (byte ranges not written yet) minus the range a WRITE just delivered."""
    out: list[tuple[int, int]] = []
    for a, b in gaps:
        if end <= a or start >= b:
            out.append((a, b))
            continue
        if a < start:
            out.append((a, start))
        if end < b:
            out.append((end, b))
    return out


def resolve(vpath: str) -> tuple[str, ...]:
    """Canonicalise a client path to components below the inbox root, or refuse it."""
    if "\x00" in vpath:
        raise _refuse("nul_byte", "path contains a NUL byte")
    if any(ord(c) < 32 or ord(c) == 127 for c in vpath):
        raise _refuse("control_character", "path contains control characters")
    parts: list[str] = []
    for comp in vpath.split("/"):
        if comp in ("", "."):
            continue
        if comp == "..":
            if not parts:
                raise _refuse("path_escape", "path leads outside your inbox")
            parts.pop()
            continue
        parts.append(comp)
    return tuple(parts)


def vpath_of(parts: tuple[str, ...]) -> str:
    return "/" + "/".join(parts)


# Refusals a client can repeat in a tight loop (OPEN after OPEN): logged through the
# server's FloodGate, not one line each.
FLOOD_REASONS = frozenset({"too_many_handles", "handles_exhausted"})


class HandleBudget:
    """The handles of all sessions together: every open upload holds a descriptor, and
    ``max_handles_per_session`` alone would let 20 sessions hold 1,280 of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def give(self, n: int = 1) -> None:
        with self._lock:
            self.used = max(0, self.used - n)


@dataclass
class Session:
    """What one authenticated connection knows: who it is and what it did."""

    account: SftpAccountConfig
    remote_ip: str
    conn_id: str
    spool: Spool
    max_file_size: int
    max_filename_bytes: int
    log: Any
    legacy: list[str] = field(default_factory=list)
    # Checked at every upload's OPEN too, not only at login: a session that outlives its
    # tenant's suspension or deletion must not keep feeding the spool.
    tenant_status: TenantStatusCache | None = None
    # intake.allowed_types: content is checked at upload against what intake will accept.
    allowed_types: frozenset[str] = frozenset(filetypes.ARCHIVABLE)
    # Refusals an operator must hear about become operator events (file.refused).
    events: EventLog | None = None
    last_activity: float = field(default_factory=time.monotonic)
    uploads: int = 0
    upload_bytes: int = 0
    # Files this session completed, by virtual path: a scanner that stats or setstats
    # its file right after CLOSE gets an answer even if intake already took it.
    recent: dict[str, paramiko.SFTPAttributes] = field(default_factory=dict)
    # ... and why the ones it refused are not there: clients that stat after CLOSE
    # (paramiko's put) report that instead of a bare "no such file". paramiko ignores a
    # failed CLOSE, so for a short file this is the only place its caller sees the reason.
    refused_uploads: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Handles this session holds (open uploads and listed folders, all its SFTP channels
    # together) and how many it may; ``handle_budget`` is the server's, shared by all.
    max_handles: int = 64
    handles: int = 0
    handle_budget: HandleBudget | None = None
    # The server's FloodGate (per remote IP), for refusals a client can repeat in a loop.
    flood: FloodGate | None = None

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def remember(self, vpath: str, size: int, mtime: float) -> None:
        attr = paramiko.SFTPAttributes()
        attr.st_size, attr.st_mode = size, PENDING_FILE_MODE
        attr.st_mtime = attr.st_atime = int(mtime)
        with self.lock:
            self.refused_uploads.pop(vpath, None)
            self.recent[vpath] = attr
            if len(self.recent) > 1000:
                self.recent.pop(next(iter(self.recent)))

    def take_handle(self) -> SftpRefusal | None:
        """Reserve a handle for an OPEN/OPENDIR, or say why not (the client reads it)."""
        with self.lock:
            if self.handles >= self.max_handles:
                return _refuse(
                    "too_many_handles",
                    f"too many open files: this session has "
                    f"{self.handles} open, the limit is {self.max_handles} per "
                    f"session; close some first",
                    SFTP_FAILURE,
                )
            budget = self.handle_budget
            if budget is not None and not budget.take():
                return _refuse(
                    "handles_exhausted",
                    f"too many open files on the server "
                    f"(all sessions together hold its limit of {budget.limit}); "
                    f"close some or try again later",
                    SFTP_FAILURE,
                )
            self.handles += 1
        return None

    def give_handles(self, n: int = 1) -> None:
        with self.lock:
            n = min(n, self.handles)
            self.handles -= n
        if self.handle_budget is not None and n:
            self.handle_budget.give(n)

    def remember_refusal(self, vpath: str, message: str) -> None:
        with self.lock:
            self.recent.pop(vpath, None)
            self.refused_uploads[vpath] = message
            if len(self.refused_uploads) > 1000:
                self.refused_uploads.pop(next(iter(self.refused_uploads)))


def _attrs(st: os.stat_result, name: str) -> paramiko.SFTPAttributes:
    attr = paramiko.SFTPAttributes.from_stat(st, name)
    # Never show our uid/gid or real permissions: the client only needs file vs directory.
    attr.st_uid = attr.st_gid = 0
    attr.st_mode = DIR_ATTR_MODE if stat.S_ISDIR(st.st_mode) else PENDING_FILE_MODE
    return attr


def _entry_attrs(entry: Entry) -> paramiko.SFTPAttributes:
    attr = paramiko.SFTPAttributes()
    attr.filename = entry.filename
    attr.st_size, attr.st_mode = entry.size, PENDING_FILE_MODE
    attr.st_uid = attr.st_gid = 0
    attr.st_mtime = attr.st_atime = int(entry.mtime)
    return attr


class UploadHandle(paramiko.SFTPHandle):
    """One open write handle: bytes go to a private partial file, no fsync until CLOSE.

    A final-named upload's content is checked as soon as its first ``HEADER_BYTES`` are
    in (writes may come in any order: clients pipeline them), and again at CLOSE from the
    file itself. A refusal is final: it is logged once, the bytes and the quota go at
    once, and every later WRITE and the CLOSE answer with the same reason. Temp-named
    uploads (``x.pdf.part``) are checked when they are renamed to their final name.
    """

    def __init__(self, vfs: InboxSFTP, parts: tuple[str, ...], flags: int) -> None:
        super().__init__(flags)
        self.vfs = vfs
        self.session = vfs.session
        self.parts = parts
        self.partial, self.fd = vfs.spool.new_partial(vfs.account.username)
        self.size = 0  # bytes reserved against the quota
        self.failed: SftpRefusal | None = None
        self.closed = False
        self.check_content = not vfs.spool.is_temp_name(parts[-1])
        # Byte ranges of the header not written yet; empty once the header was checked.
        self._header_gaps = [(0, filetypes.HEADER_BYTES)] if self.check_content else []

    def seed_from(self, existing: Path) -> None:
        """Open without TRUNC on an existing temp-named file: continue from its bytes."""
        with open(existing, "rb") as src, os.fdopen(os.dup(self.fd), "wb") as dst:
            shutil.copyfileobj(src, dst)
        size = os.fstat(self.fd).st_size
        self._grow(size)
        self._header_arrived(0, size, b"")

    def _grow(self, end: int) -> None:
        if end <= self.size:
            return
        if end > self.session.max_file_size:
            raise _refuse(
                "too_large",
                f"file exceeds the size limit of {self.session.max_file_size} bytes",
                SFTP_FAILURE,
            )
        acct = self.vfs.account
        try:
            self.vfs.spool.reserve(acct.username, end - self.size, int(acct.quota))
        except QuotaExceeded as exc:
            # What the account holds besides this upload, whose bytes go with the refusal.
            held = max(0, exc.used - self.size)
            message = f"quota exceeded: the account holds {held} pending bytes, its quota is "
            raise _refuse("quota_exceeded", f"{message}{exc.limit}", SFTP_FAILURE) from None
        self.size = end

    def _store(self, offset: int, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                # A write that fills the disk is short first, then fails with ENOSPC.
                n = os.pwrite(self.fd, view, offset)
                if n <= 0:
                    raise OSError(errno.EIO, "the filesystem accepted no bytes")
                view, offset = view[n:], offset + n
        except OSError as exc:
            raise storage_refusal(exc, "write_error") from None

    def _header_arrived(self, offset: int, end: int, data: bytes) -> None:
        """Bytes ``offset..end`` are written: once all of the header is, check it."""
        if not self._header_gaps or offset >= filetypes.HEADER_BYTES:
            return
        self._header_gaps = _uncovered(self._header_gaps, offset, end)
        if self._header_gaps:
            return  # not all there yet, or the file is shorter: CLOSE decides
        if offset == 0 and len(data) >= filetypes.HEADER_BYTES:
            header = data[: filetypes.HEADER_BYTES]  # the usual case: one write has it all
        else:
            header = read_header(self.partial)
        refusal = content_refusal(header, len(header), self.session.allowed_types)
        if refusal is not None:
            raise refusal

    def _fail(self, op: str, exc: SftpRefusal) -> None:
        """Refuse the upload for good. The partial and its quota go now, not at CLOSE: a
        client may pipeline many more writes, or never send CLOSE at all."""
        self.failed = exc
        self.vfs.refused(op, self.parts, exc)
        self.session.remember_refusal(vpath_of(self.parts), exc.message)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._discard()

    def write(self, offset: int, data: bytes) -> int:
        if self.failed is not None:
            return self.failed.code
        try:
            self._grow(offset + len(data))
            self._store(offset, data)
            self._header_arrived(offset, offset + len(data), data)
        except SftpRefusal as exc:
            # Disk full or a refused type: the CLOSE a client sends after the error must
            # report failure too, instead of ingesting a torso.
            self._fail("write", exc)
            return exc.code
        return SFTP_OK

    def read(self, offset: int, length: int) -> int:
        return SFTP_PERMISSION_DENIED

    def stat(self) -> paramiko.SFTPAttributes | int:
        if self.fd < 0:
            return self.failed.code if self.failed is not None else SFTP_FAILURE
        return _attrs(os.fstat(self.fd), self.parts[-1])

    def chattr(self, attr: paramiko.SFTPAttributes) -> int:
        if self.failed is not None:
            return self.failed.code
        try:
            self.vfs.check_setstat(attr)
        except SftpRefusal as exc:
            self.vfs.refused("fsetstat", self.parts, exc)
            return exc.code
        if attr._flags & attr.FLAG_SIZE and attr.st_size is not None:
            self._grow(attr.st_size)
            os.ftruncate(self.fd, attr.st_size)
        return SFTP_OK

    def close(self) -> int:
        """CLOSE: check, fsync, then hand the file to the spool. The reply waits for this."""
        if self.closed:
            return SFTP_OK
        self.closed = True
        if self.failed is not None:
            self.abort()
            return self.failed.code
        try:
            st = os.fstat(self.fd)
            if self.check_content:
                # Read back, not from what the writes said: a short file, writes with holes
                # or a header rewritten after the early check are all decided here.
                refusal = content_refusal(
                    read_header(self.partial), st.st_size, self.session.allowed_types
                )
                if refusal is not None:
                    raise refusal
            os.fsync(self.fd)
        except SftpRefusal as exc:
            self._fail("close", exc)
            return exc.code
        except OSError as exc:
            self._fail("close", storage_refusal(exc, "fsync_error"))
            return SFTP_FAILURE
        os.close(self.fd)
        self.fd = -1
        try:
            self.vfs.complete_upload(self.partial, self.parts, st.st_size, st.st_mtime)
        except SftpRefusal as exc:
            self._fail("close", exc)
            return exc.code
        except OSError as exc:
            self._fail("close", storage_refusal(exc, "store_error"))
            return SFTP_FAILURE
        return SFTP_OK

    def _discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.partial)
        self.vfs.spool.release(self.vfs.account.username, self.size)
        self.size = 0

    def abort(self) -> None:
        """The connection dropped (or the upload failed) before a good CLOSE: no document."""
        self.closed = True
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._discard()


class InboxSFTP(paramiko.SFTPServerInterface):
    """paramiko calls these per request; ``server`` is our ServerInterface."""

    def __init__(self, server: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(server, *args, **kwargs)
        session = getattr(server, "session", None)
        if session is None:  # no login: paramiko never gets here, but be sure
            raise RuntimeError("SFTP subsystem without an authenticated session")
        self.session: Session = session
        self.account = session.account
        self.spool = session.spool
        self.root = session.spool.inbox(self.account.username)
        self.real_root = os.path.realpath(self.root)

    # -- helpers ------------------------------------------------------------------------
    def refused(self, op: str, parts: tuple[str, ...] | str, exc: SftpRefusal) -> None:
        self._log_refusal(op, parts, exc)
        events = self.session.events
        if events is not None and exc.reason in OPERATOR_REASONS and not exc.quiet:
            acct = self.account
            path = parts if isinstance(parts, str) else vpath_of(parts)
            # One event per account and reason in a while: a scanner retrying a refused
            # upload every minute must not send a mail every minute.
            events.emit(
                "file.refused",
                "error" if exc.reason == "spool_full" else "warning",
                acct.tenant,
                {
                    "filename": path,
                    "source": f"sftp:{acct.username}",
                    "reason": exc.reason,
                    "detail": exc.message,
                    "remote_ip": self.session.remote_ip,
                },
                dedupe=f"sftp:{acct.username}:{exc.reason}",
            )

    def _log_refusal(self, op: str, parts: tuple[str, ...] | str, exc: SftpRefusal) -> None:
        path = parts if isinstance(parts, str) else vpath_of(parts)
        metrics.SFTP_REFUSED.labels(self.account.tenant, exc.reason).inc()
        # A full or failing spool is the server's fault, not the client's: an admin must act.
        server_fault = exc.reason == "spool_full" or exc.reason.endswith("_error")
        session = self.session
        if exc.reason in FLOOD_REASONS and session.flood is not None:
            acct = self.account
            session.flood.log_event(
                "warning",
                "sftp.refused",
                session.remote_ip,
                conn=session.conn_id,
                remote_ip=session.remote_ip,
                account=acct.username,
                tenant=acct.tenant,
                op=op,
                path=path,
                reason=exc.reason,
                detail=exc.message,
            )
            return
        emit = session.log.error if server_fault else session.log.warning
        emit("sftp.refused", op=op, path=path, reason=exc.reason, detail=exc.message)

    def _real(self, parts: tuple[str, ...]) -> Path:
        real = self.root.joinpath(*parts)
        # Any symlink on the way would make realpath differ from the lexical path. Checked
        # for missing names too: "no such file" below a link would tell what exists there.
        if parts and os.path.realpath(real) != os.path.join(self.real_root, *parts):
            raise _refuse("symlink", "symbolic links are not allowed")
        return real

    def _lstat(self, parts: tuple[str, ...]) -> os.stat_result | None:
        try:
            st = os.lstat(self._real(parts))
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise _refuse("symlink", "symbolic links are not allowed")
        return st

    def _parent_dir(self, parts: tuple[str, ...]) -> Path:
        parent = parts[:-1]
        st = self._lstat(parent) if parent else os.lstat(self.root)
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise _refuse("no_parent", "the folder does not exist", SFTP_NO_SUCH_FILE)
        return self._real(parent)

    def _name_ok(self, name: str) -> None:
        try:
            check_filename(name, self.session.max_filename_bytes)
        except Refused as exc:
            raise _refuse("bad_filename", exc.detail, SFTP_FAILURE) from None

    def _subdir(self, parts: tuple[str, ...]) -> str:
        return "/".join(parts[:-1])

    def _pending(self, parts: tuple[str, ...]) -> Entry | None:
        if not parts:
            return None
        return self.spool.find(self.account.username, self._subdir(parts), parts[-1])

    def _tenant_active(self) -> None:
        """Refuse a new upload once the tenant is known not to be active (suspended,
        deleting, deleted) while this session was open. Unknown (the database is down)
        accepts it: the spool holds it until intake can decide."""
        cache = self.session.tenant_status
        status = cache.status(self.account.tenant) if cache is not None else None
        if status is None or status == "active":
            return
        reason = "tenant_unknown" if status == MISSING else f"tenant_{status}"
        raise _refuse(
            reason,
            f"tenant {self.account.tenant} does not accept uploads "
            f"({'deleted' if status == MISSING else status})",
        )

    def check_setstat(self, attr: paramiko.SFTPAttributes) -> None:
        # Clients send times after an upload (`put -p`, scp -p, lftp); accepted, not applied:
        # the archive keeps the time of receipt. Ownership and permissions are ours.
        if attr._flags & (attr.FLAG_PERMISSIONS | attr.FLAG_UIDGID):
            raise _refuse("setstat_permissions", "changing permissions or owner is not allowed")

    # -- requests -------------------------------------------------------------------------
    def canonicalize(self, path: str) -> str:
        return vpath_of(resolve(path))

    def open(self, path: str, flags: int, attr: paramiko.SFTPAttributes) -> Any:
        parts = resolve(path)
        if not parts:
            raise _refuse("is_directory", "cannot open the inbox itself", SFTP_FAILURE)
        if not flags & (os.O_WRONLY | os.O_RDWR):
            # A drop box: files go in, nothing is read back out.
            raise _refuse("read_refused", "reading files is not allowed")
        self._tenant_active()
        self._parent_dir(parts)
        self._name_ok(parts[-1])
        st = self._lstat(parts)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise _refuse("is_directory", "a folder of that name exists", SFTP_FAILURE)
        if flags & os.O_EXCL and (st is not None or self._pending(parts) is not None):
            raise _refuse("exists", "the file already exists", SFTP_FAILURE)
        handle = UploadHandle(self, parts, flags)
        with self.session.lock:  # a new attempt: an earlier refusal no longer explains it
            self.session.refused_uploads.pop(vpath_of(parts), None)
        try:
            if st is not None and not flags & os.O_TRUNC:
                handle.seed_from(self._real(parts))
        except SftpRefusal:
            handle.abort()
            raise
        self.session.log.debug("sftp.open", path=vpath_of(parts))
        return handle

    def complete_upload(
        self, partial: Path, parts: tuple[str, ...], size: int, mtime: float
    ) -> None:
        """The upload under ``partial`` is CLOSEd and fsynced: publish it."""
        name = parts[-1]
        vpath = vpath_of(parts)
        if self.spool.is_temp_name(name):
            # Stays visible under its temp name until the client renames it.
            parent = self._parent_dir(parts)
            target = parent / name
            old = self._lstat(parts)
            os.replace(partial, target)
            fsync_dir(parent)
            if old is not None:
                self.spool.release(self.account.username, old.st_size)
            self.session.log.info("sftp.upload_staged", path=vpath, size=size)
        else:
            self._enqueue(partial, parts, size, mtime)
        self.session.remember(vpath, size, mtime)

    def _enqueue(self, src: Path, parts: tuple[str, ...], size: int, mtime: float) -> None:
        acct = self.account
        subdir = self._subdir(parts)
        tags = list(acct.tags)
        if acct.subfolder_tags and subdir:
            tags.extend(subdir.split("/"))
        entry = self.spool.make_entry(
            account=acct.username,
            tenant=acct.tenant,
            filename=parts[-1],
            subdir=subdir,
            size=size,
            mtime=mtime,
            remote_ip=self.session.remote_ip,
            tags=tags,
        )
        self.spool.enqueue(src, entry)
        self.session.uploads += 1
        self.session.upload_bytes += size
        metrics.SFTP_UPLOADS.labels(acct.tenant).inc()
        metrics.SFTP_UPLOAD_BYTES.labels(acct.tenant).inc(size)
        # The spool id is the upload's correlation id (trace): intake and its jobs carry it.
        self.session.log.info(
            "sftp.upload_complete",
            path=vpath_of(parts),
            size=size,
            spool_id=entry.id,
            trace=entry.id,
        )

    def list_folder(self, path: str) -> Any:
        parts = resolve(path)
        st = self._lstat(parts) if parts else os.lstat(self.root)
        if st is None:
            return SFTP_NO_SUCH_FILE
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse("not_directory", "not a folder", SFTP_FAILURE)
        out = []
        with os.scandir(self._real(parts)) as it:
            for entry in it:
                est = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(est.st_mode) or stat.S_ISREG(est.st_mode):
                    out.append(_attrs(est, entry.name))
        out.extend(
            _entry_attrs(e) for e in self.spool.pending(self.account.username, "/".join(parts))
        )
        return out

    def stat(self, path: str) -> Any:
        parts = resolve(path)
        if not parts:
            return _attrs(os.lstat(self.root), "/")
        st = self._lstat(parts)
        if st is not None:
            return _attrs(st, parts[-1])
        entry = self._pending(parts)
        if entry is not None:
            return _entry_attrs(entry)
        with self.session.lock:
            recent = self.session.recent.get(vpath_of(parts))
            refusal = self.session.refused_uploads.get(vpath_of(parts))
        if refusal is not None:
            # Logged when it was refused; this only says again why the file is not there.
            raise SftpRefusal(SFTP_NO_SUCH_FILE, "refused_upload", refusal, quiet=True)
        return recent if recent is not None else SFTP_NO_SUCH_FILE

    lstat = stat

    def remove(self, path: str) -> int:
        parts = resolve(path)
        st = self._lstat(parts) if parts else None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise _refuse("is_directory", "use rmdir for folders", SFTP_FAILURE)
            os.unlink(self._real(parts))
            self.spool.release(self.account.username, st.st_size)
            self.session.log.info("sftp.removed", path=vpath_of(parts))
            return SFTP_OK
        entry = self._pending(parts)
        if entry is None:
            return SFTP_NO_SUCH_FILE
        if not self.spool.remove(entry):
            raise _refuse("being_ingested", "the file is already being archived", SFTP_FAILURE)
        self.session.log.info("sftp.removed_pending", path=vpath_of(parts), spool_id=entry.id)
        return SFTP_OK

    def rename(self, oldpath: str, newpath: str) -> int:
        return self._rename(oldpath, newpath, overwrite=False)

    def posix_rename(self, oldpath: str, newpath: str) -> int:
        return self._rename(oldpath, newpath, overwrite=True)

    def _rename(self, oldpath: str, newpath: str, *, overwrite: bool) -> int:
        old, new = resolve(oldpath), resolve(newpath)
        if not old or not new:
            raise _refuse("rename_root", "cannot rename the inbox", SFTP_FAILURE)
        if new[: len(old)] == old and len(new) > len(old):
            raise _refuse("rename_into_self", "cannot move a folder into itself", SFTP_FAILURE)
        new_parent = self._parent_dir(new)
        self._name_ok(new[-1])
        target = self._lstat(new)
        if target is not None and (not overwrite or stat.S_ISDIR(target.st_mode)):
            raise _refuse("exists", "the target already exists", SFTP_FAILURE)
        if self._pending(new) is not None and not overwrite:
            raise _refuse("exists", "the target already exists", SFTP_FAILURE)
        st = self._lstat(old)
        if st is not None:
            real_old = self._real(old)
            if stat.S_ISREG(st.st_mode) and not self.spool.is_temp_name(new[-1]):
                # The scanner's "upload as x.tmp, rename to x.pdf": now it is complete, and
                # its content is checked as a final-named upload's is at CLOSE. Refused, it
                # keeps its temp name (and its quota) until the client removes it.
                refusal = content_refusal(
                    read_header(real_old), st.st_size, self.session.allowed_types
                )
                if refusal is not None:
                    raise refusal
                if target is not None:
                    os.unlink(self._real(new))
                    self.spool.release(self.account.username, target.st_size)
                try:
                    self._enqueue(real_old, new, st.st_size, st.st_mtime)
                except FileNotFoundError:
                    return SFTP_NO_SUCH_FILE  # another session took it first
                except OSError as exc:
                    if exc.errno not in _NO_SPACE:
                        raise
                    raise storage_refusal(
                        exc, "store_error", "the file keeps its temp name"
                    ) from None
                fsync_dir(real_old.parent)
                self.session.remember(vpath_of(new), st.st_size, st.st_mtime)
                return SFTP_OK
            os.replace(real_old, new_parent / new[-1]) if overwrite else os.rename(
                real_old, new_parent / new[-1]
            )
            fsync_dir(new_parent)
            self.session.log.info("sftp.renamed", old=vpath_of(old), new=vpath_of(new))
            return SFTP_OK
        entry = self._pending(old)
        if entry is None:
            return SFTP_NO_SUCH_FILE
        if self.spool.is_temp_name(new[-1]):
            raise _refuse(
                "rename_to_temp", "a completed upload cannot get a temp name", SFTP_FAILURE
            )
        if not self.spool.rename(entry, self._subdir(new), new[-1]):
            raise _refuse("being_ingested", "the file is already being archived", SFTP_FAILURE)
        self.session.log.info("sftp.renamed_pending", old=vpath_of(old), new=vpath_of(new))
        return SFTP_OK

    def mkdir(self, path: str, attr: paramiko.SFTPAttributes) -> int:
        parts = resolve(path)
        if not parts:
            raise _refuse("exists", "the inbox exists", SFTP_FAILURE)
        parent = self._parent_dir(parts)
        self._name_ok(parts[-1])
        try:
            os.mkdir(parent / parts[-1], 0o700)
        except FileExistsError:
            raise _refuse("exists", "the folder already exists", SFTP_FAILURE) from None
        fsync_dir(parent)
        self.session.log.info("sftp.mkdir", path=vpath_of(parts))
        return SFTP_OK

    def rmdir(self, path: str) -> int:
        parts = resolve(path)
        if not parts:
            raise _refuse("rmdir_root", "cannot remove the inbox", SFTP_FAILURE)
        st = self._lstat(parts)
        if st is None:
            return SFTP_NO_SUCH_FILE
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse("not_directory", "not a folder", SFTP_FAILURE)
        if self.spool.pending_under(self.account.username, "/".join(parts)):
            raise _refuse(
                "not_empty", "the folder holds files waiting to be archived", SFTP_FAILURE
            )
        try:
            os.rmdir(self._real(parts))
        except OSError:
            raise _refuse("not_empty", "the folder is not empty", SFTP_FAILURE) from None
        self.session.log.info("sftp.rmdir", path=vpath_of(parts))
        return SFTP_OK

    def chattr(self, path: str, attr: paramiko.SFTPAttributes) -> int:
        self.check_setstat(attr)
        if attr._flags & attr.FLAG_SIZE:
            raise _refuse("setstat_size", "truncating a closed file is not allowed")
        result = self.stat(path)
        return SFTP_OK if isinstance(result, paramiko.SFTPAttributes) else int(result)

    def symlink(self, target_path: str, path: str) -> int:
        raise _refuse("symlink", "symbolic links are not allowed")

    def readlink(self, path: str) -> Any:
        raise _refuse("symlink", "symbolic links are not allowed")


_ERRNO_STATUS = {
    errno.ENOENT: SFTP_NO_SUCH_FILE,
    errno.EACCES: SFTP_PERMISSION_DENIED,
    errno.EPERM: SFTP_PERMISSION_DENIED,
}

# limits@openssh.com: without it OpenSSH clients fall back to 32 KiB writes; with it they
# send ~255 KiB per request, and every request costs Python time in this server.
MAX_SFTP_PACKET = 256 * 1024
MAX_SFTP_WRITE = MAX_SFTP_PACKET - 1024


class IngestSFTPServer(paramiko.SFTPServer):
    """paramiko's SFTP subsystem with five fixes for an upload server.

    - CLOSE can fail: paramiko always answers OK, but our CLOSE is the durability point
      and must report a failed fsync, quota or size limit.
    - Refusals carry a reason: one place maps ``SftpRefusal`` to a status and a log line,
      and the client reads the reason in the status message, for WRITE, FSTAT, FSETSTAT
      and CLOSE too (paramiko would send its bare "Failure").
    - A dropped connection aborts open uploads instead of closing (= completing) them.
    - The version reply advertises what we do (posix-rename, limits), not check-file,
      which needs reads a drop box refuses.
    - Handles are limited per session and for the whole server (``Session.take_handle``):
      every open upload holds a descriptor, and the daemon's are limited (LimitNOFILE).
    """

    server: InboxSFTP
    file_table: dict[bytes, Any]
    folder_table: dict[bytes, Any]

    def _send_server_version(self) -> int:
        t, data = self._read_packet()
        if t != CMD_INIT:
            raise paramiko.SFTPError("Incompatible sftp protocol")
        version = int(struct.unpack(">I", data[:4])[0])
        msg = paramiko.Message()
        msg.add_int(3)
        msg.add("posix-rename@openssh.com", "1", "limits@openssh.com", "1")
        self._send_packet(CMD_VERSION, msg)
        return version

    def _send_limits(self, request_number: int) -> None:
        msg = paramiko.Message()
        msg.add_int(request_number)
        msg.add_int64(MAX_SFTP_PACKET)  # longest packet we accept
        msg.add_int64(MAX_SFTP_WRITE)  # read length (reads are refused anyway)
        msg.add_int64(MAX_SFTP_WRITE)  # write length
        msg.add_int64(self.server.session.max_handles)  # open handles
        self._send_packet(CMD_EXTENDED_REPLY, msg)

    def _process(self, t: int, request_number: int, msg: paramiko.Message) -> None:
        self.server.session.touch()
        start = msg.packet.tell()
        try:
            if t == CMD_CLOSE:
                self._close(request_number, msg)
                return
            if t == CMD_WRITE:
                self._write(request_number, msg)
                return
            if t in (CMD_OPEN, CMD_OPENDIR):
                self._open(t, request_number, msg)
                return
            if t in (CMD_FSTAT, CMD_FSETSTAT):
                failed = self._failed_upload(msg.get_binary())
                msg.packet.seek(start)  # paramiko reads the request itself
                if failed is not None:
                    self._send_status(request_number, failed.code, failed.message)
                    return
            if t == CMD_EXTENDED:
                tag = msg.get_text()
                if tag == "hardlink@openssh.com":
                    raise _refuse("hardlink", "hard links are not allowed")
                if tag == "limits@openssh.com":
                    self._send_limits(request_number)
                    return
                if tag == "posix-rename@openssh.com":
                    old, new = msg.get_text(), msg.get_text()
                    self._send_status(request_number, self.server.posix_rename(old, new))
                    return
                self._send_status(request_number, SFTP_OP_UNSUPPORTED)
                return
            super()._process(t, request_number, msg)
        except SftpRefusal as exc:
            if not exc.quiet:
                self._refused(t, msg, start, exc)
            self._send_status(request_number, exc.code, exc.message)
        except UnicodeDecodeError:
            bad = _refuse("bad_encoding", "path is not valid UTF-8", SFTP_FAILURE)
            self._refused(t, msg, start, bad)
            self._send_status(request_number, bad.code, bad.message)
        except OSError as exc:
            # The filesystem said no (disk full, name too long, permissions): one status
            # and one log line, never a traceback into paramiko's generic handler.
            code = _ERRNO_STATUS.get(exc.errno or 0, SFTP_FAILURE)
            err = _refuse(
                f"os_{errno.errorcode.get(exc.errno or 0, 'error')}", exc.strerror or str(exc), code
            )
            if exc.errno in _NO_SPACE:
                err = storage_refusal(exc, err.reason, "nothing was changed")
            self._refused(t, msg, start, err)
            self._send_status(request_number, err.code, err.message)

    def _refused(self, t: int, msg: paramiko.Message, start: int, exc: SftpRefusal) -> None:
        # Re-read the request's first field: for every path request it is the path, which
        # the log line must name (escaped, it may be the attack itself).
        op = CMD_NAMES.get(t, str(t)).removeprefix("CMD_").lower()
        path = "?"
        if t not in _HANDLE_COMMANDS:
            with contextlib.suppress(Exception):
                msg.packet.seek(start)
                two_paths = t == CMD_RENAME
                if t == CMD_EXTENDED:
                    tag = msg.get_string()  # then the extension's own fields
                    two_paths = tag in (b"posix-rename@openssh.com", b"hardlink@openssh.com")
                fields = [msg.get_string()]
                if two_paths:
                    fields.append(msg.get_string())  # both ends: either may be the attack
                path = " -> ".join(
                    f.decode("utf-8", "backslashreplace").replace("\x00", "\\x00") for f in fields
                )
        self.server.refused(op, path, exc)

    def _open(self, t: int, request_number: int, msg: paramiko.Message) -> None:
        """OPEN/OPENDIR within the session's (and the server's) handle limit: past it the
        client reads "too many open files" and the session goes on; closing one frees it."""
        session = self.server.session
        refusal = session.take_handle()
        if refusal is not None:
            raise refusal
        before = len(self.file_table) + len(self.folder_table)
        try:
            super()._process(t, request_number, msg)
        finally:
            if len(self.file_table) + len(self.folder_table) == before:
                session.give_handles(1)  # refused or failed: no handle was handed out

    def _failed_upload(self, handle: bytes) -> SftpRefusal | None:
        fobj = self.file_table.get(handle)
        return fobj.failed if isinstance(fobj, UploadHandle) else None

    def _write(self, request_number: int, msg: paramiko.Message) -> None:
        handle, offset, data = msg.get_binary(), msg.get_int64(), msg.get_binary()
        fobj = self.file_table.get(handle)
        if fobj is None:
            self._send_status(request_number, paramiko.sftp.SFTP_BAD_MESSAGE, "Invalid handle")
            return
        code = fobj.write(offset, data)
        failed = self._failed_upload(handle)
        message = failed.message if code != SFTP_OK and failed is not None else None
        self._send_status(request_number, code, message)

    def _close(self, request_number: int, msg: paramiko.Message) -> None:
        handle = msg.get_binary()
        if handle in self.folder_table:
            del self.folder_table[handle]
            self.server.session.give_handles(1)
            self._send_status(request_number, SFTP_OK)
            return
        fobj = self.file_table.pop(handle, None)
        if fobj is None:
            self._send_status(request_number, paramiko.sftp.SFTP_BAD_MESSAGE, "Invalid handle")
            return
        self.server.session.give_handles(1)
        result = fobj.close()
        code = result if isinstance(result, int) else SFTP_OK
        failed = fobj.failed if isinstance(fobj, UploadHandle) else None
        # Failed: the upload's own reason ("refused: content is ...", "quota exceeded: ..."),
        # the last answer the scanner gets about this file and often the only one it shows.
        message = "" if code == SFTP_OK else failed.message if failed else "upload failed"
        self._send_status(request_number, code, message)

    def finish_subsystem(self) -> None:
        self.server.session.give_handles(len(self.file_table) + len(self.folder_table))
        for fobj in list(self.file_table.values()):
            if isinstance(fobj, UploadHandle) and not fobj.closed:
                fobj.abort()
                self.server.session.log.warning(
                    "sftp.upload_aborted", path=vpath_of(fobj.parts), size=fobj.size
                )
        self.file_table = {}
        self.folder_table = {}
        # OpenSSH's sftp-server reports exit status 0 when the session ends; scp checks it
        # and exits 1 without it, although every file arrived.
        with contextlib.suppress(Exception):
            if not self.sock.closed:
                self.sock.send_exit_status(0)
        super().finish_subsystem()
