"""What a closed upload becomes in the account's inbox: a queue entry (a final name) or a
temp-named file the client renames later (``scan.pdf.part``).

``Inbox.close_upload`` is the whole of an upload's CLOSE after its content check, in one
call: the queue entry into the file's attribute, the fsync, then the hand-over to the
spool. The same ``publish`` completes a temp-named upload renamed to its final name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ingestd.config.settings import SftpAccountConfig
from ingestd.durable import fsync_dir
from ingestd.runtime import metrics
from ingestd.sources.handoff import subfolder_tags
from ingestd.sources.sftp.paths import Chroot, vpath_of
from ingestd.sources.sftp.refusals import SftpRefusal, storage_refusal
from ingestd.sources.sftp.session import Session
from ingestd.sources.sftp.spool_entry import Entry, label


def subdir_of(parts: tuple[str, ...]) -> str:
    """The folder (``a/b``, ``""`` for the top) of the inbox path ``parts``."""
    return "/".join(parts[:-1])


@dataclass(frozen=True)
class Prepared:
    """A final-named upload's queue entry, made at CLOSE; ``labelled``: already written
    into the upload's file (before its fsync)."""

    entry: Entry
    labelled: bool = False


class Inbox:
    """One session's inbox as uploads land in it (the paths already checked by the caller)."""

    def __init__(self, session: Session, chroot: Chroot) -> None:
        self.session = session
        self.account: SftpAccountConfig = session.account
        self.spool = session.spool
        self.chroot = chroot

    def close_upload(
        self, fd: int, partial: Path, parts: tuple[str, ...], size: int, mtime: float, reserved: int
    ) -> None:
        """CLOSE of the upload written to ``partial`` through ``fd`` (which reserved
        ``reserved`` bytes of the quota), its content already checked: durable and
        published on return. Takes ``fd``: closed on return, whatever happens. A failure
        is an SftpRefusal; ``partial`` is then the caller's to discard."""
        try:
            try:
                # A final-named upload's queue entry goes into the file before the fsync:
                # that fsync then makes both durable (spool_entry.write_entry).
                prepared = self._prepare(fd, parts, size, mtime)
                os.fsync(fd)
            except OSError as exc:
                raise storage_refusal(exc, "fsync_error") from None
        finally:
            os.close(fd)
        try:
            self._complete(partial, parts, size, mtime, reserved, prepared)
        except SftpRefusal:
            raise
        except OSError as exc:
            raise storage_refusal(exc, "store_error") from None

    def _prepare(self, fd: int, parts: tuple[str, ...], size: int, mtime: float) -> Prepared | None:
        """Before CLOSE's fsync: the queue entry of a final-named upload, written into the
        file when the filesystem keeps it there. None for a temp name (no entry yet)."""
        if self.spool.is_temp_name(parts[-1]):
            return None
        entry = self.entry(parts, size, mtime)
        return Prepared(entry, labelled=label(fd, entry))

    def _complete(
        self,
        partial: Path,
        parts: tuple[str, ...],
        size: int,
        mtime: float,
        reserved: int,
        prepared: Prepared | None,
    ) -> None:
        """The upload under ``partial`` is CLOSEd and fsynced: publish it."""
        name = parts[-1]
        vpath = vpath_of(parts)
        if prepared is None:
            # Stays visible under its temp name until the client renames it.
            parent = self.chroot.parent_dir(parts)
            target = parent / name
            old = self.chroot.lstat(parts)
            os.replace(partial, target)
            fsync_dir(parent)
            self.spool.stage(self.account.username, reserved, size)
            if old is not None:
                self.spool.release_staged(self.account.username, old.st_size)
            self.session.log.info("sftp.upload_staged", path=vpath, size=size)
        else:
            self.publish(partial, prepared, reserved=reserved, labelled=prepared.labelled)
        self.session.remember(vpath, size, mtime)

    def entry(self, parts: tuple[str, ...], size: int, mtime: float) -> Entry:
        """A new queue entry for the file ``parts`` of this account."""
        acct = self.account
        subdir = subdir_of(parts)
        return self.spool.make_entry(
            account=acct.username,
            tenant=acct.tenant,
            filename=parts[-1],
            subdir=subdir,
            size=size,
            mtime=mtime,
            remote_ip=self.session.remote_ip,
            tags=list(
                subfolder_tags(
                    acct.tags,
                    subdir,
                    enabled=acct.subfolder_tags,
                    date_folders=acct.date_folder_tags,
                )
            ),
        )

    def publish(
        self,
        src: Path,
        prepared: Prepared,
        *,
        reserved: int = 0,
        staged: int = 0,
        labelled: bool = False,
    ) -> None:
        """Hand the fsynced ``src`` to the spool's queue under ``prepared.entry``."""
        entry = prepared.entry
        acct = self.account
        self.spool.enqueue(src, entry, reserved=reserved, staged=staged, labelled=labelled)
        self.session.uploads += 1
        self.session.upload_bytes += entry.size
        metrics.SFTP_UPLOADS.labels(acct.tenant).inc()
        metrics.SFTP_UPLOAD_BYTES.labels(acct.tenant).inc(entry.size)
        # The spool id is the upload's correlation id (trace): intake and its jobs carry it.
        path = "/".join((entry.subdir, entry.filename)) if entry.subdir else entry.filename
        self.session.log.info(
            "sftp.upload_complete",
            path=vpath_of(tuple(path.split("/"))),
            size=entry.size,
            spool_id=entry.id,
            trace=entry.id,
        )
