"""The invoice XML inside hybrid PDFs (worker/analysis/einvoice/embedded.py) and the
readable PDF of an XML invoice (render.py), on real files: Factur-X PDFs written by the
factur-x package, PDFs with attachments and annotations made with pikepdf, encrypted,
damaged and bomb-like PDFs; rendered PDFs read back with pdfium."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import zlib
from decimal import Decimal
from pathlib import Path

import pikepdf
import pypdfium2  # type: ignore[import-untyped]
import pytest
from fpdf import FPDF

from tests.fixtures.einvoices import cii_xml, facturx_pdf, hostile_xml, ubl_xml
from worker.analysis.einvoice.embedded import (
    EMBEDDED_NAMES,
    EmbeddedTooLarge,
    embedded_invoice_xml,
    pdf_text_has_amount,
)
from worker.analysis.einvoice.model import Line
from worker.analysis.einvoice.read import read_invoice
from worker.analysis.einvoice.render import MAX_LINES_SHOWN, fallback_font, render_pdf
from worker.analysis.einvoice.validate import validate


def _text(pdf: Path) -> str:
    """All the text pdfium reads from ``pdf``."""
    doc = pypdfium2.PdfDocument(str(pdf))
    try:
        return "\n".join(doc[i].get_textpage().get_text_range() for i in range(len(doc)))
    finally:
        doc.close()


def _pages(pdf: Path) -> int:
    doc = pypdfium2.PdfDocument(str(pdf))
    try:
        return len(doc)
    finally:
        doc.close()


def _plain_pdf(path: Path, text: str = "Ein Brief, keine Rechnung") -> Path:
    """An ordinary one-page PDF written by fpdf2."""
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.cell(0, 10, text)
    pdf.output(str(path))
    return path


def _with_attachment(src: Path, out: Path, name: str, data: bytes) -> Path:
    """``src`` with ``data`` embedded as ``name`` in the document's EmbeddedFiles."""
    with pikepdf.open(src) as doc:
        doc.attachments[name] = pikepdf.AttachedFileSpec(doc, data, filename=name)
        doc.save(out)
    return out


