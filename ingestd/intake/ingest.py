"""The one ingestion pipeline. SFTP spool, hot folders and the CLI all call ``Intake.ingest``.

Order of operations (each step is what makes the next one safe):

1. refuse bad names and anything that is not one regular file (symlink, FIFO, device,
   hard link), opened with O_NOFOLLOW so a swapped-in symlink is never followed;
2. refuse empty, oversized and non-archivable files (type by magic bytes);
3. refuse a tenant that is not active (its files stay where they are), looked up before
   anything is copied unless the locked check of 5 last found it active (that one decides);
4. copy into the archive while hashing, fsync, 0440 (``archive.stage``);
5. ONE transaction, in two round trips (``Database.pipelined``): lock the tenant row
   (FOR SHARE), check it is still active and look for the same bytes recorded for this
   tenant (``intake_lock``) -> a duplicate: nothing new is linked, only its audit entry
   is written. Otherwise link the copy to its final WORM name and fsync the directory
   (``archive.commit``), then document row + analyze-document job row + tags + its
   ``document.archived`` audit entry in one statement sent with the COMMIT
   (``intake_record``, migration 0012). A suspend or delete-tenant waits for the lock,
   so no file is linked for a tenant that is being wiped;
6. only after COMMIT (and once the streaming standbys have it, ``database.standby_wait``)
   dispose of the source.

In the code each step is a method over typed values (ingestd/intake/record.py): 1-2
``_inspect`` (the file type), 3-4 ``_stage`` (the staged copy), the ``JobPlan``, 5
``_store`` (what the transaction left: ``Stored``), 6 ``_finish``. Whether a duplicate
is skipped or refused is one ``DuplicatePolicy``, asked at the three points a duplicate
can show (the locked look, the SQL function's ``ON CONFLICT``, after the commit).

Duplicates and refusals are audit entries as well, committed before the source is
dropped or quarantined.

A crash anywhere loses nothing: before 6 the source is still there and a re-run finds
either no row (and reuses the identical archived file) or the row (a duplicate, so it
only removes the source).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from datetime import UTC, datetime

from ingestd.archive import audit
from ingestd.archive.audit import AuditKind
from ingestd.archive.store import ArchivedFile, ArchiveStore, StagedFile, TooLarge
from ingestd.arrivals.record import Arrival, ArrivalOutcome
from ingestd.config.pathcheck import ProtectedPaths
from ingestd.config.settings import IntakeConfig
from ingestd.db.database import Batch, Database, Tx
from ingestd.errors import SourceProtected, TenantError, TenantNotActive, TenantNotFound
from ingestd.filenames.titles import FilenameInfo, TitleRules, parse_filename
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
from ingestd.intake.record import (
    DuplicatePolicy,
    IntakeRecord,
    JobPlan,
    Stored,
    arrival,
    duplicate_detail,
    iso,
)
from ingestd.intake.source_file import check_filename, open_regular, remove_source, unavailable
from ingestd.log import Logger, get_logger, new_trace_id
from ingestd.runtime import metrics
from ingestd.runtime.faults import crashpoint
from ingestd.states import TenantStatus
from ingestd.tenants import lookup


class Intake:
    """The ingestion pipeline; thread-safe (one pool; the one shared mutable state is the
    set of tenants last seen active, a hint whose updates are atomic under the GIL)."""

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
        self.allowed = filetypes.expand(config.allowed_types)
        self.duplicates = DuplicatePolicy.of(config.duplicates)
        self.log = get_logger()
        # Tenants the locked check of this process last found active. Their next file is
        # not looked up before staging: the locked check decides anyway, and a file of a
        # tenant suspended meanwhile is only staged and dropped once. The first refusal
        # takes the tenant out, so its waiting files are looked at, not copied, at every
        # retry.
        self._seen_active: set[str] = set()

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
        """The steps, top-down: inspect, stage, plan the job, record, finish."""
        check_filename(item.name, self.config.max_filename_bytes)
        if self.protected is not None:
            # Before anything is read or recorded: a file in the archive's own folders
            # (seen through a link or bind mount) is never taken, so never removed.
            self.protected.check(item.path, action="take", owned=item.owned)
        fd, st = open_regular(item.path, owned=item.owned)
        try:
            ftype = self._inspect(fd, st)
            staged = self._stage(item, fd, st)
        finally:
            os.close(fd)
        crashpoint("after_stage")
        log = log.bind(sha256=staged.sha256)
        name = parse_filename(item.name, self.rules)
        plan = JobPlan.for_file(item, ftype)
        stored = self._store(item, staged, ftype, name, plan, log)
        return self._finish(item, disposal, log, stored, ftype, name, plan)

    def _inspect(self, fd: int, st: os.stat_result) -> filetypes.FileType:
        """Step 1: the opened file is one we take (not empty, not over the limit, an
        archivable type by its magic bytes); its type."""
        if st.st_size == 0:
            raise Refused(Reason.empty, "file is empty")
        if st.st_size > self.config.max_file_size:
            raise Refused(
                Reason.too_large,
                f"file is {st.st_size} bytes, limit is {int(self.config.max_file_size)}",
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
        return ftype

    def _stage(self, item: IntakeItem, fd: int, st: os.stat_result) -> StagedFile:
        """Step 2: for an active tenant, the bytes copied (or, owned, linked) into the
        archive's staging area while hashed, fsynced; the same bytes as inspected."""
        if item.tenant not in self._seen_active:
            self._check_active(item.tenant)
        limit, now = int(self.config.max_file_size), datetime.now(UTC)
        try:
            if item.owned:
                staged = self.archive.adopt(item.tenant, item.path, fd, max_bytes=limit, when=now)
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
        return staged

    def _store(
        self,
        item: IntakeItem,
        staged: StagedFile,
        ftype: filetypes.FileType,
        name: FilenameInfo,
        plan: JobPlan,
        log: Logger,
    ) -> Stored:
        """Step 4: the one transaction, in two round trips (the lock with the duplicate
        check, then every row with the COMMIT: Database.pipelined). The staged copy is
        dropped on any failure before it was linked."""
        archived: ArchivedFile | None = None
        existing: int | None = None  # the document that already has these bytes
        try:
            with self.db.pipelined(replicated=True) as tx:
                tenant_id, existing = self._lock(tx, item, staged.sha256)
                if existing is not None:
                    # Same bytes already recorded for this tenant: nothing new is linked.
                    self.archive.discard(staged)
                    self.duplicates.found(existing)
                    tx.commit_with(
                        "audit_append",
                        audit.append_params(
                            tenant_id,
                            item.tenant,
                            AuditKind.duplicate,
                            existing,
                            duplicate_detail(item, staged.sha256),
                        ),
                        also=[arrival(item, tenant_id, staged.sha256, staged.size)],
                    )
                else:
                    # Linked to its WORM name only under the tenant's FOR SHARE lock:
                    # marking the tenant suspended or deleting waits for this transaction,
                    # so every file archived for a tenant is either recorded before
                    # delete-tenant looks, or never linked at all (no orphan behind it).
                    archived = self.archive.commit(staged, ftype.extension)
                    crashpoint("after_archive")
                    # Last chance to die uncommitted: the statement leaves with its COMMIT.
                    crashpoint("before_commit")
                    record = IntakeRecord(
                        tenant_id, item, archived, ftype, name, plan, self.duplicates
                    )
                    recorded = tx.commit_with(
                        "intake_record",
                        record.params(),
                        # Its arrival row: archived, or a duplicate if it lost the race.
                        also=[arrival(item, tenant_id, archived.sha256, archived.size)],
                    )
        except BaseException as exc:
            if archived is None and existing is None:  # never linked: the copy is ours to drop
                # Staging may have re-created the directories of a tenant being wiped.
                gone = isinstance(exc, TenantNotFound) or (
                    isinstance(exc, TenantNotActive) and exc.status == TenantStatus.deleting
                )
                self.archive.discard(staged, prune_dirs=gone)
            raise
        crashpoint("after_commit")
        if tx.standbys_behind:  # not in time (database.standby_wait): told, then dropped
            log.warning("intake.standby_behind", standbys=tx.standbys_behind)
        if existing is not None:
            return Stored(staged.sha256, existing)
        assert archived is not None
        done = recorded.row
        assert done is not None  # the function always returns its one row
        if done["document"] is None:
            # Lost a race with an identical file committed since the lock's look.
            lost_to = int(done["duplicate_of"]) if done["duplicate_of"] is not None else None
            self.duplicates.found(lost_to)
            return Stored(archived.sha256, lost_to)
        return Stored(archived.sha256, int(done["document"]), int(done["job"]), archived)

    def _lock(self, tx: Batch, item: IntakeItem, sha256: str) -> tuple[int, int | None]:
        """The tenant row locked FOR SHARE, still active (its id: a re-created tenant has
        a new one), and the document already holding these bytes, if any."""
        try:
            row = lookup.found(
                tx.one("intake_lock", {"name": item.tenant, "sha256": sha256}), item.tenant
            )
            tenant_id = lookup.active_id(row)
        except TenantError:
            self._seen_active.discard(item.tenant)
            raise
        self._seen_active.add(item.tenant)
        return tenant_id, (int(row["existing"]) if row["existing"] is not None else None)

    def _finish(
        self,
        item: IntakeItem,
        disposal: Disposal,
        log: Logger,
        stored: Stored,
        ftype: filetypes.FileType,
        name: FilenameInfo,
        plan: JobPlan,
    ) -> IntakeResult:
        """Step 5, after COMMIT: the source disposed of, the outcome logged and counted."""
        # The bytes are archived and recorded (committed), so the source is safe to drop.
        # This is also how a re-run after a crash finishes up.
        left = self._dispose(item, disposal, log)
        if stored.duplicate:
            log.info("intake.duplicate", document_id=stored.document_id)
            return IntakeResult(
                item,
                Outcome.duplicate,
                sha256=stored.sha256,
                document_id=stored.document_id,
                source_left=left,
            )
        archived = stored.archived
        assert archived is not None
        metrics.INTAKE_BYTES.labels(item.tenant, item.source_kind).inc(archived.size)
        log.info(
            "intake.ingested",
            document_id=stored.document_id,
            job_id=stored.job_id,
            size=archived.size,
            type=ftype.name,
            title=name.title,
            issued=iso(name.issued),
            derive_title=name.placeholder,
            job_kind=str(plan.kind),
            archive_path=archived.relpath,
            reused_archive_file=archived.reused,
        )
        return IntakeResult(
            item,
            Outcome.ingested,
            sha256=archived.sha256,
            document_id=stored.document_id,
            job_id=stored.job_id,
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

    def _record_refusal(self, item: IntakeItem, refusal: Refused) -> None:
        detail = {
            "reason": str(refusal.reason),
            "detail": refusal.detail,
            "filename": item.name,
            "source": item.source,
        }
        with self.db.transaction() as tx:
            self._record(tx, item.tenant, AuditKind.refused, None, detail)
            # Its arrival row, in the same transaction (a source may turn it into
            # "quarantined" once the file is moved).
            arrival = Arrival(
                trace_id=item.trace or new_trace_id(),
                tenant=item.tenant,
                source=item.source,
                name=item.name,
                outcome=ArrivalOutcome.refused,
                subdir=item.subdir,
                arrived_at=item.arrived,
                reason=str(refusal.reason),
                detail=refusal.detail,
            )
            tx.one("arrival_note", arrival.params())

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

    def _check_active(self, tenant: str) -> None:
        """A look before staging, so a suspended tenant's files are not copied at every
        retry; one round trip outside any transaction: the check that decides is the
        locked one in the intake transaction."""
        lookup.active_id(lookup.found(self.db.one("tenant_by_name", {"name": tenant}), tenant))
