"""The account's chrooted view: ``/`` is its inbox under ``paths.spool``; nothing else exists.

paramiko calls ``InboxSFTP`` per request. Paths are canonicalised in ``paths`` (and only
there); each refusal is logged with the account and the path (``refusals``); an OPEN
returns an ``UploadHandle`` (``uploads``), whose CLOSE is one ``close_upload`` into the
session's ``Inbox`` (``inbox``); listings show pending uploads too (``listing``). A
rename of a temp-named upload to its final name completes it (``Inbox.publish``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

import paramiko
from paramiko.sftp import SFTP_FAILURE, SFTP_NO_SUCH_FILE, SFTP_OK

from ingestd.arrivals.record import Arrival, ArrivalOutcome
from ingestd.durable import fsync_dir
from ingestd.intake.items import Refused
from ingestd.intake.source_file import check_filename
from ingestd.log import new_trace_id
from ingestd.runtime import metrics
from ingestd.sources.handoff import tenant_reason, tenant_refusal_text
from ingestd.sources.sftp.inbox import Inbox, Prepared, subdir_of
from ingestd.sources.sftp.listing import attrs, entry_attrs, listing
from ingestd.sources.sftp.paths import Chroot, resolve, vpath_of
from ingestd.sources.sftp.refusals import (
    FLOOD_REASONS,
    NO_SPACE,
    OPERATOR_REASONS,
    SftpRefusal,
    content_refusal,
    read_header,
    refuse,
    storage_refusal,
)
from ingestd.sources.sftp.session import Session
from ingestd.sources.sftp.spool_entry import Entry
from ingestd.sources.sftp.uploads import UploadHandle
from ingestd.sources.sftp.views import EventSink
from ingestd.states import TenantStatus


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
        self.chroot = Chroot(self.root)
        self.inbox = Inbox(session, self.chroot)

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

        if events is not None and op in ARRIVAL_OPS and not exc.quiet and _file_refused(exc.reason):
            self._refused_arrival(events, parts, exc)

    def _refused_arrival(
        self, events: EventSink, parts: tuple[str, ...] | str, exc: SftpRefusal
    ) -> None:
        """A file refused by the server itself (its name, its content, its tenant) is an
        arrival too (ingestd/arrivals/record.py): written by the supervisor's event log,
        kept on disk while the database is down."""
        acct = self.account
        path = parts if isinstance(parts, str) else vpath_of(parts)
        folders, _, name = path.strip("/").rpartition("/")
        arrival = Arrival(
            trace_id=new_trace_id(),
            tenant=acct.tenant,
            source=f"sftp:{acct.username}",
            name=name or path,
            outcome=ArrivalOutcome.refused,
            subdir=folders,
            reason=exc.reason,
            detail=exc.message,
        )
        with contextlib.suppress(ValueError):  # a tenant name the event log refuses
            events.emit(
                arrival.event_type(),
                "info",
                acct.tenant,
                arrival.event_detail(),
                trace_id=arrival.trace_id,
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

    def _name_ok(self, name: str) -> None:
        try:
            check_filename(name, self.session.max_filename_bytes)
        except Refused as exc:
            raise refuse("bad_filename", exc.detail, SFTP_FAILURE) from None

    def _pending(self, parts: tuple[str, ...]) -> Entry | None:
        if not parts:
            return None
        return self.spool.find(self.account.username, subdir_of(parts), parts[-1])

    def _tenant_active(self) -> None:
        """Refuse a new upload once the tenant is known not to be active (suspended,
        deleting, deleted) while this session was open. Unknown (the database is down)
        accepts it: the spool holds it until intake can decide."""
        cache = self.session.tenant_status
        status = cache.status(self.account.tenant) if cache is not None else None
        if status is None or status == TenantStatus.active:
            return
        raise refuse(tenant_reason(status), tenant_refusal_text(self.account.tenant, status))

    def check_setstat(self, attr: paramiko.SFTPAttributes) -> None:
        # Clients send times after an upload (`put -p`, scp -p, lftp); accepted, not applied:
        # the archive keeps the time of receipt. Ownership and permissions are ours.
        if attr._flags & (attr.FLAG_PERMISSIONS | attr.FLAG_UIDGID):
            raise refuse("setstat_permissions", "changing permissions or owner is not allowed")

    # -- requests -------------------------------------------------------------------------
    def canonicalize(self, path: str) -> str:
        return vpath_of(resolve(path))

    def open(self, path: str, flags: int, attr: paramiko.SFTPAttributes) -> Any:
        parts = resolve(path)
        if not parts:
            raise refuse("is_directory", "cannot open the inbox itself", SFTP_FAILURE)
        if not flags & (os.O_WRONLY | os.O_RDWR):
            # A drop box: files go in, nothing is read back out.
            raise refuse("read_refused", "reading files is not allowed")
        self._tenant_active()
        self.chroot.parent_dir(parts)
        self._name_ok(parts[-1])
        st = self.chroot.lstat(parts)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise refuse("is_directory", "a folder of that name exists", SFTP_FAILURE)
        if flags & os.O_EXCL and (st is not None or self._pending(parts) is not None):
            raise refuse("exists", "the file already exists", SFTP_FAILURE)
        handle = UploadHandle(self, parts, flags)
        with self.session.lock:  # a new attempt: an earlier refusal no longer explains it
            self.session.refused_uploads.pop(vpath_of(parts), None)
        try:
            if st is not None and not flags & os.O_TRUNC:
                handle.seed_from(self.chroot.real(parts))
        except SftpRefusal:
            handle.abort()
            raise
        self.session.log.debug("sftp.open", path=vpath_of(parts))
        return handle

    def close_upload(
        self, fd: int, partial: Path, parts: tuple[str, ...], size: int, mtime: float, reserved: int
    ) -> None:
        """An upload's CLOSE (``UploadHandle.close``): see ``Inbox.close_upload``."""
        self.inbox.close_upload(fd, partial, parts, size, mtime, reserved)

    def list_folder(self, path: str) -> Any:
        parts = resolve(path)
        st = self.chroot.lstat(parts) if parts else os.lstat(self.root)
        if st is None:
            return SFTP_NO_SUCH_FILE
        if not stat.S_ISDIR(st.st_mode):
            raise refuse("not_directory", "not a folder", SFTP_FAILURE)
        pending = self.spool.pending(self.account.username, "/".join(parts))
        return listing(self.chroot.real(parts), pending)

    def stat(self, path: str) -> Any:
        parts = resolve(path)
        if not parts:
            return attrs(os.lstat(self.root), "/")
        st = self.chroot.lstat(parts)
        if st is not None:
            return attrs(st, parts[-1])
        entry = self._pending(parts)
        if entry is not None:
            return entry_attrs(entry)
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
        st = self.chroot.lstat(parts) if parts else None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise refuse("is_directory", "use rmdir for folders", SFTP_FAILURE)
            os.unlink(self.chroot.real(parts))
            self.spool.release_staged(self.account.username, st.st_size)
            self.session.log.info("sftp.removed", path=vpath_of(parts))
            return SFTP_OK
        entry = self._pending(parts)
        if entry is None:
            return SFTP_NO_SUCH_FILE
        if not self.spool.remove(entry):
            raise refuse("being_ingested", "the file is already being archived", SFTP_FAILURE)
        self.session.log.info("sftp.removed_pending", path=vpath_of(parts), spool_id=entry.id)
        return SFTP_OK

    def rename(self, oldpath: str, newpath: str) -> int:
        return self._rename(oldpath, newpath, overwrite=False)

    def posix_rename(self, oldpath: str, newpath: str) -> int:
        return self._rename(oldpath, newpath, overwrite=True)

    def _rename(self, oldpath: str, newpath: str, *, overwrite: bool) -> int:
        old, new = resolve(oldpath), resolve(newpath)
        if not old or not new:
            raise refuse("rename_root", "cannot rename the inbox", SFTP_FAILURE)
        if new[: len(old)] == old and len(new) > len(old):
            raise refuse("rename_into_self", "cannot move a folder into itself", SFTP_FAILURE)
        new_parent = self.chroot.parent_dir(new)
        self._name_ok(new[-1])
        target = self.chroot.lstat(new)
        if target is not None and (not overwrite or stat.S_ISDIR(target.st_mode)):
            raise refuse("exists", "the target already exists", SFTP_FAILURE)
        if self._pending(new) is not None and not overwrite:
            raise refuse("exists", "the target already exists", SFTP_FAILURE)
        st = self.chroot.lstat(old)
        if st is not None:
            real_old = self.chroot.real(old)
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
                    os.unlink(self.chroot.real(new))
                    self.spool.release_staged(self.account.username, target.st_size)
                try:
                    made = self.inbox.entry(new, st.st_size, st.st_mtime)
                    self.inbox.publish(real_old, Prepared(made), staged=st.st_size)
                except FileNotFoundError:
                    return SFTP_NO_SUCH_FILE  # another session took it first
                except OSError as exc:
                    if exc.errno not in NO_SPACE:
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
            raise refuse(
                "rename_to_temp", "a completed upload cannot get a temp name", SFTP_FAILURE
            )
        if not self.spool.rename(entry, subdir_of(new), new[-1]):
            raise refuse("being_ingested", "the file is already being archived", SFTP_FAILURE)
        self.session.log.info("sftp.renamed_pending", old=vpath_of(old), new=vpath_of(new))
        return SFTP_OK

    def mkdir(self, path: str, attr: paramiko.SFTPAttributes) -> int:
        parts = resolve(path)
        if not parts:
            raise refuse("exists", "the inbox exists", SFTP_FAILURE)
        parent = self.chroot.parent_dir(parts)
        self._name_ok(parts[-1])
        try:
            os.mkdir(parent / parts[-1], 0o700)
        except FileExistsError:
            raise refuse("exists", "the folder already exists", SFTP_FAILURE) from None
        fsync_dir(parent)
        self.session.log.info("sftp.mkdir", path=vpath_of(parts))
        return SFTP_OK

    def rmdir(self, path: str) -> int:
        parts = resolve(path)
        if not parts:
            raise refuse("rmdir_root", "cannot remove the inbox", SFTP_FAILURE)
        st = self.chroot.lstat(parts)
        if st is None:
            return SFTP_NO_SUCH_FILE
        if not stat.S_ISDIR(st.st_mode):
            raise refuse("not_directory", "not a folder", SFTP_FAILURE)
        if self.spool.pending_under(self.account.username, "/".join(parts)):
            raise refuse("not_empty", "the folder holds files waiting to be archived", SFTP_FAILURE)
        try:
            os.rmdir(self.chroot.real(parts))
        except OSError:
            raise refuse("not_empty", "the folder is not empty", SFTP_FAILURE) from None
        self.session.log.info("sftp.rmdir", path=vpath_of(parts))
        return SFTP_OK

    def chattr(self, path: str, attr: paramiko.SFTPAttributes) -> int:
        self.check_setstat(attr)
        if attr._flags & attr.FLAG_SIZE:
            raise refuse("setstat_size", "truncating a closed file is not allowed")
        result = self.stat(path)
        return SFTP_OK if isinstance(result, paramiko.SFTPAttributes) else int(result)

    def symlink(self, target_path: str, path: str) -> int:
        raise refuse("symlink", "symbolic links are not allowed")

    def readlink(self, path: str) -> Any:
        raise refuse("symlink", "symbolic links are not allowed")


# Requests that put a file: a refusal of one of them is the refused arrival of that file.
ARRIVAL_OPS = frozenset({"open", "write", "close", "rename"})


def _file_refused(reason: str) -> bool:
    """Whether a refusal for ``reason`` says the file is not taken (its name, content,
    size, tenant, the spool), rather than a request about folders or handles."""
    return (
        reason in OPERATOR_REASONS
        or reason.startswith("tenant_")
        or reason in ("bad_filename", "symlink", "exists")
    )
