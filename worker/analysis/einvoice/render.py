"""A readable PDF of an XML-only e-invoice: the derived PDF people preview and print.

Seller and buyer, dates and references, the lines, the tax per rate, the totals, the
payment and, when given, what the validation found. Text from the XML is only ever
text: cut, cleaned of control characters, never interpreted (no markup, no markdown).

Fonts: text that is all Latin-1 (most invoices) is set in the core Helvetica, fast and
nothing embedded. Any other script in DejaVu Sans (Debian's fonts-dejavu-core: Latin,
Greek, Cyrillic, Arabic, Hebrew, symbols), and for what DejaVu lacks (Chinese, Japanese,
Korean) a fallback font where one is installed (Droid Sans Fallback, Noto Sans CJK); a
character no font has is shown as "�", never silently dropped. Without DejaVu, the core
Helvetica shows Latin-1 and "?" for the rest. Written to a temp file and renamed into
place.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from decimal import Decimal
from pathlib import Path

from fpdf import FPDF

from worker.analysis.einvoice.model import Invoice, Party, Report

FONT_ROOT = Path("/usr/share/fonts")
FONT_DIRS = (FONT_ROOT / "truetype/dejavu",)  # Debian's fonts-dejavu-core
FALLBACK_FONTS = (  # for the scripts DejaVu lacks (CJK); the first that is installed
    "truetype/droid/DroidSansFallbackFull.ttf",
    "truetype/droid/DroidSansFallback.ttf",
    "opentype/noto/NotoSansCJK-Regular.ttc",
)
MAX_LINES_SHOWN = 2000
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@functools.cache
def unicode_font() -> tuple[Path, Path] | None:
    """DejaVu Sans (regular, bold): in Debian's folder, else anywhere under FONT_ROOT."""
    folders = [*FONT_DIRS, *(f.parent for f in sorted(FONT_ROOT.rglob("DejaVuSans.ttf")))]
    for folder in folders:
        regular, bold = folder / "DejaVuSans.ttf", folder / "DejaVuSans-Bold.ttf"
        if regular.is_file() and bold.is_file():
            return regular, bold
    return None


@functools.cache
def fallback_font() -> Path | None:
    """The first installed font of FALLBACK_FONTS, or None."""
    for name in FALLBACK_FONTS:
        path = FONT_ROOT / name
        if path.is_file():
            return path
    return None


def _lacking(pdf: FPDF, family: str, chars: set[str]) -> set[str]:
    cmap: dict[int, object] = getattr(pdf.fonts[family.lower()], "cmap", {})
    return {c for c in chars if ord(c) not in cmap and not c.isspace()}


def _font(pdf: FPDF, shown: str) -> tuple[str, bool, frozenset[str]]:
    """The font family for the text ``shown``, whether it is Unicode, and the characters
    no font has: the core Helvetica for Latin-1, else DejaVu Sans (and a fallback font
    for the characters DejaVu lacks)."""
    found = None if _is_latin1(shown) else unicode_font()
    if found is None:
        return "Helvetica", False, frozenset()
    pdf.add_font("DejaVu", "", str(found[0]))
    pdf.add_font("DejaVu", "B", str(found[1]))
    lacking = _lacking(pdf, "DejaVu", set(shown))
    fallback = fallback_font() if lacking else None
    if fallback is not None:
        pdf.add_font("Fallback", "", str(fallback))
        pdf.set_fallback_fonts(["Fallback"], exact_match=False)
        lacking = _lacking(pdf, "Fallback", lacking)
    return "DejaVu", True, frozenset(lacking)


class _Page:
    def __init__(self, shown: str) -> None:
        self.pdf = FPDF(format="A4")
        self.pdf.set_auto_page_break(True, margin=15)
        self.pdf.add_page()
        self.family, self.unicode, self.lacking = _font(self.pdf, shown)

    def text(self, value: object, limit: int = 300) -> str:
        """``value`` as one line of text the font can show, at most ``limit`` long."""
        text = " ".join(_CONTROL.sub(" ", str(value)).split())
        text = text if len(text) <= limit else text[: limit - 1] + "…"
        if self.lacking:
            text = "".join("\ufffd" if c in self.lacking else c for c in text)
        if not self.unicode:
            text = text.replace("…", "...").replace("≠", "!=")
            text = text.encode("latin-1", "replace").decode("latin-1")
        return text

    def say(self, value: object, size: int = 10, bold: bool = False, limit: int = 300) -> None:
        self.pdf.set_font(self.family, "B" if bold else "", size)
        self.pdf.multi_cell(0, size * 0.5, self.text(value, limit), new_x="LMARGIN", new_y="NEXT")

    def fit(self, text: str, width: float) -> str:
        """``text`` cut to fit a table cell ``width`` mm wide (with "…")."""
        room = width - 2 * self.pdf.c_margin
        if self.pdf.get_string_width(text) <= room:
            return text
        mark = "…" if self.unicode else "..."
        while text and self.pdf.get_string_width(text + mark) > room:
            text = text[: max(0, min(len(text) - 1, int(len(text) * 0.9)))]
        return text + mark

    def row(self, cells: list[tuple[object, float, str]], bold: bool = False) -> None:
        self.pdf.set_font(self.family, "B" if bold else "", 8)
        for value, width, align in cells:
            self.pdf.cell(width, 5, self.fit(self.text(value, 80), width), align=align)
        self.pdf.ln(5)

    def gap(self, mm: float = 3) -> None:
        self.pdf.ln(mm)


def _shown(inv: Invoice, report: Report | None) -> str:
    """All the text from the invoice and the report the rendering may show (for the
    choice of fonts)."""
    texts = [str(v) for v in inv.as_fields().values() if v is not None]
    texts += [line.name or "" for line in inv.lines[:MAX_LINES_SHOWN]]
    texts += [line.id or "" for line in inv.lines[:MAX_LINES_SHOWN]]
    texts += [f.message for f in (report.findings if report else ())]
    return _CONTROL.sub(" ", "".join(texts))


def _is_latin1(text: str) -> bool:
    """Is ``text`` Latin-1 (the core fonts' range; "…" and "≠" have a Latin-1 stand-in)?"""
    try:
        text.replace("…", "").replace("≠", "").encode("latin-1")
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
    page = _Page(_shown(inv, report))
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
