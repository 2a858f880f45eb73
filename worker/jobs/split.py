"""split-batch (issue 16): cut a batch scan into its documents; the batch stays as it is.

Intake archived and recorded the batch exactly as dropped and queued this job instead of
an analysis (its source has a split policy, carried in the payload). Here:

1. in the job's child: the archived batch is checked against its record, its pages are
   read (``worker/split``), the children planned and written as PDFs from the batch's own
   page objects into a work directory of this job (``<derived>/.split/job-<id>``, cleared
   first: a retry starts from nothing);
2. in the worker, in the transaction that marks the job done (``apply_split``): the
   tenant row is locked FOR SHARE (as intake does: a tenant being wiped gets no file),
   each child is copied into the archive, fsynced, linked to its WORM name, recorded as a
   document with its own analyze-document job, linked to its parent with its page range;
   the parent becomes ``split``. All of it commits together or not at all.

A crash anywhere leaves either no children or all of them: children are deterministic
(same bytes every time), so the retry finds the archive files it linked before the
crash identical and reuses them (``ArchivedFile.reused``), and writes the rows once.

What cannot be cut safely (a missing separator by ``max_pages``, an ASN another
document has, two ASNs in one document) ends in ``attention`` with the reason: the
batch stays archived, nothing is lost, an operator decides (``documents split`` again
with a higher ``--max-pages``, or ``documents analyze`` to take it as one document).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ingestd.archive import audit
from ingestd.archive.audit import AuditKind
from ingestd.archive.backends import ArchiveLocation, make_archive
from ingestd.archive.store import remove_tree
from ingestd.config.split import SplitPolicy
from ingestd.db.database import Tx
from ingestd.intake.tags import link_tags
from ingestd.jobkinds import JobKind
from ingestd.queue.claims import Job
from ingestd.queue.enqueue import enqueue
from ingestd.runtime import metrics
from ingestd.runtime.faults import crashpoint
from ingestd.tenants import lookup
from worker.jobs import JobContext, NeedsAttention, PermanentError, register
from worker.jobs.analysis_input import verify_original
from worker.limits import address_space_limit
from worker.split.plan import Part, Plan
from worker.split.run import split_batch
from worker.split.scan import page_count

WORK_DIR = ".split"


@dataclass(frozen=True, slots=True)
class Child:
    """One child as the job's child process wrote it (a work file, not yet archived)."""

    position: int  # 1-based
    first_page: int  # 1-based, of the batch
    last_page: int
    work_file: str
    size: int
    title: str
    filename: str
    asn: int | None
    tags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SplitResult:
    """What ``apply_split`` writes (crosses the child's pipe: plain data)."""

    parent_id: int
    tenant: str
    # Where the archive is (the config's sections for it) and the work directory: the
    # applier runs in the worker, which stores the children under the tenant's lock.
    archive: ArchiveLocation
    work_dir: str
    # The parent's month directory: a retry archives the children under the same
    # names, so a crash's leftovers are found and reused, never doubled.
    archived_at: datetime
    source: str
    source_subdir: str
    trace: str | None
    inherited_tags: tuple[str, ...]
    derive_title: bool
    children: tuple[Child, ...]
    # No separator: the batch is one document, analysed as it is (with these).
    whole_asn: int | None = None
    whole_tags: tuple[str, ...] = ()
    # The parent's date policy, frozen at its intake: the children's too (migration 0024;
    # a child's own name_date stays NULL, its name is ours, not the scanner's).
    date_policy: str | None = None

    @property
    def whole(self) -> bool:
        return not self.children


def work_dir_of(derived: Path, job_id: int) -> Path:
    return derived / WORK_DIR / f"job-{job_id}"


def _policy(job: Job) -> SplitPolicy:
    raw = job.payload.get("policy")
    if not isinstance(raw, dict):
        raise PermanentError(f"split-batch job {job.id} carries no split policy; not retried")
    try:
        policy = SplitPolicy.model_validate(raw)
    except ValidationError as exc:
        raise PermanentError(
            f"split-batch job {job.id}: its split policy does not read "
            f"({exc.errors()[0]['msg']}); not retried"
        ) from None
    max_pages = job.payload.get("max_pages")  # `documents split --max-pages N`
    if isinstance(max_pages, int) and max_pages > 0:
        policy = policy.model_copy(update={"max_pages": max_pages})
    return policy


