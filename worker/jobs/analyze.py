"""analyze-document: derive what the archive does not hold (text, title, date, taxonomy).

Steps (seed 004's pipeline: thumbnails, OCR, DetermineIssuedAt, index; seed 000's
taxonomy auto-assignment and on_upload workflows), in the job's child process:

1. check the archived file against its record (present, same size, same SHA-256): a
   document whose bytes are gone or altered must not get derived data from something else;
2. OCR (worker/analysis/ocr.py) into ``<derived>/<archive path without extension>/``: a
   searchable PDF, a thumbnail and ``text.json`` (the text per page). A retry after a
   later step failed reuses ``text.json`` instead of running OCR again; ``force`` redoes it;
3. title from the text (only for a placeholder title, invariant 5), issued date from the
   text (only if the file name gave none; first, if the source's ``date_source`` is
   ``text-first``), taxonomy rules, then workflows in config order.
   What analysis set is recorded, so ``force`` derives title and date again as long as
   nobody changed them;
4. webhooks are not sent here: each is a deliver-webhook job (worker/jobs/deliveries.py)
   enqueued by ``apply`` with the results (the outbox, invariant 9). A receiver that is
   down cannot fail the analysis, and a retried analysis cannot send twice.

Everything is written by ``apply`` in the worker, in the transaction that marks the job
done (worker/jobs/__init__.py): text, search vector, title, date, tags, correspondent,
type, the workflows that ran and their deliveries commit together with the job's
completion, or not at all. The archived original is only ever read (invariant 4).

Which webhooks: those of workflows that run for the first time on this document, in the
analysis intake queued (the upload event). A re-analysis (``ingestd documents analyze``)
sends none unless asked (``--redeliver``): re-analysing after a restore or an upgrade must
not tell receivers about old documents again.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ingestd.archive import retention
from ingestd.archive.backends import make_archive
from ingestd.intake import filetypes
from ingestd.jobkinds import JobKind
from ingestd.queue.claims import Job
from ingestd.runtime import metrics
from worker.analysis import ocr
from worker.analysis.content_title import title_from_text
from worker.analysis.dates import date_from_text
from worker.analysis.taxonomy import match_rules
from worker.analysis.workflows import DocumentFacts, apply_step, event_payload, plan
from worker.jobs import JobContext, LimitReached, NeedsAttention, register
from worker.jobs.analysis_input import JobDocument, SavedText, derived_dir, verify_original
from worker.jobs.analysis_record import Analysis, DateChange, Delivery, TitleChange, apply_analysis
from worker.jobs.invoice_record import InvoiceRecord
from worker.jobs.invoice_step import read_hybrid_pdf, read_xml_invoice


def _derive_title(
    doc: JobDocument,
    derive_title: bool,
    text: str,
    max_length: int,
    data: Analysis,
    invoice: InvoiceRecord | None = None,
) -> str:
    """The document's title after this analysis; sets data's title fields.

    Analysis owns the title while it is the scanner auto-name (``derive_title`` at
    intake, kept as ``placeholder_title``) or the title analysis set itself: then it is
    derived again (``force`` after an upgrade gets the better title), or put back to the
    placeholder when the text no longer gives one. Any other title is a person's, a
    workflow's or the file name's (invariant 5) and is kept. An invoice's title comes
    from its fields; an XML invoice's file name (an ERP's export name) is a placeholder.
    """
    title = doc.title
    placeholder = doc.placeholder_title
    if placeholder is None and derive_title and doc.derived_title is None:
        placeholder = title  # the first analysis of an auto-named scan
    data.placeholder_title, data.derived_title = placeholder, None
    if placeholder is None or title not in (placeholder, doc.derived_title):
        return title
    derived = invoice.title[:max_length] if invoice else title_from_text(text, max_length)
    data.derived_title = derived
    new = derived or placeholder
    if new != title:
        data.title = TitleChange(new, title)
    return new


def _derive_issued_date(
    doc: JobDocument, text: str, data: Analysis, invoice: InvoiceRecord | None = None
) -> datetime.date | None:
    """The issued date after this analysis (DetermineIssuedAt); sets data's date fields.

    Read from the text while the document has none, or has the one analysis read before;
    a date set by a person is kept. The file name's date (``name_date``, frozen at
    intake) is kept too, unless its source's date policy was ``text-first``: then the
    text's date replaces it, and it stays when the text has none. An invoice's issue
    date is the one it states: it comes first, as the text's does under ``text-first``.
    """
    issued = doc.issued_date
    text_first = doc.text_first or invoice is not None
    from_name = doc.name_date if text_first else None
    data.derived_issued_date = None
    ours = issued is None or issued == doc.derived_issued_date
    if not ours and not (text_first and issued == from_name):
        return issued  # a person's, or (filename-first) the file name's
    found = invoice.invoice.issue_date if invoice else date_from_text(text)
    data.derived_issued_date = found
    new = found
    if new is None and text_first and issued is not None:
        new = from_name  # the text no longer gives one: back to the file name's
    if new != issued:
        data.issued = DateChange(new, issued)
    return new


def count_ocr(job: Job, summary: Mapping[str, Any]) -> None:
    """The pages this attempt OCRed and the models it loaded (none when it reused the
    text a previous attempt saved)."""
    if summary.get("ocr"):
        read = summary.get("ocr_pages", summary.get("pages"))
        metrics.OCR_PAGES.labels(job.tenant).inc(int(read or 0))
        metrics.OCR_ENGINE_LOADS.inc(int(summary.get("engine_loads") or 0))


@register(JobKind.analyze_document, apply=apply_analysis, count=count_ocr)
def analyze_document(ctx: JobContext) -> None:
    job, cfg = ctx.job, ctx.config
    with ctx.db.transaction() as tx:
        row = tx.one("job_document", {"id": job.document_id, "tenant_id": job.tenant_id})
    if row is None:
        raise NeedsAttention(f"document {job.document_id} of tenant {job.tenant} not found")
    doc = JobDocument.of(row)
    force = bool(job.payload.get("force"))
    out_dir = derived_dir(cfg.paths.derived_dir, doc.archive_path)
    store = make_archive(cfg)
    with store.reading(doc.archive_path) as original:
        verify_original(
            original, archive_path=doc.archive_path, size_bytes=doc.size_bytes, sha256=doc.sha256
        )
        invoice, text = None, None
        width = cfg.analysis.thumbnail_width
        if doc.mime_type == filetypes.EINVOICE.mime:
            text, invoice = read_xml_invoice(original, out_dir, width)
        elif doc.mime_type == filetypes.PDF.mime and (
            hybrid := read_hybrid_pdf(original, out_dir, width)
        ):
            text, invoice = hybrid  # never OCRed: its own text, its XML the truth
        else:
            text = None if force else SavedText.load(out_dir, doc.sha256)
            if text is None:
                text = run_ocr(ctx, original, doc.mime_type, out_dir)
                text.save(out_dir, doc.sha256)
    full = text.full
    rel_dir = out_dir.relative_to(cfg.paths.derived_dir)

    data = Analysis(
        pages=text.pages,
        page_count=text.page_count,
        engine=text.engine,
        languages=text.languages,
        searchable_pdf=str(rel_dir / text.searchable_pdf),
        thumbnail=str(rel_dir / text.thumbnail),
        invoice=invoice,
    )
    derive_title = job.derive_title or (invoice is not None and invoice.source == "xml")
    max_title = cfg.analysis.title_max_length
    title = _derive_title(doc, derive_title, full, max_title, data, invoice)
    issued = _derive_issued_date(doc, full, data, invoice)

    matches = match_rules(
        cfg.taxonomy, job.tenant, f"{title}\n{full}", regex_timeout=cfg.analysis.regex_timeout
    )
    data.taxonomy_tags = list(matches.tags)
    # An invoice names its seller and says what it is; a taxonomy rule may still say more.
    data.correspondent = matches.correspondent or (invoice.correspondent if invoice else None)
    data.document_type = matches.document_type or (invoice.document_type if invoice else None)
    correspondent = data.correspondent or doc.correspondent
    document_type = data.document_type or doc.document_type

    facts = DocumentFacts(
        tenant=job.tenant,
        document_id=doc.id,
        sha256=doc.sha256,
        filename=doc.original_filename,
        source=doc.source,
        subfolder=doc.source_subdir,
        tags=tuple(sorted({*doc.tags, *matches.tags})),
        correspondent=correspondent,
        document_type=document_type,
        title=title,
        issued_date=issued,
        page_count=text.page_count,
        invoice=invoice.facts() if invoice else None,
    )
    redeliver = bool(job.payload.get("redeliver"))
    first = not job.payload.get("reanalysis")
    run_workflows(ctx, facts, set(doc.workflows_run), data, send=first, redeliver=redeliver)
    # Now the class is known: an original locked for the tenant's default (S3 Object
    # Lock) is locked as long as its class keeps it. Before the result is written, and
    # only ever longer: a failed attempt leaves a lock too long, never too short.
    years = retention.class_years(
        retention.policy_for(cfg.retention, job.tenant),
        tags=[*facts.tags, *data.workflow_tags],
        document_type=document_type,
        correspondent=correspondent,
    )
    until = retention.lock_until(doc.created_at, years)
    if until is not None and store.extend_retention(doc.archive_path, until):
        ctx.log.info("document.lock_extended", until=until.date().isoformat(), years=years)
    ctx.data = data
    ctx.result.update(
        pages=text.page_count,
        ocr=text.ran,
        # Pages read and models loaded by this attempt (0 when it reused saved text).
        ocr_pages=text.ocr_pages if text.ran else 0,
        engine_loads=text.engine_loads if text.ran else 0,
        title=data.workflow_title or (data.title.new if data.title else None),
        issued_date=issued.isoformat() if issued else None,
        tags=sorted({*data.taxonomy_tags, *data.workflow_tags}),
        workflows=data.workflows,
        invoice=invoice.report.legal_status if invoice else None,
    )


def run_workflows(
    ctx: JobContext,
    facts: DocumentFacts,
    already: set[str],
    data: Analysis,
    *,
    send: bool = True,
    redeliver: bool = False,
) -> None:
    """Plan the tenant's workflows and leave their actions to ``apply``: tags, names,
    title, and one deliver-webhook job per webhook to send (``data.webhooks``).

    A workflow that ran before is skipped whole, its webhook too unless ``redeliver``.
    ``send`` False (a re-analysis) applies the actions of workflows that never ran but
    sends no webhook, again unless ``redeliver``.
    """
    rules = [w for w in ctx.config.workflows if w.tenant == facts.tenant]
    if not rules:
        return
    tags: list[str] = []
    ran: list[str] = []
    hooks: list[Delivery] = []
    for applied in plan(rules, facts):
        # The facts as this workflow left them: its event shows its own tags and title.
        facts = apply_step(facts, applied)
        fresh = applied.workflow not in already
        if applied.webhook is not None and ((fresh and send) or redeliver):
            hooks.append(
                Delivery(
                    applied.workflow,
                    f"{facts.tenant}:{facts.document_id}:{applied.workflow}",
                    event_payload(facts, applied.workflow),
                )
            )
        if not fresh:
            continue
        tags.extend(applied.add_tags)
        if applied.correspondent:
            data.correspondent = applied.correspondent
        if applied.document_type:
            data.document_type = applied.document_type
        if applied.title:
            data.workflow_title = applied.title
        ran.append(applied.workflow)
    data.workflow_tags = tags
    data.workflows = ran
    data.webhooks = hooks


def run_ocr(ctx: JobContext, original: Path, mime_type: str, out_dir: Path) -> SavedText:
    a = ctx.config.analysis
    languages = a.languages_for(ctx.job.tenant)
    concurrency = ctx.config.worker.concurrency
    opts = ocr.OcrOptions(
        engine=a.engine_for(ctx.job.tenant),
        languages=languages,
        mode=a.mode,
        rotate_pages=a.rotate_pages,
        rotate_threshold=a.rotate_threshold,
        jobs=a.jobs or concurrency,
        timeout=a.ocr_timeout,
        page_timeout=a.page_timeout,
        slots_dir=ctx.config.paths.ocr_slots_dir,
        slots=concurrency,
        thumbnail_width=a.thumbnail_width,
        image_dpi=a.image_dpi,
        max_pages=a.max_pages,
        max_page_pixels=a.max_page_megapixels * 1_000_000,
        memory_limit=a.memory_limit_bytes(),
    )
    try:
        res = ocr.analyze_file(original, mime_type, out_dir, opts)
    except ocr.OcrTimeout as exc:
        # Retried once (the machine may have been busy); every further attempt would hold
        # a worker as long again, for nothing (worker/outcomes.py, limit_rule).
        raise LimitReached(
            exc.message,
            again="it timed out again after a retry: the file needs more than "
            f"analysis.ocr_timeout ({a.ocr_timeout:g} s) allows",
        ) from None
    # OcrInputError (encrypted, damaged, over a limit: the document needs attention) and
    # OcrConfigError (a missing language pack: failed until an admin fixes it, then
    # `ingestd jobs retry`; check-config names it beforehand) say so themselves.
    return SavedText(
        pages=res.pages,
        page_count=res.page_count,
        engine=res.engine,
        languages="+".join(languages),
        searchable_pdf=res.searchable_pdf,
        thumbnail=res.thumbnail,
        ocr_pages=res.ocr_pages,
        engine_loads=res.engine_loads,
        ran=True,
    )
