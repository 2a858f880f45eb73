"""analyze-document's e-invoice path: the invoice read from its XML instead of OCR.

Two kinds of document take it (issue 33):

- an e-invoice archived as XML (XRechnung and any UBL or CII invoice): the XML is read
  and validated, its readable rendering becomes the derived PDF (preview, print,
  thumbnail) and a text made of its fields is the searchable content;
- a PDF with an invoice XML embedded (Factur-X, ZUGFeRD, XRechnung-in-PDF): the XML is
  the source of truth, the PDF's own text layer is its content, and nothing is OCRed or
  converted: the derived PDF is a byte copy of the original, so its embedded XML stays
  in every copy handed out. The XML's total is looked for in the PDF's visible text; a
  PDF that shows another total is flagged (``pdf_check``), never corrected.

An invoice that fails validation is still an invoice: the findings are data (the report
kept beside the original), the document is never refused for them. XML that cannot be
read at all (not an invoice, a DTD, malformed) needs attention with the reason.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pypdfium2  # type: ignore[import-untyped]

from ingestd.durable import fsync_dir
from worker.analysis.einvoice.embedded import embedded_invoice_xml, pdf_text_has_amount
from worker.analysis.einvoice.model import Invoice, Report
from worker.analysis.einvoice.read import NotAnInvoice, read_invoice
from worker.analysis.einvoice.render import render_pdf
from worker.analysis.einvoice.validate import validate
from worker.analysis.ocr.files import publish
from worker.analysis.ocr.text import clean, page_text, render_thumbnail
from worker.jobs import NeedsAttention
from worker.jobs.analysis_input import SavedText
from worker.jobs.invoice_record import InvoiceRecord

RENDERED_PDF = "invoice.pdf"  # the readable rendering of an XML-only invoice
COPY_PDF = "original.pdf"  # a hybrid PDF's byte copy (its embedded XML kept)
THUMBNAIL = "thumbnail.png"
MAX_XML_BYTES = 32 * 1024 * 1024


def invoice_text(inv: Invoice) -> str:
    """The searchable content of an XML-only invoice: its fields as lines a person would
    search for (number, parties, references, line items, amounts)."""
    word = "Gutschrift" if inv.kind == "credit_note" else "Rechnung"
    lines = [f"{word} {inv.number or ''}".strip()]
    for label, party in (("Verkäufer", inv.seller), ("Käufer", inv.buyer)):
        bits = [party.name, party.address, party.vat_id, party.tax_number, party.email]
        lines.append(f"{label}: " + ", ".join(b for b in bits if b))
    for label, value in (
        ("Rechnungsdatum", inv.issue_date),
        ("Fällig", inv.due_date),
        ("Leitweg-ID / Käuferreferenz", inv.buyer_reference),
        ("Bestellung", inv.order_reference),
        ("Netto", inv.net_total),
        ("Steuer", inv.tax_total),
        ("Brutto", inv.gross_total),
        ("Zahlbetrag", inv.payable),
        ("Währung", inv.currency),
        ("Zahlungsbedingungen", inv.payment_terms),
        ("IBAN", ", ".join(inv.iban) or None),
        ("Profil", inv.profile_name or inv.profile),
        ("Hinweis", inv.note),
    ):
        if value not in (None, ""):
            lines.append(f"{label}: {value}")
    for line in inv.lines:
        lines.append(" ".join(str(v) for v in (line.id, line.name, line.net) if v is not None))
    return clean("\n".join(lines))


def _read_xml(data: bytes) -> tuple[Invoice, Report]:
    try:
        inv = read_invoice(data)
    except NotAnInvoice as exc:
        raise NeedsAttention(f"the invoice XML cannot be read: {exc}") from None
    return inv, validate(inv, data)


def _publish_dir(out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".invoice-", dir=out_dir))


def _publish(work: Path, out_dir: Path, names: tuple[str, ...]) -> None:
    for name in names:
        publish(work / name, out_dir / name)
    fsync_dir(out_dir)


def read_xml_invoice(
    original: Path, out_dir: Path, thumbnail_width: int
) -> tuple[SavedText, InvoiceRecord]:
    """An XML e-invoice: read, validated, rendered to ``invoice.pdf`` with a thumbnail."""
    if original.stat().st_size > MAX_XML_BYTES:
        raise NeedsAttention(
            f"the invoice XML is larger than {MAX_XML_BYTES} bytes; it is archived, not read"
        )
    inv, report = _read_xml(original.read_bytes())
    work = _publish_dir(out_dir)
    try:
        render_pdf(inv, work / RENDERED_PDF, report)
        pages = render_thumbnail(work / RENDERED_PDF, thumbnail_width, work / THUMBNAIL)
        _publish(work, out_dir, (RENDERED_PDF, THUMBNAIL))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = SavedText(
        pages=[invoice_text(inv)],
        page_count=max(1, pages),
        engine=f"e-invoice ({inv.syntax.upper()})",
        languages="",
        searchable_pdf=RENDERED_PDF,
        thumbnail=THUMBNAIL,
        ran=True,
    )
    return text, InvoiceRecord("xml", inv, report)


def _pdf_pages(pdf: Path) -> list[str]:
    doc = pypdfium2.PdfDocument(str(pdf))
    try:
        return [clean(page_text(doc, i)) for i in range(len(doc))]
    finally:
        doc.close()


def _pdf_check(inv: Invoice, text: str) -> str:
    """'ok', or what the PDF's visible text does not show of the XML's totals."""
    missing = [
        f"{label} {amount} {inv.currency or ''}".strip()
        for label, amount in (("gross total", inv.gross_total), ("amount due", inv.payable))
        if amount is not None and not pdf_text_has_amount(text, amount)
    ]
    if not missing:
        return "ok"
    return "the PDF's text does not show the XML's " + " nor its ".join(missing)


def read_hybrid_pdf(
    original: Path, out_dir: Path, thumbnail_width: int
) -> tuple[SavedText, InvoiceRecord] | None:
    """A PDF carrying an invoice XML (Factur-X/ZUGFeRD): its XML read and validated, its
    own text as the content, a byte copy as the derived PDF; None for any other PDF."""
    found = embedded_invoice_xml(original, max_bytes=MAX_XML_BYTES)
    if found is None:
        return None
    _name, data = found
    inv, report = _read_xml(data)
    try:
        pages = _pdf_pages(original)
    except pypdfium2.PdfiumError as exc:
        raise NeedsAttention(f"the invoice PDF cannot be read: {exc}") from None
    work = _publish_dir(out_dir)
    try:
        shutil.copyfile(original, work / COPY_PDF)
        render_thumbnail(work / COPY_PDF, thumbnail_width, work / THUMBNAIL)
        _publish(work, out_dir, (COPY_PDF, THUMBNAIL))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = SavedText(
        pages=pages or [""],
        page_count=max(1, len(pages)),
        engine=f"e-invoice ({inv.syntax.upper()} in PDF), the PDF's own text",
        languages="",
        searchable_pdf=COPY_PDF,
        thumbnail=THUMBNAIL,
        ran=True,
    )
    record = InvoiceRecord("embedded", inv, report, _pdf_check(inv, "\n".join(pages)))
    return text, record
