"""One document analysed again (seed 004's re-analyze): a new analyze-document job, for the
CLI's `documents analyze` and the console's "re-queue" alike. A split batch is analysed
only through its children (its pages are theirs): it gets no job."""

from __future__ import annotations

from dataclasses import dataclass

from ingestd.db.database import Tx
from ingestd.jobkinds import JobKind
from ingestd.queue.enqueue import enqueue


@dataclass(frozen=True, slots=True)
class Reanalysis:
    """What became of one request: a job queued, no such document, or a split batch."""

    document_id: int
    job_id: int | None = None  # queued
    missing: bool = False  # no such document of the tenant
    parts: int = 0  # a batch split into this many documents: no job


def reanalyze(
    tx: Tx, tenant_id: int, document_id: int, *, force: bool = False, redeliver: bool = False
) -> Reanalysis:
    """Queue one analyze-document job for the tenant's document (not for a split batch).
    A re-analysis sends no workflow webhook unless ``redeliver``."""
    row = tx.one("job_document", {"id": document_id, "tenant_id": tenant_id})
    if row is None:
        return Reanalysis(document_id, missing=True)
    state = tx.one("split_state", {"id": document_id, "tenant_id": tenant_id})
    if state is not None and state["parts"]:
        return Reanalysis(document_id, parts=int(state["parts"]))
    job_id = enqueue(
        tx,
        tenant_id=tenant_id,
        document_id=document_id,
        kind=JobKind.analyze_document,
        trace=row["trace_id"],
        payload={
            "document_id": document_id,
            "force": force,
            "reanalysis": True,
            "redeliver": redeliver,
        },
    )
    return Reanalysis(document_id, job_id=job_id)
