"""paramiko's SFTP subsystem, fixed for an upload server (see ``IngestSFTPServer``)."""

from __future__ import annotations

import contextlib
import errno
import struct
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

from ingestd.sources.sftp.paths import vpath_of
from ingestd.sources.sftp.refusals import NO_SPACE, SftpRefusal, refuse, storage_refusal
from ingestd.sources.sftp.uploads import UploadHandle
from ingestd.sources.sftp.vfs import InboxSFTP
from ingestd.textsafe import escaped

_HANDLE_COMMANDS = {CMD_CLOSE, CMD_READ, CMD_WRITE, CMD_FSTAT, CMD_FSETSTAT, CMD_READDIR}

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
                    raise refuse("hardlink", "hard links are not allowed")
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
            bad = refuse("bad_encoding", "path is not valid UTF-8", SFTP_FAILURE)
            self._refused(t, msg, start, bad)
            self._send_status(request_number, bad.code, bad.message)
        except OSError as exc:
            # The filesystem said no (disk full, name too long, permissions): one status
            # and one log line, never a traceback into paramiko's generic handler.
            code = _ERRNO_STATUS.get(exc.errno or 0, SFTP_FAILURE)
            err = refuse(
                f"os_{errno.errorcode.get(exc.errno or 0, 'error')}", exc.strerror or str(exc), code
            )
            if exc.errno in NO_SPACE:
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
                # Escaped by the one rule for untrusted text (ingestd/textsafe.py).
                path = " -> ".join(escaped(f.decode("utf-8", "surrogateescape")) for f in fields)
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
