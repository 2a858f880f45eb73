"""What analyze-document derived, as one typed record, and how it is written.

The job child fills an ``Analysis`` (OCR text, title and date decisions, taxonomy and
workflow results, the webhooks to send); it crosses the pipe to the worker, which calls
``apply_analysis`` inside the transaction that marks the job done: all of it is
recorded, or none of it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from ingestd.db.database import Tx
from ingestd.jobkinds import JobKind
from ingestd.queue.claims import Job
from ingestd.queue.enqueue import enqueue
from worker.jobs.invoice_record import InvoiceRecord, apply_invoice


@dataclass(frozen=True, slots=True)
class TitleChange:
    new: str
    was: str  # the title before, so a concurrent rename by a person is not overwritten


@dataclass(frozen=True, slots=True)
class DateChange:
    new: datetime.date | None  # None: a date analysis set before is taken back
    was: datetime.date | None


@dataclass(frozen=True, slots=True)
class Delivery:
    """One workflow webhook to send, as a deliver-webhook job of its own (the outbox)."""

    workflow: str
    event_id: str  # the same on every retry and redelivery: receivers drop duplicates
    event: dict[str, Any]  # the JSON event body

    def payload(self) -> dict[str, Any]:
        return {"workflow": self.workflow, "event_id": self.event_id, "event": self.event}


@dataclass(slots=True)
class Analysis:
    # The text (OCR or the saved text of the same bytes) and its files under derived/.
    pages: list[str]
    page_count: int
    engine: str
    languages: str
    searchable_pdf: str | None
    thumbnail: str | None
    # What analysis itself read; kept to know later whether a title or date is still its.
    placeholder_title: str | None = None
    derived_title: str | None = None
    derived_issued_date: datetime.date | None = None
    title: TitleChange | None = None
    issued: DateChange | None = None
    # Taxonomy and workflows.
    correspondent: str | None = None
    document_type: str | None = None
    workflow_title: str | None = None
    taxonomy_tags: list[str] = field(default_factory=list)
    workflow_tags: list[str] = field(default_factory=list)
    workflows: list[str] = field(default_factory=list)
    webhooks: list[Delivery] = field(default_factory=list)
    # An e-invoice's fields and validation (issue 33); None: not an invoice.
    invoice: InvoiceRecord | None = None


def apply_analysis(tx: Tx, job: Job, data: Analysis) -> None:
    """Write what the handler derived; runs in the worker's done transaction."""
    ids = {"id": job.document_id, "tenant_id": job.tenant_id}
    if data.title is not None:
        tx.run(
            "document_title_derived", {**ids, "title": data.title.new, "title_was": data.title.was}
        )
    if data.workflow_title:
        tx.run("document_title_workflow", {**ids, "title": data.workflow_title})
    if data.issued is not None:
        tx.run(
            "document_issued_date",
            {**ids, "issued_date": data.issued.new, "issued_was": data.issued.was},
        )
    for name, ensure, link in (
        (data.correspondent, "correspondent_ensure", "document_correspondent"),
        (data.document_type, "document_type_ensure", "document_document_type"),
    ):
        if name:
            tx.run(ensure, {"tenant_id": job.tenant_id, "name": name})
            tx.run(link, {**ids, "name": name})
    for origin, tags in (("taxonomy", data.taxonomy_tags), ("workflow", data.workflow_tags)):
        names = sorted(set(tags))
        if names:
            tx.run("tags_ensure", {"tenant_id": job.tenant_id, "names": names})
            tx.run(
                "tags_link",
                {
                    "tenant_id": job.tenant_id,
                    "document_id": job.document_id,
                    "names": names,
                    "origin": origin,
                },
            )
    for name in data.workflows:
        tx.run(
            "workflow_ran",
            {"document_id": job.document_id, "workflow": name, "tenant_id": job.tenant_id},
        )
    for hook in data.webhooks:
        enqueue(
            tx,
            tenant_id=job.tenant_id,
            document_id=job.document_id,
            kind=JobKind.deliver_webhook,
            payload=hook.payload(),
            trace=job.trace,
        )
    apply_invoice(tx, job, data.invoice)
    tx.run(
        "content_upsert",
        {
            "document_id": job.document_id,
            "tenant_id": job.tenant_id,
            "page_count": data.page_count,
            "pages": data.pages,
            "content": "\f".join(data.pages),
            "languages": data.languages,
            "searchable_pdf": data.searchable_pdf,
            "thumbnail": data.thumbnail,
            "engine": data.engine,
            "placeholder_title": data.placeholder_title,
            "derived_title": data.derived_title,
            "derived_issued_date": data.derived_issued_date,
        },
    )
