"""What one intake writes, as values: the duplicate policy at the three points where a
duplicate shows, the job it plans, the document's record, and its arrival row.

Nothing here talks to the database or the disk; ingest.py sends these in its one
transaction. Keeping them as frozen values is what lets the pipeline read as steps: each
step hands the next a typed result instead of a dict that grows on the way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from ingestd.archive import audit
from ingestd.archive.store import ArchivedFile
from ingestd.arrivals.record import Arrival, ArrivalOutcome
from ingestd.db.database import jsonb
from ingestd.filenames.titles import FilenameInfo
from ingestd.intake import filetypes
from ingestd.intake.items import IntakeItem, Reason, Refused
from ingestd.intake.tags import tag_names
from ingestd.jobkinds import JobKind
from ingestd.log import new_trace_id
from ingestd.queue.enqueue import job_body
from ingestd.textsafe import recordable_text


@dataclass(frozen=True, slots=True)
class DuplicatePolicy:
    """``intake.duplicates`` (skip or refuse), applied where a duplicate can show:

    1. under the tenant's lock, the same bytes already recorded (``intake_lock``);
    2. in SQL, an identical file committed between that look and the insert (the
       ``ON CONFLICT`` of ``intake_record``): recorded as a duplicate (skip) or not at
       all (refuse: the refusal is recorded after the commit);
    3. after the commit, when the row says the race was lost.

    Points 1 and 3 call ``found``; point 2 gets ``sql_detail``. They are one policy: a
    change here reaches all three.
    """

    refuse: bool

    @classmethod
    def of(cls, setting: str) -> DuplicatePolicy:
        return cls(refuse=setting == "refuse")

    def found(self, existing: int | None) -> None:
        """A duplicate of ``existing`` was found: refused, or (skip) nothing to do."""
        if self.refuse:
            raise Refused(Reason.duplicate, f"same content as document {existing}")

    def sql_detail(self, item: IntakeItem, sha256: str) -> Any:
        """What ``intake_record`` records if it loses the race: the duplicate's audit
        detail, or None (refuse: nothing in SQL, the refusal is recorded after)."""
        return None if self.refuse else jsonb(audit.recordable(duplicate_detail(item, sha256)))


def duplicate_detail(item: IntakeItem, sha256: str) -> dict[str, object]:
    """The detail of a ``document.duplicate`` entry."""
    return {"sha256": sha256, "filename": item.name, "source": item.source}


@dataclass(frozen=True, slots=True)
class JobPlan:
    """The job a new document gets, decided before the transaction and frozen into its
    payload: a batch is split (with its source's policy of the moment it arrived, so a
    retry or a reload cannot change the cut), anything else analysed."""

    kind: JobKind
    payload: dict[str, object]

    @classmethod
    def for_file(cls, item: IntakeItem, ftype: filetypes.FileType) -> JobPlan:
        if item.split is not None and ftype in filetypes.BATCH_TYPES:
            return cls(JobKind.split_batch, {"policy": item.split.as_payload()})
        return cls(JobKind.analyze_document, {"force": False})

    def body(self, trace: str | None) -> dict[str, Any]:
        return job_body(self.kind, self.payload, trace)  # document_id: added in SQL


@dataclass(frozen=True, slots=True)
class IntakeRecord:
    """The parameters of ``intake_record``: the document row, its job, its tags, its
    ``document.archived`` entry and (if it loses the race) its duplicate entry."""

    tenant_id: int
    item: IntakeItem
    archived: ArchivedFile
    ftype: filetypes.FileType
    name: FilenameInfo
    plan: JobPlan
    duplicates: DuplicatePolicy

    def params(self) -> dict[str, object]:
        item, archived = self.item, self.archived
        return {
            "tenant_id": self.tenant_id,
            "tenant": audit.recordable(item.tenant),
            "sha256": archived.sha256,
            "size_bytes": archived.size,
            "mime_type": self.ftype.mime,
            "extension": self.ftype.extension,
            "original_filename": item.name,
            "source": item.source,
            "source_subdir": recordable_text(item.subdir),
            "archive_path": archived.relpath,
            "title": self.name.title,
            "issued_date": self.name.issued,
            # What the analysis needs to date the document, frozen here (migration 0024).
            "date_policy": self.item.date_source,
            "name_date": self.name.issued,
            "trace_id": item.trace,
            "job_kind": str(self.plan.kind),
            "job_payload": jsonb(self.plan.body(item.trace)),
            "derive_title": self.name.placeholder,
            "tags": tag_names(item.tags),
            # The document.archived detail; the job's id is added in SQL.
            "archived": jsonb(
                audit.recordable(
                    {
                        "sha256": archived.sha256,
                        "size": archived.size,
                        "path": archived.relpath,
                        "type": self.ftype.name,
                        "filename": item.name,
                        "source": item.source,
                    }
                )
            ),
            "duplicate": self.duplicates.sql_detail(item, archived.sha256),
        }


@dataclass(frozen=True, slots=True)
class Stored:
    """What the intake transaction left: a new document (with its job and the WORM file
    this intake linked), or a duplicate of ``document_id`` (None if a lost race could
    not name it)."""

    sha256: str
    document_id: int | None
    job_id: int | None = None  # None: a duplicate
    archived: ArchivedFile | None = None

    @property
    def duplicate(self) -> bool:
        return self.job_id is None


def arrival(
    item: IntakeItem, tenant_id: int, sha256: str, size: int
) -> tuple[str, dict[str, object]]:
    """The ``arrival_intake`` statement of ``item``, queued with the intake's COMMIT:
    archived, or a duplicate (decided in SQL)."""
    params = Arrival(
        trace_id=item.trace or new_trace_id(),
        tenant=item.tenant,
        source=item.source,
        name=item.name,
        outcome=ArrivalOutcome.archived,  # or duplicate: decided in SQL
        subdir=item.subdir,
        size=size,
        sha256=sha256,
        arrived_at=item.arrived,
    ).params()
    return "arrival_intake", {**params, "tenant_id": tenant_id}


def iso(d: date | None) -> str | None:
    return d.isoformat() if d else None
