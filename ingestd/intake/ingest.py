"""The one ingestion pipeline. SFTP spool, hot folders and the CLI all call ``Intake.ingest``.

Order of operations (each step is what makes the next one safe):

1. refuse bad names and anything that is not one regular file (symlink, FIFO, device,
   hard link), opened with O_NOFOLLOW so a swapped-in symlink is never followed;
2. refuse empty, oversized and non-archivable files (type by magic bytes);
3. refuse a tenant that is not active (its files stay where they are);
4. copy into the archive while hashing, fsync, 0440 (``archive.stage``);
5. same bytes already recorded for this tenant -> duplicate, nothing new is written;
6. ONE transaction: lock the tenant row (FOR SHARE) and check it is still active; link
   the copy to its final WORM name and fsync the directory (``archive.commit``); document
   row + analyze-document job row + its ``document.archived`` audit entry. A suspend or
   delete-tenant waits for it, so no file is linked for a tenant that is being wiped;
7. only after COMMIT dispose of the source.

Duplicates and refusals are audit entries as well, committed before the source is
dropped or quarantined.

A crash anywhere loses nothing: before 7 the source is still there and a re-run finds
either no row (and reuses the identical archived file) or the row (a duplicate, so it
only removes the source).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from datetime import UTC, date, datetime

from ingestd.archive import audit
from ingestd.archive.audit import AuditKind
from ingestd.archive.store import ArchivedFile, ArchiveStore, TooLarge
from ingestd.config.pathcheck import ProtectedPaths
from ingestd.config.settings import IntakeConfig
from ingestd.db.database import Database, Tx
from ingestd.errors import SourceProtected, TenantNotActive, TenantNotFound
from ingestd.intake import filetypes
from ingestd.intake.fsops import why_not_removable
from ingestd.intake.items import (
    Disposal,
    FileChanged,
    IntakeItem,
    IntakeResult,
    Outcome,
    Reason,
    Refused,
)
from ingestd.intake.source_file import check_filename, open_regular, remove_source, unavailable
from ingestd.intake.tags import link_tags
from ingestd.intake.titles import TitleRules, parse_filename
from ingestd.log import Logger, get_logger, new_trace_id
from ingestd.ops import metrics
from ingestd.ops.faults import crashpoint
from ingestd.queue.enqueue import enqueue
from ingestd.queue.kinds import JobKind
from ingestd.states import TenantStatus
from ingestd.tenants import lookup


class Intake:
    """The ingestion pipeline; thread-safe (one pool, no shared mutable state)."""

    def __init__(
        self,
        config: IntakeConfig,
        db: Database,
        archive: ArchiveStore,
        *,
        title_rules: TitleRules | None = None,
        protected: ProtectedPaths | None = None,
    ) -> None:
        self.config = config
        self.db = db
        self.archive = archive
        self.rules = title_rules or TitleRules()
        # Folders no source is ever removed from (archive, derived, state directory);
        # None: only what the config check at load ensured.
        self.protected = protected
        self.allowed = {filetypes.ARCHIVABLE[t] for t in config.allowed_types}
        self.log = get_logger()

    def ingest(self, item: IntakeItem, *, disposal: Disposal = Disposal.delete) -> IntakeResult:
        """Ingest one file. Returns ingested/duplicate/refused; raises transient errors.

        Raises ``DatabaseUnavailable``, ``TenantNotActive``, ``TenantNotFound``,
        ``FileChanged``, ``ArchiveError`` and ``FileNotFoundError``: in each case the
        source is untouched and the caller decides when to try again.
        """
        # Every intake line carries the same six keys, null until known, so one jq filter
        # or journald match works on all of them.
        if item.trace is None:
            item = dataclasses.replace(item, trace=new_trace_id())
        log = self.log.bind(
            tenant=item.tenant,
            source=item.source,
            filename=item.name,
            trace=item.trace,
            sha256=None,
            document_id=None,
            job_id=None,
        )
        try:
            result = self._ingest(item, disposal, log)
        except Refused as refusal:
            # Recorded before the caller quarantines or leaves the file: a refusal is an
            # archive event too. With the database down this raises, and the file waits
            # where it is like any other (it is refused again once the trail can say so).
            self._record_refusal(item, refusal)
            result = IntakeResult(
                item, Outcome.refused, reason=refusal.reason, detail=refusal.detail
            )
            metrics.INTAKE_REFUSED.labels(item.tenant, item.source_kind, refusal.reason).inc()
            log.warning("intake.refused", reason=str(refusal.reason), detail=refusal.detail)
        metrics.INTAKE_FILES.labels(item.tenant, item.source_kind, result.outcome).inc()
        return result

    def _ingest(self, item: IntakeItem, disposal: Disposal, log: Logger) -> IntakeResult:
        cfg = self.config
        check_filename(item.name, cfg.max_filename_bytes)
        if self.protected is not None:
            # Before anything is read or recorded: a file in the archive's own folders
            # (seen through a link or bind mount) is never taken, so never removed.
            self.protected.check(item.path, action="take", owned=item.owned)
        fd, st = open_regular(item.path, owned=item.owned)
        try:
            if st.st_size == 0:
                raise Refused(Reason.empty, "file is empty")
            if st.st_size > cfg.max_file_size:
                raise Refused(
                    Reason.too_large,
                    f"file is {st.st_size} bytes, limit is {int(cfg.max_file_size)}",
                )
            try:
                header = os.pread(fd, filetypes.HEADER_BYTES, 0)
            except OSError as exc:
                raise unavailable("read the file", exc) from exc
            ftype = filetypes.detect(header)
            if ftype is None or ftype not in self.allowed:
                allowed = ", ".join(sorted(t.name for t in self.allowed))
                raise Refused(
                    Reason.bad_type,
                    f"content is {filetypes.describe(header)}; allowed types: {allowed}",
                )
            tenant_id = self._active_tenant_id(item.tenant)
            limit, now = int(cfg.max_file_size), datetime.now(UTC)
            try:
                if item.owned:
                    staged = self.archive.adopt(
                        item.tenant, item.path, fd, max_bytes=limit, when=now
                    )
                else:
                    staged = self.archive.stage(item.tenant, fd, max_bytes=limit, when=now)
            except TooLarge as exc:
                raise Refused(Reason.too_large, str(exc)) from exc
            after = os.fstat(fd)
            if (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns) or (
                staged.size != st.st_size
            ):
                self.archive.discard(staged)
                raise FileChanged(f"{item.path} changed while it was being read")
        finally:
            os.close(fd)
        crashpoint("after_stage")
        log = log.bind(sha256=staged.sha256)

        try:
            with self.db.transaction() as tx:
                existing = tx.one(
                    "document_by_sha256", {"tenant_id": tenant_id, "sha256": staged.sha256}
                )
        except BaseException:
            self.archive.discard(staged)  # Postgres is down: the source stays for a retry
            raise
        if existing is not None:
            self.archive.discard(staged)
            return self._duplicate(item, disposal, log, staged.sha256, int(existing["id"]))

        info = parse_filename(item.name, self.rules)
        archived: ArchivedFile | None = None
        try:
            with self.db.transaction() as tx:
                row = lookup.by_name(tx, item.tenant, query="tenant_lock_for_intake")
                tenant_id = lookup.active_id(row)  # the locked row (a re-created tenant: new id)
                # Linked to its WORM name only under the tenant's FOR SHARE lock: marking
                # the tenant suspended or deleting waits for this transaction, so every file
                # archived for a tenant is either recorded before delete-tenant looks, or
                # never linked at all (no orphan behind the wipe).
                archived = self.archive.commit(staged, ftype.extension)
                crashpoint("after_archive")
                doc = tx.one(
                    "document_insert",
                    {
                        "tenant_id": tenant_id,
                        "sha256": archived.sha256,
                        "size_bytes": archived.size,
                        "mime_type": ftype.mime,
                        "extension": ftype.extension,
                        "original_filename": item.name,
                        "source": item.source,
                        "source_subdir": item.subdir,
                        "archive_path": archived.relpath,
                        "title": info.title,
                        "issued_date": info.issued,
                        "trace_id": item.trace,
                    },
                )
                if doc is None:
                    # Lost a race with an identical file; it is recorded: a duplicate.
                    dup = tx.one(
                        "document_by_sha256", {"tenant_id": tenant_id, "sha256": archived.sha256}
                    )
                    dup_id = int(dup["id"]) if dup else None
                    return self._duplicate(item, disposal, log, archived.sha256, dup_id, tx)
                if item.split is not None and ftype in filetypes.BATCH_TYPES:
                    # A batch is analysed only through its children: its one job splits
                    # it (tenant-fair, under the job's limits), with the policy of the
                    # moment it arrived, so a retry or a reload cannot change the cut.
                    kind = JobKind.split_batch
                    payload = {"document_id": doc["id"], "policy": item.split.as_payload()}
                else:
                    kind = JobKind.analyze_document
                    payload = {"document_id": doc["id"], "force": False}
                job_id = enqueue(
                    tx,
                    tenant_id=tenant_id,
                    document_id=int(doc["id"]),
                    kind=kind,
                    derive_title=info.placeholder,
                    payload=payload,
                    trace=item.trace,
                )
                link_tags(tx, tenant_id, int(doc["id"]), item.tags, "intake")
                audit.append(
                    tx,
                    chain=tenant_id,
                    tenant=item.tenant,
                    kind=AuditKind.archived,
                    document_id=int(doc["id"]),
                    detail={
                        "sha256": archived.sha256,
                        "size": archived.size,
                        "path": archived.relpath,
                        "type": ftype.name,
                        "filename": item.name,
                        "source": item.source,
                        "job": job_id,
                    },
                )
                crashpoint("before_commit")
        except BaseException as exc:
            if archived is None:  # never linked: the staged copy is ours to drop
                # Staging may have re-created the directories of a tenant being wiped.
                gone = isinstance(exc, TenantNotFound) or (
                    isinstance(exc, TenantNotActive) and exc.status == TenantStatus.deleting
                )
                self.archive.discard(staged, prune_dirs=gone)
            raise
        crashpoint("after_commit")

        left = self._dispose(item, disposal, log)
        document_id = int(doc["id"])
        metrics.INTAKE_BYTES.labels(item.tenant, item.source_kind).inc(archived.size)
        log.info(
            "intake.ingested",
            document_id=document_id,
            job_id=job_id,
            size=archived.size,
            type=ftype.name,
            title=info.title,
            issued=_iso(info.issued),
            derive_title=info.placeholder,
            job_kind=str(kind),
            archive_path=archived.relpath,
            reused_archive_file=archived.reused,
        )
        return IntakeResult(
            item,
            Outcome.ingested,
            sha256=archived.sha256,
            document_id=document_id,
            job_id=job_id,
            archive_path=archived.relpath,
            source_left=left,
        )

    def _dispose(self, item: IntakeItem, disposal: Disposal, log: Logger) -> str | None:
        """After COMMIT: remove the source. A failure does not undo the intake (it is
        recorded, the file is safe in the archive); it is returned, never raised, so the
        caller retries only the removal instead of taking the file again."""
        if disposal is not Disposal.delete:
            return None
        try:
            remove_source(item.path, self.protected, owned=item.owned)
        except SourceProtected as exc:
            return exc.message
        except OSError as exc:
            reason = why_not_removable(item.path, exc)
            log.warning("intake.source_not_removed", detail=reason)
            return reason
        return None

    def _duplicate(
        self,
        item: IntakeItem,
        disposal: Disposal,
        log: Logger,
        sha256: str,
        document_id: int | None,
        tx: Tx | None = None,
    ) -> IntakeResult:
        if self.config.duplicates == "refuse":
            raise Refused(Reason.duplicate, f"same content as document {document_id}")
        detail = {"sha256": sha256, "filename": item.name, "source": item.source}
        if tx is not None:  # inside the intake transaction that lost the race
            self._record(tx, item.tenant, AuditKind.duplicate, document_id, detail)
        else:
            with self.db.transaction() as own:
                self._record(own, item.tenant, AuditKind.duplicate, document_id, detail)
        # The bytes are archived and recorded (committed) under that document, so the
        # source is safe to drop. This is also how a re-run after a crash finishes up.
        left = self._dispose(item, disposal, log)
        log.info("intake.duplicate", document_id=document_id)
        return IntakeResult(
            item, Outcome.duplicate, sha256=sha256, document_id=document_id, source_left=left
        )

    def _record_refusal(self, item: IntakeItem, refusal: Refused) -> None:
        detail = {
            "reason": str(refusal.reason),
            "detail": refusal.detail,
            "filename": item.name,
            "source": item.source,
        }
        with self.db.transaction() as tx:
            self._record(tx, item.tenant, AuditKind.refused, None, detail)

    @staticmethod
    def _record(
        tx: Tx, tenant: str, kind: AuditKind, document_id: int | None, detail: Mapping[str, object]
    ) -> None:
        audit.append(
            tx,
            chain=audit.chain_of(tx, tenant),
            tenant=tenant,
            kind=kind,
            document_id=document_id,
            detail=detail,
        )

    def _active_tenant_id(self, tenant: str) -> int:
        with self.db.transaction() as tx:
            row = lookup.by_name(tx, tenant)
        return lookup.active_id(row)


def _iso(d: date | None) -> str | None:
    return d.isoformat() if d else None
