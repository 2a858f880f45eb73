"""On-upload workflows: which ones apply to a new document, and what they do to it.

``plan`` is pure: given the tenant's ``[[workflows]]`` and what is known about the
document (after OCR, title, date and taxonomy), it returns the actions to apply, one
``Applied`` per workflow whose conditions hold. Workflows run in config order and each
one sees the document as the earlier ones left it: tags they added count for
``has_tags``, a correspondent, document type or title they set is what later conditions
and title templates see. Within one workflow the tags, correspondent and document type
are applied before its title is rendered, so ``title = "{correspondent} {year}"`` sees
the correspondent the same workflow set. The job handler writes the results and records
each workflow as run (``document_workflow_runs``). A workflow's webhook gets
``event_payload``; sending it is ``worker/webhooks.py``, from a deliver-webhook job.
"""

from __future__ import annotations

import datetime
import fnmatch
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Any

from ingestd.config.rules import WebhookConfig, WorkflowConditions, WorkflowRule, template_fields
from ingestd.filenames.titles import cap_title

EVENT_ANALYZED = "document.analyzed"


@dataclass(frozen=True)
class InvoiceFacts:
    """What workflow conditions see of an e-invoice, and its fields for the event."""

    seller_vat_id: str | None
    buyer_reference: str | None
    gross_total: Decimal | None
    fields: dict[str, Any]  # every field read (Invoice.as_fields), JSON-ready


@dataclass(frozen=True)
class DocumentFacts:
    """What workflow conditions, title templates and the event see of a document."""

    tenant: str
    document_id: int
    sha256: str
    filename: str  # the original file name as uploaded
    source: str  # "cli", "sftp:<account>", "watch:<folder path>"
    subfolder: str  # below the inbox or hot folder, "/"-separated; "" at the top level
    tags: tuple[str, ...]
    correspondent: str | None
    document_type: str | None
    title: str
    issued_date: datetime.date | None
    page_count: int
    invoice: InvoiceFacts | None = None  # an e-invoice's (issue 33)


@dataclass(frozen=True)
class Applied:
    """What one workflow does to the document."""

    workflow: str
    add_tags: tuple[str, ...]  # only tags the document did not have yet
    correspondent: str | None  # None: leave as is
    document_type: str | None
    title: str | None  # rendered; None: leave as is (no template, or it rendered empty)
    webhook: WebhookConfig | None


# --- conditions and actions -----------------------------------------------------------


def plan(rules: Sequence[WorkflowRule], facts: DocumentFacts) -> list[Applied]:
    """The actions of ``facts.tenant``'s workflows whose conditions hold, in config order."""
    applied = []
    for rule in rules:
        if rule.tenant != facts.tenant or not matches(rule.when, facts):
            continue
        then = rule.then
        known = {t.casefold() for t in facts.tags}
        new_tags: list[str] = []
        for tag in then.add_tags:
            if tag.casefold() not in known:
                known.add(tag.casefold())
                new_tags.append(tag)
        step = Applied(
            workflow=rule.name,
            add_tags=tuple(new_tags),
            correspondent=then.correspondent,
            document_type=then.document_type,
            title=None,
            webhook=then.webhook,
        )
        if then.title is not None:
            # Rendered with this workflow's own tags, correspondent and type in place.
            rendered = render_title(then.title, apply_step(facts, step))
            step = replace(step, title=rendered or None)
        facts = apply_step(facts, step)
        applied.append(step)
    return applied


def apply_step(facts: DocumentFacts, step: Applied) -> DocumentFacts:
    """``facts`` as they are after ``step``: what the next workflow sees."""
    return replace(
        facts,
        tags=facts.tags + step.add_tags,
        correspondent=step.correspondent if step.correspondent is not None else facts.correspondent,
        document_type=step.document_type if step.document_type is not None else facts.document_type,
        title=step.title if step.title is not None else facts.title,
    )