def split_batch_job(ctx: JobContext) -> None:
    job, cfg = ctx.job, ctx.config
    policy = _policy(job)
    with ctx.db.transaction() as tx:
        doc = tx.one("split_parent", {"id": job.document_id, "tenant_id": job.tenant_id})
    if doc is None:
        raise NeedsAttention(f"document {job.document_id} of tenant {job.tenant} not found")
    work = work_dir_of(cfg.paths.derived_dir, job.id)
    remove_tree(work)  # what an interrupted attempt left
    work.mkdir(parents=True, mode=0o750)
    try:
        limit = cfg.analysis.memory_limit_bytes()
        with make_archive(cfg).reading(str(doc["archive_path"])) as original:
            verify_original(
                original,
                archive_path=str(doc["archive_path"]),
                size_bytes=int(doc["size_bytes"]),
                sha256=str(doc["sha256"]),
            )
            pages = page_count(original)
            if pages > cfg.analysis.max_pages:  # a page-count bomb: hours of reading
                raise NeedsAttention(
                    f"batch not split: it has {pages} pages, more than analysis.max_pages "
                    f"({cfg.analysis.max_pages})"
                )
            try:
                with address_space_limit(limit):
                    outcome = split_batch(original, policy, work)
            except MemoryError:
                raise NeedsAttention(
                    f"batch not split: reading its pages needs more than analysis.memory_limit "
                    f"({limit // (1 << 20)} MiB)"
                ) from None
        plan = outcome.plan
        if plan.attention is not None:
            raise NeedsAttention(f"batch not split: {plan.attention}")
        _check_asns(ctx, plan, int(doc["id"]))
        crashpoint("split_after_children")
    except BaseException:
        remove_tree(work)
        raise
    ctx.data = _result(ctx, doc, plan, outcome.children, work)
    ctx.result.update(
        pages=plan.page_count,
        separators=len(plan.separators),
        children=len(outcome.children),
        whole=plan.whole,
    )


def _check_asns(ctx: JobContext, plan: Plan, parent_id: int) -> None:
    asns = [p.asn for p in plan.parts if p.asn is not None]
    if not asns:
        return
    with ctx.db.transaction() as tx:
        taken = tx.all(
            "asn_owners", {"tenant_id": ctx.job.tenant_id, "asns": asns, "parent_id": parent_id}
        )
    if taken:
        row = taken[0]
        part = next(p for p in plan.parts if p.asn == row["asn"])
        raise NeedsAttention(
            f"batch not split: ASN {row['asn']} on {part.label()} is already document "
            f"{row['id']}'s (an ASN is unique per tenant); nothing was split"
        )


def _result(
    ctx: JobContext, doc: dict[str, Any], plan: Plan, files: list[Path], work: Path
) -> SplitResult:
    job = ctx.job
    stem = Path(str(doc["original_filename"])).stem or "batch"
    total = len(files)
    whole = plan.parts[0] if plan.whole else None
    children = (
        ()
        if whole
        else tuple(
            _child(n, part, path, str(doc["title"]), stem, total)
            for n, (part, path) in enumerate(zip(plan.parts, files, strict=True), start=1)
        )
    )
    return SplitResult(
        parent_id=int(doc["id"]),
        tenant=job.tenant,
        archive=ArchiveLocation(ctx.config.paths, ctx.config.archive, ctx.config.retention),
        work_dir=str(work),
        archived_at=doc["created_at"],
        source=str(doc["source"]),
        source_subdir=str(doc["source_subdir"]),
        trace=doc["trace_id"],
        inherited_tags=tuple(doc["intake_tags"]),
        derive_title=job.derive_title,
        children=children,
        whole_asn=whole.asn if whole else None,
        whole_tags=whole.tags if whole else (),
        date_policy=doc["date_policy"],
    )


def _child(n: int, part: Part, path: Path, title: str, stem: str, total: int) -> Child:
    # The placeholder until its own text gives a title (derive_title on its job).
    return Child(
        position=n,
        first_page=part.first + 1,
        last_page=part.last + 1,
        work_file=str(path),
        size=path.stat().st_size,
        title=f"{title} ({n}/{total})",
        filename=f"{stem}-part{n:03d}.pdf",
        asn=part.asn,
        tags=part.tags,
    )


