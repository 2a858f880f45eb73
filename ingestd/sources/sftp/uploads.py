"""One open write handle: an upload's bytes, its quota and its content check, until CLOSE.

Uploads go to a private partial file per handle; CLOSE hands it, in one call, to the
session's inbox (``UploadInbox.close_upload``, inbox.py), which fsyncs it and gives it
to the spool. Content intake would refuse (by its first bytes: ``filetypes``) fails the
upload itself, with the reason in the status message, so the scanner shows the error
instead of a success nobody sees undone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Protocol

import paramiko
from paramiko.sftp import SFTP_FAILURE, SFTP_OK, SFTP_PERMISSION_DENIED

from ingestd.config.settings import SftpAccountConfig
from ingestd.intake import filetypes
from ingestd.sources.sftp.listing import attrs
from ingestd.sources.sftp.paths import vpath_of
from ingestd.sources.sftp.refusals import (
    SftpRefusal,
    content_refusal,
    read_header,
    refuse,
    storage_refusal,
)
from ingestd.sources.sftp.session import Session
from ingestd.sources.sftp.spool import SpoolView
from ingestd.sources.sftp.spool_ledger import QuotaExceeded


class UploadInbox(Protocol):
    """What an upload handle uses of the session's inbox (``InboxSFTP``): who uploads,
    where the quota is kept, how a refusal is logged, and the one call of its CLOSE."""

    session: Session
    account: SftpAccountConfig
    spool: SpoolView

    def refused(self, op: str, parts: tuple[str, ...] | str, exc: SftpRefusal) -> None: ...

    def check_setstat(self, attr: paramiko.SFTPAttributes) -> None: ...

    def close_upload(
        self, fd: int, partial: Path, parts: tuple[str, ...], size: int, mtime: float, reserved: int
    ) -> None: ...


def uncovered(gaps: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
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


class UploadHandle(paramiko.SFTPHandle):
    """One open write handle: bytes go to a private partial file, no fsync until CLOSE.

    A final-named upload's content is checked as soon as its first ``HEADER_BYTES`` are
    in (writes may come in any order: clients pipeline them), and again at CLOSE from the
    file itself. A refusal is final: it is logged once, the bytes and the quota go at
    once, and every later WRITE and the CLOSE answer with the same reason. Temp-named
    uploads (``x.pdf.part``) are checked when they are renamed to their final name.
    """

    def __init__(self, vfs: UploadInbox, parts: tuple[str, ...], flags: int) -> None:
        super().__init__(flags)
        self.vfs = vfs
        self.session = vfs.session
        self.parts = parts
        self.partial, self.fd = vfs.spool.new_partial(vfs.account.username)
        self.size = 0  # bytes reserved against the quota
        self._ended = False  # the spool was told this upload is over (upload_ended)
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
            raise refuse(
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
            raise refuse("quota_exceeded", f"{message}{exc.limit}", SFTP_FAILURE) from None
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
        self._header_gaps = uncovered(self._header_gaps, offset, end)
        magic = filetypes.MAGIC_BYTES
        if self._header_gaps and self._header_gaps[0][0] < magic:
            return  # not all there yet, or the file is shorter: CLOSE decides
        if offset == 0 and len(data) >= filetypes.HEADER_BYTES:
            header = data[: filetypes.HEADER_BYTES]  # the usual case: one write has it all
        else:
            header = read_header(self.partial)
        if self._header_gaps and filetypes.needs_whole_header(header[:magic]):
            return  # XML: its root element may come later in the header
        self._header_gaps = []  # decided: no second look before CLOSE
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
        return attrs(os.fstat(self.fd), self.parts[-1])

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
        except SftpRefusal as exc:
            self._fail("close", exc)
            return exc.code
        except OSError as exc:
            self._fail("close", storage_refusal(exc, "fsync_error"))
            return SFTP_FAILURE
        fd, self.fd = self.fd, -1  # close_upload closes it, whatever happens
        try:
            # One call: entry, fsync and hand-over to the spool (Inbox.close_upload).
            self.vfs.close_upload(fd, self.partial, self.parts, st.st_size, st.st_mtime, self.size)
        except SftpRefusal as exc:
            self._fail("close", exc)
            return exc.code
        self.size = 0  # the spool holds these bytes now, as a queue entry or a temp file
        self._end()
        return SFTP_OK

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self.vfs.spool.upload_ended(self.vfs.account.username)

    def _discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.partial)
        self.vfs.spool.release(self.vfs.account.username, self.size)
        self.size = 0
        self._end()

    def abort(self) -> None:
        """The connection dropped (or the upload failed) before a good CLOSE: no document."""
        self.closed = True
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._discard()
