"""purge-document (seed 004): remove a trashed document, its derived data and its rows.

The WORM original is the one thing that may not go early: it is removed only when the
retention of its class has ended (``[retention]``: whole calendar years after the year
of ingest, default 10) and no legal hold is on it, and when no other document references
the same archived file. Within retention the job fails
at once naming the date, and nothing at all is deleted (not even derived data: a purge
is all or nothing). A document that is not in the trash is refused the same way.

Files go first (in the child: the original, then derived data), rows last (in the
worker's done transaction): a crash in between leaves the rows, the retry finds the files
already gone and finishes. A store that refuses to let the original go (an unexpired S3
Object Lock) fails the job at once with the date, nothing deleted.
"""

from __future__ import annotations

import datetime
from typing import Any

from ingestd.archive import audit, retention
from ingestd.archive.audit import AuditKind
from ingestd.archive.backends import make_archive
from ingestd.archive.store import remove_tree
from ingestd.db.database import Tx
from ingestd.errors import ArchiveLocked
from ingestd.jobkinds import JobKind
from ingestd.queue.claims import Job
from worker.jobs import JobContext, PermanentError, register
from worker.jobs.analysis_input import derived_dir


def apply_purge(tx: Tx, job: Job, data: dict[str, Any]) -> None:
    tx.run("document_purge", {"id": data["document_id"], "tenant_id": job.tenant_id})
    audit.append(
        tx,
        chain=job.tenant_id,
        tenant=job.tenant,
        kind=AuditKind.purged,
        document_id=data["document_id"],
        detail={
            "sha256": data["sha256"],
            "path": data["path"],
            "original": data["original"],
            "retention_until": data["retention_until"],
            "job": job.id,
        },
    )


@register(JobKind.purge_document, apply=apply_purge)
def purge_document(ctx: JobContext) -> None:
    job, cfg = ctx.job, ctx.config
    doc_id = job.document_id or job.payload.get("document_id")
    policy = retention.policy_for(cfg.retention, job.tenant)
    with ctx.db.transaction() as tx:
        doc = tx.one("document_for_purge", {"id": doc_id, "tenant_id": job.tenant_id})
        kept = None
        if doc is not None:
            retention.record_policy(tx, job.tenant_id, job.tenant, policy)
            kept = retention.document_retention(tx, job.tenant_id, int(doc["id"]), policy)
    if doc is None or kept is None:
        raise PermanentError(f"document {doc_id} of tenant {job.tenant} does not exist")
    if doc["trashed_at"] is None:
        raise PermanentError(
            f"document {doc_id} is not in the trash; `ingestd document "
            "trash` it first; nothing was deleted"
        )
    if kept["held"]:
        raise PermanentError(
            f"document {doc_id} is under a legal hold (`ingestd hold list --tenant "
            f"{job.tenant}`); nothing was deleted"
        )
    until = kept["retain_until"]
    if until is not None and datetime.datetime.now(datetime.UTC).date() <= until:
        ingested = doc["created_at"].date().isoformat()
        raise PermanentError(
            f"document {doc_id} is under retention until {until.isoformat()} "
            f"({kept['years']} years after the year of its ingest on {ingested}); "
            "nothing was deleted"
        )
    # The original first: a store that still keeps it (an Object Lock set longer than
    # this class) refuses before anything is gone, so the purge stays all or nothing.
    removed = 0
    original = "kept: shared with another document" if doc["sharing"] else "removed"
    try:
        if not doc["sharing"] and make_archive(cfg).remove(str(doc["archive_path"])):
            removed += 1  # (False: a retry after the removal)
    except ArchiveLocked as exc:
        raise PermanentError(f"document {doc_id}: {exc.message}") from None
    removed += remove_tree(derived_dir(cfg.paths.derived_dir, str(doc["archive_path"])))
    ctx.log.warning(
        "document.purged_files",
        document_id=doc_id,
        sha256=doc["sha256"],
        original=original,
        files_removed=removed,
        retention_until=until.isoformat() if until else None,
    )
    ctx.data = {
        "document_id": doc_id,
        "sha256": doc["sha256"],
        "path": str(doc["archive_path"]),
        "original": original,
        "retention_until": until.isoformat() if until else None,
    }
    ctx.result.update(original=original, files_removed=removed)
