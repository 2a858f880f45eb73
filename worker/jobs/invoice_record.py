"""An e-invoice as analyze-document read it, and how it is written: the invoices row.

The job child fills an ``InvoiceRecord`` (worker/jobs/invoice_step.py); it crosses the
pipe inside the ``Analysis`` and ``apply_invoice`` writes it in the transaction that marks
the job done. A document that is no longer read as an invoice (a re-analysis after the
reader changed) loses its row. The same seller and number as an older invoice of the
tenant is flagged (``duplicate_of``), never refused: it may be a correction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ingestd.db.database import Tx, jsonb
from ingestd.queue.claims import Job
from worker.analysis.einvoice.model import Invoice, Report
from worker.analysis.workflows import InvoiceFacts


@dataclass(frozen=True, slots=True)
class InvoiceRecord:
    """What the analysis read of an e-invoice; ``apply`` writes it (the invoices row)."""

    source: str  # "xml" or "embedded"
    invoice: Invoice
    report: Report
    pdf_check: str | None = None  # a hybrid's visible total against the XML's

    @property
    def title(self) -> str:
        """ "Rechnung 4711 – Stadtwerke Musterstadt" ("Gutschrift" for a credit note)."""
        inv = self.invoice
        word = "Gutschrift" if inv.kind == "credit_note" else "Rechnung"
        parts = [word, inv.number or ""]
        title = " ".join(p for p in parts if p)
        return f"{title} – {inv.seller.name}" if inv.seller.name else title

    @property
    def correspondent(self) -> str | None:
        """The seller as a correspondent name, at most 100 characters (the reader already
        removed control characters and runs of blanks)."""
        return (self.invoice.seller.name or "")[:100].strip() or None

    @property
    def document_type(self) -> str:
        return "Gutschrift" if self.invoice.kind == "credit_note" else "Rechnung"

    def facts(self) -> InvoiceFacts:
        """What workflow conditions and webhook events see of it."""
        inv = self.invoice
        fields = {
            **inv.as_fields(),
            "source": self.source,
            "legal_status": self.report.legal_status,
            "format_errors": self.report.format_errors,
            "rule_errors": self.report.rule_errors,
            "pdf_check": self.pdf_check,
        }
        return InvoiceFacts(inv.seller.vat_id, inv.buyer_reference, inv.gross_total, fields)

    def row(self) -> dict[str, Any]:
        """The invoices row's values (without document and tenant)."""
        inv, rep = self.invoice, self.report
        return {
            "source": self.source,
            "syntax": inv.syntax,
            "profile": inv.profile,
            "number": inv.number,
            "type_code": inv.type_code,
            "kind": inv.kind,
            "issue_date": inv.issue_date,
            "due_date": inv.due_date,
            "currency": inv.currency,
            "seller_name": inv.seller.name,
            "seller_vat_id": inv.seller.vat_id,
            "buyer_name": inv.buyer.name,
            "buyer_reference": inv.buyer_reference,
            "net_total": inv.net_total,
            "tax_total": inv.tax_total,
            "gross_total": inv.gross_total,
            "payable": inv.payable,
            "line_count": len(inv.lines),
            "fields": inv.as_fields(),
            "legal_status": rep.legal_status,
            "format_errors": rep.format_errors,
            "rule_errors": rep.rule_errors,
            "report": rep.as_dict(),
            "pdf_check": self.pdf_check,
        }


def apply_invoice(tx: Tx, job: Job, record: InvoiceRecord | None) -> None:
    """The document's invoices row as this analysis read it (none if not an invoice)."""
    ids = {"document_id": job.document_id, "tenant_id": job.tenant_id}
    if record is None:
        tx.run("invoice_delete", ids)
        return
    row = record.row()
    row["fields"], row["report"] = jsonb(row["fields"]), jsonb(row["report"])
    tx.run("invoice_upsert", {**ids, **row})