def apply_split(tx: Tx, job: Job, data: SplitResult) -> None:
    """In the transaction that marks the job done: archive and record every child."""
    row = lookup.by_name(tx, data.tenant, query="tenant_lock_for_intake")
    tenant_id = lookup.active_id(row)
    if data.whole:
        _apply_whole(tx, job, data, tenant_id)
        return
    archive = data.archive.store()
    child_ids: list[int] = []
    for child in data.children:
        fd = os.open(child.work_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            staged = archive.stage(data.tenant, fd, max_bytes=child.size, when=data.archived_at)
        finally:
            os.close(fd)
        archived = archive.commit(staged, "pdf")
        crashpoint("split_after_archive")
        doc = tx.one(
            "document_insert_child",
            {
                "tenant_id": tenant_id,
                "sha256": archived.sha256,
                "size_bytes": archived.size,
                "original_filename": child.filename,
                "source": data.source,
                "source_subdir": data.source_subdir,
                "archive_path": archived.relpath,
                "title": child.title,
                "trace_id": data.trace,
                "asn": child.asn,
                "date_policy": data.date_policy,
            },
        )
        if doc is None:  # the tenant has these bytes already: that document is the part
            known = tx.one(
                "document_by_sha256_any", {"tenant_id": tenant_id, "sha256": archived.sha256}
            )
            assert known is not None
            child_id = int(known["id"])
        else:
            child_id = int(doc["id"])
            enqueue(
                tx,
                tenant_id=tenant_id,
                document_id=child_id,
                kind=JobKind.analyze_document,
                derive_title=True,
                payload={"document_id": child_id, "force": False, "parent_id": data.parent_id},
                trace=data.trace,
            )
            link_tags(tx, tenant_id, child_id, data.inherited_tags, "intake")
            link_tags(tx, tenant_id, child_id, child.tags, "barcode")
        child_ids.append(child_id)
        audit.append(
            tx,
            chain=tenant_id,
            tenant=data.tenant,
            kind=AuditKind.archived if doc is not None else AuditKind.duplicate,
            document_id=child_id,
            detail={
                "sha256": archived.sha256,
                "size": archived.size,
                "path": archived.relpath,
                "type": "pdf",
                "filename": child.filename,
                "source": data.source,
                "parent": data.parent_id,
                "pages": [child.first_page, child.last_page],
            },
        )
        tx.run(
            "document_part_insert",
            {
                "parent_id": data.parent_id,
                "position": child.position,
                "first_page": child.first_page,
                "last_page": child.last_page,
                "child_id": child_id,
                "tenant_id": tenant_id,
            },
        )
    tx.run("document_mark_split", {"id": data.parent_id, "tenant_id": tenant_id})
    audit.append(
        tx,
        chain=tenant_id,
        tenant=data.tenant,
        kind=AuditKind.batch_split,
        document_id=data.parent_id,
        detail={"children": child_ids, "job": job.id},
    )
    crashpoint("split_before_commit")
    remove_tree(Path(data.work_dir))  # copied; a retry after a failed COMMIT writes it anew


def _apply_whole(tx: Tx, job: Job, data: SplitResult, tenant_id: int) -> None:
    tx.run(
        "document_as_whole", {"id": data.parent_id, "tenant_id": tenant_id, "asn": data.whole_asn}
    )
    link_tags(tx, tenant_id, data.parent_id, data.whole_tags, "barcode")
    enqueue(
        tx,
        tenant_id=tenant_id,
        document_id=data.parent_id,
        kind=JobKind.analyze_document,
        derive_title=data.derive_title,
        payload={"document_id": data.parent_id, "force": False},
        trace=data.trace,
    )
    remove_tree(Path(data.work_dir))


def count_split(job: Job, summary: Mapping[str, Any]) -> None:
    """The pages a batch had and the documents it was cut into."""
    metrics.SPLIT_PAGES.labels(job.tenant).inc(int(summary.get("pages") or 0))
    metrics.SPLIT_CHILDREN.labels(job.tenant).inc(int(summary.get("children") or 0))


register(JobKind.split_batch, apply=apply_split, count=count_split)(split_batch_job)