def matches(when: WorkflowConditions, facts: DocumentFacts) -> bool:
    """True if every condition given in ``when`` holds for ``facts``."""
    # Sources name accounts and paths, which are case-sensitive.
    if when.sources and not any(fnmatch.fnmatchcase(facts.source, g) for g in when.sources):
        return False
    if when.filename is not None and not _iglob(facts.filename, when.filename):
        return False
    if when.subfolder is not None and not _iglob(facts.subfolder.strip("/"), when.subfolder):
        return False
    tags = {t.casefold() for t in facts.tags}
    if not all(t.casefold() in tags for t in when.has_tags):
        return False
    if not _same_name(when.correspondent, facts.correspondent) or not _same_name(
        when.document_type, facts.document_type
    ):
        return False
    return _invoice_matches(when, facts.invoice)


def _invoice_matches(when: WorkflowConditions, invoice: InvoiceFacts | None) -> bool:
    """The e-invoice conditions: each given one needs an invoice that meets it."""
    if when.invoice is not None and when.invoice != (invoice is not None):
        return False
    wants = (when.seller_vat_id, when.buyer_reference, when.total_above)
    if all(w is None for w in wants):
        return True
    if invoice is None:
        return False
    if when.seller_vat_id is not None and _vat_id(when.seller_vat_id) != _vat_id(
        invoice.seller_vat_id or ""
    ):
        return False
    if when.buyer_reference is not None and not _iglob(
        invoice.buyer_reference or "", when.buyer_reference
    ):
        return False
    total = invoice.gross_total
    return when.total_above is None or (total is not None and total > when.total_above)


def _vat_id(value: str) -> str:
    # "DE 123 456 789" and "de123456789" are the same VAT id.
    return "".join(value.split()).upper()


def _iglob(value: str, pattern: str) -> bool:
    # Scanners and Windows shares do not agree on case, nor macOS and Linux on NFC/NFD.
    return fnmatch.fnmatchcase(_fold_case(value), _fold_case(pattern))


def _fold_case(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold()


def _same_name(wanted: str | None, actual: str | None) -> bool:
    return wanted is None or (actual is not None and _fold_case(wanted) == _fold_case(actual))


# --- title templates ------------------------------------------------------------------

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_WHITESPACE = re.compile(r"\s+")
# What separates placeholders; at the edges it was next to an empty value.
_DANGLING = " -–—_,;:/|·"


def template_values(facts: DocumentFacts) -> dict[str, str]:
    """The value of every placeholder a title template may use ("" when unknown)."""
    issued = facts.issued_date
    return {
        "filename": facts.filename,
        "stem": PurePosixPath(facts.filename.replace("\\", "/")).stem,
        "correspondent": facts.correspondent or "",
        "document_type": facts.document_type or "",
        "issued_date": issued.isoformat() if issued is not None else "",
        "year": f"{issued.year:04d}" if issued is not None else "",
        "month": f"{issued.month:02d}" if issued is not None else "",
        "tenant": facts.tenant,
        "source": facts.source,
        "subfolder": facts.subfolder,
        "title": facts.title,
        "page_count": str(facts.page_count),
    }


def render_title(template: str, facts: DocumentFacts) -> str:
    """``template`` with its ``{placeholders}`` filled in, at most 200 characters.

    Unknown values render empty; separators left dangling at the edges go, so
    ``"{correspondent} - {title}"`` without a correspondent is just the title. ValueError
    for a template that config validation would refuse.
    """
    values = template_values(facts)
    out = []
    for literal, field in template_fields(template):
        out.append(literal)
        if field is not None:
            out.append(values[field])
    text = _CONTROL_CHARS.sub(" ", "".join(out))
    return cap_title(_WHITESPACE.sub(" ", text).strip(_DANGLING))


# --- the event -----------------------------------------------------------------------


def event_payload(facts: DocumentFacts, workflow: str) -> dict[str, Any]:
    """The JSON event a workflow's webhook receives."""
    return {
        "event": EVENT_ANALYZED,
        "workflow": workflow,
        "tenant": facts.tenant,
        "document": {
            "id": facts.document_id,
            "sha256": facts.sha256,
            "filename": facts.filename,
            "title": facts.title,
            "issued_date": facts.issued_date.isoformat() if facts.issued_date else None,
            "tags": list(facts.tags),
            "correspondent": facts.correspondent,
            "document_type": facts.document_type,
            "source": facts.source,
            "subfolder": facts.subfolder,
            "page_count": facts.page_count,
            "invoice": facts.invoice.fields if facts.invoice else None,
        },
    }
