"""A readable PDF of an XML-only e-invoice: the derived PDF people preview and print.

Seller and buyer, dates and references, the lines, the tax per rate, the totals, the
payment and, when given, what the validation found. Text from the XML is only ever
text: cut, cleaned of control characters, never interpreted. DejaVu Sans (Debian's
fonts-dejavu-core) shows any script; without it the core Helvetica shows Latin-1 and a
replacement mark for the rest. Written to a temp file and renamed into place.
"""

from __future__ import annotations

import contextlib
import os
import re
from decimal import Decimal
from pathlib import Path

from fpdf import FPDF

from worker.analysis.einvoice.model import Invoice, Party, Report

FONT_DIRS = (Path("/usr/share/fonts/truetype/dejavu"),)
MAX_LINES_SHOWN = 2000
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _font(pdf: FPDF, latin1: bool) -> tuple[str, bool]:
    """The font family to use and whether it is Unicode: the core Helvetica for text in
    Latin-1 (most invoices: fast, nothing embedded), DejaVu Sans for any other script."""
    if latin1:
        return "Helvetica", False
    for folder in FONT_DIRS:
        regular, bold = folder / "DejaVuSans.ttf", folder / "DejaVuSans-Bold.ttf"
        if regular.is_file() and bold.is_file():
            pdf.add_font("DejaVu", "", str(regular))
            pdf.add_font("DejaVu", "B", str(bold))
            return "DejaVu", True
    return "Helvetica", False


class _Page:
    def __init__(self, latin1: bool) -> None:
        self.pdf = FPDF(format="A4")
        self.pdf.set_auto_page_break(True, margin=15)
        self.pdf.add_page()
        self.family, self.unicode = _font(self.pdf, latin1)

    def text(self, value: object, limit: int = 300) -> str:
        text = " ".join(_CONTROL.sub(" ", str(value)).split())
        text = text if len(text) <= limit else text[: limit - 1] + "…"
        if not self.unicode:
            text = text.replace("…", "...").replace("≠", "!=")
            text = text.encode("latin-1", "replace").decode("latin-1")
        return text

    def say(self, value: object, size: int = 10, bold: bool = False, limit: int = 300) -> None:
        self.pdf.set_font(self.family, "B" if bold else "", size)
        self.pdf.multi_cell(0, size * 0.5, self.text(value, limit), new_x="LMARGIN", new_y="NEXT")

    def row(self, cells: list[tuple[object, float, str]], bold: bool = False) -> None:
        self.pdf.set_font(self.family, "B" if bold else "", 8)
        for value, width, align in cells:
            self.pdf.cell(width, 5, self.text(value, 80), align=align)
        self.pdf.ln(5)

    def gap(self, mm: float = 3) -> None:
        self.pdf.ln(mm)


def _is_latin1(inv: Invoice, report: Report | None) -> bool:
    """Is every text the rendering shows Latin-1 (the core fonts' range, and "…")?"""
    texts = [str(v) for v in inv.as_fields().values() if v is not None]
    texts += [line.name or "" for line in inv.lines[:MAX_LINES_SHOWN]]
    texts += [f.message for f in (report.findings if report else ())]
    texts += ["Käufer Prüfung fällig Zuschläge Nachlässe"]
    try:
        "".join(texts).replace("…", "").replace("≠", "").encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _money(value: Decimal | None, currency: str | None = "") -> str:
    return "" if value is None else f"{value:,.2f} {currency or ''}".strip()


def _party(page: _Page, label: str, p: Party) -> None:
    page.say(label, 8, bold=True)
    for value in (
        p.name,
        p.address,
        p.vat_id and f"USt-IdNr. / VAT id {p.vat_id}",
        p.tax_number and f"Steuernummer {p.tax_number}",
        p.email,
    ):
        if value:
            page.say(value, 9)
    page.gap(2)


def _lines(page: _Page, inv: Invoice) -> None:
    widths = [(12, "L"), (98, "L"), (20, "R"), (30, "R"), (30, "R")]
    head = ["Pos.", "Bezeichnung / item", "Menge", "Preis", "Netto"]
    page.row([(h, w, a) for h, (w, a) in zip(head, widths, strict=True)], bold=True)
    for line in inv.lines[:MAX_LINES_SHOWN]:
        values = [
            line.id or "",
            line.name or "",
            line.quantity if line.quantity is not None else "",
            _money(line.unit_price),
            _money(line.net),
        ]
        page.row([(v, w, a) for v, (w, a) in zip(values, widths, strict=True)])
    more = len(inv.lines) - MAX_LINES_SHOWN + inv.lines_not_read
    if more > 0:
        page.say(f"… {more} more lines", 8)


def _totals(page: _Page, inv: Invoice) -> None:
    cur = inv.currency
    for t in inv.taxes:
        page.say(
            f"Umsatzsteuer {t.category or ''} {t.rate if t.rate is not None else '?'} % "
            f"auf {_money(t.basis, cur)}: {_money(t.amount, cur)}",
            9,
        )
    for label, value in (
        ("Summe Positionen / line total", inv.line_net_total),
        ("Nachlässe / allowances", inv.allowance_total),
        ("Zuschläge / charges", inv.charge_total),
        ("Netto / net", inv.net_total),
        ("Steuer / tax", inv.tax_total),
        ("Brutto / gross", inv.gross_total),
        ("Bereits gezahlt / prepaid", inv.prepaid),
    ):
        if value is not None:
            page.say(f"{label}: {_money(value, cur)}", 9)
    page.say(f"Zahlbetrag / amount due: {_money(inv.payable, cur)}", 11, bold=True)


def render_pdf(inv: Invoice, out: Path, report: Report | None = None) -> None:
    """``inv`` as a readable A4 PDF at ``out`` (atomically)."""
    page = _Page(_is_latin1(inv, report))
    word = "Gutschrift / credit note" if inv.kind == "credit_note" else "Rechnung / invoice"
    page.say(f"{word} {inv.number or '(ohne Nummer / no number)'}", 16, bold=True)
    page.say(f"Datum / date: {inv.issue_date or '-'}    fällig / due: {inv.due_date or '-'}", 9)
    refs = [
        f"Käuferreferenz / buyer reference: {inv.buyer_reference}" if inv.buyer_reference else "",
        f"Bestellung / order: {inv.order_reference}" if inv.order_reference else "",
    ]
    for ref in refs:
        if ref:
            page.say(ref, 9)
    page.gap()
    _party(page, "Verkäufer / seller", inv.seller)
    _party(page, "Käufer / buyer", inv.buyer)
    _lines(page, inv)
    page.gap()
    _totals(page, inv)
    page.gap()
    if inv.payment_terms:
        page.say(f"Zahlungsbedingungen / terms: {inv.payment_terms}", 9)
    if inv.iban:
        page.say("IBAN: " + ", ".join(inv.iban), 9)
    if inv.note:
        page.say(inv.note, 8, limit=1000)
    page.say(
        f"E-Rechnung ({inv.syntax.upper()}), Profil: {inv.profile_name or inv.profile or '-'}", 7
    )
    if report is not None:
        page.gap()
        page.say(
            f"Prüfung / validation: {report.legal_status}, {report.format_errors} format "
            f"errors, {report.rule_errors} rule errors",
            9,
            bold=True,
        )
        for finding in report.findings[:50]:
            page.say(f"{finding.kind}/{finding.severity} {finding.code}: {finding.message}", 7)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        page.pdf.output(str(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