def _digest(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


# -- embedded XML --------------------------------------------------------------------


def test_the_xml_of_a_factur_x_pdf_is_found_byte_for_byte(tmp_path: Path) -> None:
    """factur-x's hybrid PDF: factur-x.xml, the very bytes embedded; the PDF untouched;
    its visible total is there, in German."""
    xml = cii_xml()
    pdf = facturx_pdf(tmp_path / "fx.pdf", xml)
    before = _digest(pdf)
    assert embedded_invoice_xml(pdf) == ("factur-x.xml", xml)
    assert _digest(pdf) == before
    inv = read_invoice(xml)
    assert inv.gross_total is not None and pdf_text_has_amount(_text(pdf), inv.gross_total)


def test_a_visible_total_that_disagrees_is_noticed(tmp_path: Path) -> None:
    """The XML is the truth; a page showing another total does not show the XML's."""
    pdf = facturx_pdf(tmp_path / "fx.pdf", cii_xml(), visible_total="191,00")
    found = embedded_invoice_xml(pdf)
    assert found is not None
    gross = read_invoice(found[1]).gross_total
    assert gross == Decimal("119.00") and not pdf_text_has_amount(_text(pdf), gross)


@pytest.mark.parametrize("name", [*EMBEDDED_NAMES, "FACTUR-X.XML", "rechnung-4711.xml"])
def test_an_invoice_xml_is_found_under_any_standard_or_xml_name(tmp_path: Path, name: str) -> None:
    """The standards' names (any case) and any other .xml whose root is an invoice."""
    xml = ubl_xml()
    pdf = _with_attachment(_plain_pdf(tmp_path / "p.pdf"), tmp_path / "a.pdf", name, xml)
    assert embedded_invoice_xml(pdf) == (name, xml)


def test_the_standard_name_wins_over_other_xml(tmp_path: Path) -> None:
    """With an other invoice-like .xml attached too, factur-x.xml is the one taken."""
    pdf = _with_attachment(_plain_pdf(tmp_path / "p.pdf"), tmp_path / "a.pdf", "a.xml", ubl_xml())
    pdf = _with_attachment(pdf, tmp_path / "b.pdf", "factur-x.xml", cii_xml())
    assert embedded_invoice_xml(pdf) == ("factur-x.xml", cii_xml())


def test_pdfs_without_an_invoice_xml_have_none(tmp_path: Path) -> None:
    """An ordinary PDF, one with a non-invoice XML or a non-XML file attached, one with
    hostile XML attached: None, never an error."""
    plain = _plain_pdf(tmp_path / "plain.pdf")
    assert embedded_invoice_xml(plain) is None
    for i, (name, data) in enumerate(
        [
            ("factur-x.xml", b"<note><to>x</to></note>"),
            ("factur-x.xml", b"not xml at all"),
            ("invoice.txt", ubl_xml()),
            ("order-x.xml", hostile_xml()["not_an_invoice"]),
            ("data.xml", hostile_xml()["truncated"][:30]),
        ]
    ):
        pdf = _with_attachment(plain, tmp_path / f"o{i}.pdf", name, data)
        assert embedded_invoice_xml(pdf) is None, name


def test_unreadable_files_are_none(tmp_path: Path) -> None:
    """A missing file, a file that is no PDF, a truncated PDF, a PDF encrypted with a
    user password: None (the caller analyses the PDF as any other)."""
    pdf = facturx_pdf(tmp_path / "fx.pdf", cii_xml())
    assert embedded_invoice_xml(tmp_path / "missing.pdf") is None
    (tmp_path / "text.pdf").write_bytes(b"hello, not a PDF")
    assert embedded_invoice_xml(tmp_path / "text.pdf") is None
    (tmp_path / "cut.pdf").write_bytes(pdf.read_bytes()[:400])
    assert embedded_invoice_xml(tmp_path / "cut.pdf") is None
    with pikepdf.open(pdf) as doc:
        doc.save(tmp_path / "locked.pdf", encryption=pikepdf.Encryption(user="secret", owner="o"))
    before = _digest(tmp_path / "locked.pdf")
    assert embedded_invoice_xml(tmp_path / "locked.pdf") is None
    assert _digest(tmp_path / "locked.pdf") == before


def test_a_file_attachment_annotation_is_looked_at_too(tmp_path: Path) -> None:
    """An invoice XML attached to a page (a /FileAttachment annotation) rather than to
    the document is found as well."""
    xml = ubl_xml()
    with pikepdf.open(_plain_pdf(tmp_path / "p.pdf")) as doc:
        spec = pikepdf.AttachedFileSpec(doc, xml, filename="xrechnung.xml")
        annot = doc.make_indirect(
            pikepdf.Dictionary(
                Type=pikepdf.Name.Annot,
                Subtype=pikepdf.Name.FileAttachment,
                Rect=[10, 10, 30, 30],
                FS=spec.obj,
            )
        )
        doc.pages[0].obj["/Annots"] = pikepdf.Array([annot])
        doc.save(tmp_path / "annot.pdf")
    with pikepdf.open(tmp_path / "annot.pdf") as doc:
        assert len(doc.attachments) == 0  # not in the document's EmbeddedFiles
    assert embedded_invoice_xml(tmp_path / "annot.pdf") == ("xrechnung.xml", xml)


def _bomb(tmp_path: Path, name: str, root: bytes, size: int) -> Path:
    """A PDF with ``name`` attached: ``root`` followed by ``size`` spaces, deflated to a
    few kilobytes (the declared /Size says 100 bytes: a lie)."""
    body = zlib.compress(root + b" " * size, 9)
    with pikepdf.open(_plain_pdf(tmp_path / "p.pdf")) as doc:
        spec = pikepdf.AttachedFileSpec(doc, b"<x/>", filename=name)
        stream = spec.obj.EF.F
        stream.write(body, filter=pikepdf.Name.FlateDecode)
        stream.Params.Size = 100
        doc.attachments[name] = spec
        out = tmp_path / f"bomb-{name}.pdf"
        doc.save(out)
    assert out.stat().st_size < 200_000
    return out


def test_an_invoice_xml_over_the_bound_is_too_large_not_inflated(tmp_path: Path) -> None:
    """A CII root with 20 MiB of padding, deflated: EmbeddedTooLarge at the 16 MiB bound,
    however small the compressed stream and whatever /Size claims."""
    root = (
        b"<rsm:CrossIndustryInvoice "
        b'xmlns:rsm="urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100">'
    )
    pdf = _bomb(tmp_path, "factur-x.xml", root, 20 * 1024 * 1024)
    with pytest.raises(EmbeddedTooLarge, match=r"factur-x\.xml"):
        embedded_invoice_xml(pdf)
    small = _with_attachment(_plain_pdf(tmp_path / "q.pdf"), tmp_path / "s.pdf", "f.xml", cii_xml())
    with pytest.raises(EmbeddedTooLarge):
        embedded_invoice_xml(small, max_bytes=1000)


def test_a_large_attachment_that_is_no_invoice_is_passed_over(tmp_path: Path) -> None:
    """Only an invoice's root makes the size matter: a big other XML is just not it."""
    pdf = _bomb(tmp_path, "telemetry.xml", b"<log>", 20 * 1024 * 1024)
    assert embedded_invoice_xml(pdf) is None


@pytest.mark.parametrize(
    ("text", "amount", "shown"),
    [
        ("Summe 1.234,56 €", "1234.56", True),
        ("1234,56", "1234.56", True),
        ("Total: 1,234.56", "1234.56", True),
        ("EUR 1234.56", "1234.56", True),
        ("1\u202f234,56 EUR", "1234.56", True),
        ("1 234,56 EUR", "1234.56", True),
        ("CHF 1'234.56", "1234.56", True),
        ("Gesamtbetrag 119,00 EUR", "119", True),
        ("Gesamtbetrag -119,00 EUR", "-119.00", True),
        ("1 x 119,00", "119.00", True),
        ("12.345.678,90", "12345678.90", True),
        ("1119,00", "119.00", False),
        ("11,90", "119.00", False),
        ("119,50", "119.00", False),
        ("119,001", "119.00", False),
        ("1.190,00", "119.00", False),
        ("", "119.00", False),
        ("NaN", "NaN", False),
        ("Infinity", "Infinity", False),
    ],
)
def test_amounts_in_german_and_english_text(text: str, amount: str, shown: bool) -> None:
    """Thousands grouped by dot, comma, space or apostrophe, the decimal comma or point;
    no digit may run on before or after."""
    assert pdf_text_has_amount(text, Decimal(amount)) is shown


# -- rendering -----------------------------------------------------------------------


@pytest.mark.parametrize("make", [ubl_xml, cii_xml])
def test_the_rendering_shows_the_invoice(tmp_path: Path, make: object) -> None:
    """Number, dates, seller and buyer with address and VAT id, the Leitweg-ID, the
    lines, the tax, the totals, the payment and the profile are in the PDF's text."""
    data = make(profile="xrechnung")  # type: ignore[operator]
    inv = read_invoice(data)
    out = tmp_path / "invoice.pdf"
    render_pdf(inv, out)
    assert out.read_bytes().startswith(b"%PDF-")
    text = _text(out)
    for expected in (
        "Rechnung",
        "RE-2026-4711",
        "2026-11-20",
        "2026-12-20",
        "Stadtwerke Musterstadt GmbH",
        "Hauptstraße 1, 12345 Musterstadt, DE",
        "DE123456789",
        "ACME Buchhaltung GmbH",
        "04011000-12345-34",
        "Zählermiete",
        "80.00",
        "100.00 EUR",
        "19.00 EUR",
        "119.00 EUR",
        "DE02120300000000202051",
        "Zahlbar innerhalb von 30 Tagen",
        "XRechnung 3.0",
    ):
        assert expected in text, expected
    assert "Prüfung" not in text  # no report given, no validation section
    assert [p.name for p in tmp_path.iterdir()] == ["invoice.pdf"]


def test_a_credit_note_and_the_validation_are_shown(tmp_path: Path) -> None:
    """ "Gutschrift" for a credit note; with a report, its findings and legal status."""
    data = ubl_xml(credit_note=True, gross=Decimal("120.00"))
    inv = read_invoice(data)
    out = tmp_path / "credit.pdf"
    render_pdf(inv, out, validate(inv, data))
    text = _text(out)
    assert "Gutschrift" in text and "RE-2026-4711" in text
    assert "e-invoice" in text and "BR-CO-15" in text and "120.00" in text


def test_an_existing_file_is_replaced_whole(tmp_path: Path) -> None:
    """Written to a temp file and renamed: the old file is replaced, no temp left."""
    out = tmp_path / "invoice.pdf"
    out.write_bytes(b"old")
    render_pdf(read_invoice(cii_xml()), out)
    assert out.read_bytes().startswith(b"%PDF-") and os.listdir(tmp_path) == ["invoice.pdf"]


def test_hostile_text_is_only_text(tmp_path: Path) -> None:
    """A 5,000-character name is cut, control characters are gone, markup is printed as
    it is, other scripts are shown (DejaVu Sans when the text is not Latin-1; Chinese and
    Japanese in a fallback font where one is installed, else each character as "�")."""
    seller = "株式会社 Überlang\x7f\u009b <b>**fett**</b> {{x}} " + "X" * 5000
    data = ubl_xml(seller=seller)
    inv = read_invoice(data)
    inv = dataclasses.replace(inv, note="Привет мир " * 300)
    out = tmp_path / "invoice.pdf"
    render_pdf(inv, out, validate(inv, data))
    text = _text(out)
    assert "RE-2026-4711" in text and "119.00" in text
    cjk = "株式会社" if fallback_font() is not None else "\ufffd" * 4
    assert f"{cjk} Überlang <b>**fett**</b> {{{{x}}}}" in text
    assert "XXXX" in text and "X" * 400 not in text
    assert "Привет мир" in text
    assert "\x7f" not in text and "\u009b" not in text


def test_latin1_text_in_the_core_font(tmp_path: Path) -> None:
    """An invoice whose text is all Latin-1 needs no embedded font; umlauts are kept."""
    out = tmp_path / "invoice.pdf"
    render_pdf(read_invoice(ubl_xml()), out)
    with pikepdf.open(out) as doc:
        fonts = {
            str(f.get("/BaseFont")) for page in doc.pages for f in page.Resources.Font.values()
        }
    assert any("Helvetica" in f for f in fonts) and not any("DejaVu" in f for f in fonts)
    assert "Zählermiete" in _text(out)


def test_at_most_the_first_lines_are_rendered(tmp_path: Path) -> None:
    """Past MAX_LINES_SHOWN lines the rendering says how many more there are."""
    inv = read_invoice(cii_xml())
    lines = tuple(
        Line(str(i), f"Posten {i}", Decimal(1), Decimal("0.01"), Decimal("0.01"))
        for i in range(MAX_LINES_SHOWN + 7)
    )
    inv = dataclasses.replace(inv, lines=lines, lines_not_read=3)
    out = tmp_path / "many.pdf"
    render_pdf(inv, out)
    text = _text(out)
    assert f"Posten {MAX_LINES_SHOWN - 1} 1 0.01" in text
    assert f"Posten {MAX_LINES_SHOWN} " not in text
    assert "10 more lines" in text
    assert _pages(out) > 10


def test_an_invoice_with_nothing_but_a_syntax_renders(tmp_path: Path) -> None:
    """Every field empty (what garbage leaves): still a PDF saying it has no number."""
    inv = read_invoice(hostile_xml()["garbage_values"])
    empty = dataclasses.replace(
        inv,
        number=None,
        lines=(),
        taxes=(),
        iban=(),
        seller=dataclasses.replace(inv.seller, name=None),
    )
    out = tmp_path / "empty.pdf"
    render_pdf(empty, out, validate(empty))
    assert "no number" in _text(out)
