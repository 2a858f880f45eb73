"""Reading EN 16931 invoices (worker/analysis/einvoice/read.py) from real XML: UBL 2.1
made like KoSIT's examples, CII written by drafthorse, hand-written documents that use
the rarer fields (allowances, charges, prepaid amounts, a tax total in two currencies,
tax numbers, order references), credit notes, garbage values and hostile XML."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from decimal import Decimal

import pytest

from ingestd import xmlsafe
from tests.fixtures.einvoices import (
    IBAN,
    LEITWEG_ID,
    cii_xml,
    edit,
    hostile_xml,
    rich_cii_xml,
    rich_ubl_xml,
    ubl_xml,
)
from worker.analysis.einvoice.model import Invoice, name_of_profile
from worker.analysis.einvoice.read import (
    MAX_LINES,
    MAX_TEXT,
    NotAnInvoice,
    read_invoice,
    read_root,
    syntax_of,
)


def _read(make: Callable[..., bytes], **kw: object) -> Invoice:
    return read_invoice(make(**kw))


@pytest.mark.parametrize(("syntax", "make"), [("ubl", ubl_xml), ("cii", cii_xml)])
def test_every_field_of_the_sample_is_read_in_both_syntaxes(
    syntax: str, make: Callable[..., bytes]
) -> None:
    """The same invoice as UBL and as CII reads into the same fields."""
    inv = _read(make, profile="xrechnung")
    assert (inv.syntax, inv.kind, inv.type_code) == (syntax, "invoice", "380")
    assert inv.profile == "urn:cen.eu:en16931:2017#compliant#urn:xeinkauf.de:kosit:xrechnung_3.0"
    assert inv.profile_name == "XRechnung 3.0"
    assert (inv.number, inv.currency) == ("RE-2026-4711", "EUR")
    assert (inv.issue_date, inv.due_date) == (
        datetime.date(2026, 11, 20),
        datetime.date(2026, 12, 20),
    )
    s = inv.seller
    assert (s.name, s.vat_id, s.tax_number) == ("Stadtwerke Musterstadt GmbH", "DE123456789", None)
    assert (s.street, s.postcode, s.city, s.country) == (
        "Hauptstraße 1",
        "12345",
        "Musterstadt",
        "DE",
    )
    assert s.address == "Hauptstraße 1, 12345 Musterstadt, DE"
    b = inv.buyer
    assert (b.name, b.vat_id, b.country) == ("ACME Buchhaltung GmbH", "DE987654321", "DE")
    assert b.address == "Am Markt 5, 54321 Beispielstadt, DE"
    assert (inv.buyer_reference, inv.order_reference) == (LEITWEG_ID, None)
    assert (inv.line_net_total, inv.net_total, inv.tax_total) == (
        Decimal("100.00"),
        Decimal("100.00"),
        Decimal("19.00"),
    )
    assert inv.gross_total == inv.payable == Decimal("119.00")
    assert (inv.allowance_total, inv.charge_total, inv.prepaid) == (None, None, None)
    [tax] = inv.taxes
    assert (tax.category, tax.rate, tax.basis, tax.amount) == (
        "S",
        Decimal("19"),
        Decimal("100.00"),
        Decimal("19.00"),
    )
    assert [(li.id, li.quantity, li.unit_price, li.net) for li in inv.lines] == [
        ("1", Decimal("2"), Decimal("40.00"), Decimal("80.00")),
        ("2", Decimal("1"), Decimal("20.00"), Decimal("20.00")),
    ]
    assert [li.name for li in inv.lines] == ["Strom Oktober 2026, Grundpreis", "Zählermiete"]
    assert inv.iban == (IBAN,)
    assert inv.payment_terms is not None and inv.payment_terms.startswith(
        "Zahlbar innerhalb von 30 Tagen"
    )
    assert (inv.unreadable, inv.lines_not_read) == ((), 0)


def test_the_seller_email_is_read_from_the_ubl_endpoint() -> None:
    """UBL names the seller's electronic address as EndpointID with scheme EM."""
    assert _read(ubl_xml).seller.email == "rechnung@stadtwerke-musterstadt.example"


def test_the_rarer_ubl_fields_are_read() -> None:
    """Allowances, charges, prepaid, the tax total in the document's currency (not the
    USD one before it), a tax number, PartyName, an order reference, the due date in
    PaymentMeans, two IBANs, whitespace and a time zone around values."""
    inv = read_invoice(rich_ubl_xml())
    assert inv.number == "R-77 / 2026"  # whitespace collapsed
    assert inv.issue_date == datetime.date(2026, 11, 20)
    assert inv.due_date == datetime.date(2027, 1, 5)
    assert inv.note == "Danke für Ihren Auftrag"
    assert (inv.buyer_reference, inv.order_reference) == ("991-12345-67", "PO-4711")
    assert (inv.seller.name, inv.seller.vat_id, inv.seller.tax_number) == (
        "Bäckerei Korn",
        "DE111111111",
        "201/113/40209",
    )
    assert inv.seller.email == "korn@example.org"
    assert (inv.buyer.name, inv.buyer.country, inv.buyer.address) == (
        "Wien Kantine GmbH",
        "AT",
        "AT",
    )
    amounts = (
        inv.line_net_total,
        inv.allowance_total,
        inv.charge_total,
        inv.net_total,
        inv.tax_total,
        inv.gross_total,
        inv.prepaid,
        inv.payable,
    )
    assert amounts == tuple(
        Decimal(v)
        for v in ("100.00", "10.00", "5.00", "95.00", "18.05", "113.05", "13.05", "100.00")
    )
    assert inv.iban == ("DE75512108001245126199", "AT611904300234573201")
    assert inv.payment_terms == "2 % Skonto bis 2026-11-30"
    assert inv.lines[1].quantity == Decimal("2.5") and inv.lines[1].name == "Brötchen"
    assert inv.profile_name == "EN 16931"


def test_the_rarer_cii_fields_are_read() -> None:
    """A CII credit note (381) with a tax number, an order reference, a note, the tax
    total in the invoice's currency (not the CHF one), allowances, charges, prepaid."""
    inv = read_invoice(rich_cii_xml())
    assert (inv.syntax, inv.kind, inv.type_code, inv.number) == (
        "cii",
        "credit_note",
        "381",
        "GS-9",
    )
    assert inv.profile_name == "Factur-X EXTENDED"
    assert inv.issue_date == datetime.date(2026, 12, 1) and inv.due_date is None
    assert (inv.seller.tax_number, inv.seller.vat_id, inv.seller.email) == (
        "201/113/40209",
        None,
        "kg@example.org",
    )
    assert inv.buyer.vat_id == "ATU12345678"
    assert (inv.order_reference, inv.note, inv.payment_terms) == (
        "PO-9",
        "Gutschrift zu RE-1",
        "verrechnet",
    )
    assert (inv.tax_total, inv.allowance_total, inv.charge_total) == (
        Decimal("1.40"),
        Decimal("3.00"),
        Decimal("1.00"),
    )
    assert (inv.prepaid, inv.payable) == (Decimal("21.40"), Decimal("0.00"))
    assert [(t.rate, t.basis, t.amount) for t in inv.taxes] == [
        (Decimal("7.00"), Decimal("20.00"), Decimal("1.40"))
    ]
    assert inv.lines == () and inv.iban == ()


def test_credit_notes_in_both_syntaxes() -> None:
    """A UBL CreditNote root, and CII type codes 381/396/261/262/532, are credit notes;
    other codes are invoices."""
    ubl = read_invoice(ubl_xml(credit_note=True))
    assert (ubl.kind, ubl.type_code, ubl.syntax) == ("credit_note", "381", "ubl")
    assert [li.quantity for li in ubl.lines] == [Decimal("2"), Decimal("1")]  # CreditedQuantity
    assert ubl.gross_total == Decimal("119.00")
    for code in ("381", "396", "261", "262", "532"):
        assert _read(cii_xml, type_code=code).kind == "credit_note", code
    for code in ("380", "384", "389", "875"):
        assert _read(cii_xml, type_code=code).kind == "invoice", code


def test_the_root_decides_the_syntax() -> None:
    """Namespace and local name together: a CreditNote in the Invoice namespace, or an
    Invoice without one, is no invoice."""
    assert syntax_of(xmlsafe.parse(ubl_xml())) == "ubl"
    assert syntax_of(xmlsafe.parse(ubl_xml(credit_note=True))) == "ubl"
    assert syntax_of(xmlsafe.parse(cii_xml())) == "cii"
    wrong = (
        b'<CreditNote xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"/>',
        b"<Invoice/>",
        b'<CrossIndustryInvoice xmlns="urn:ferd:CrossIndustryDocument:invoice:1p0"/>',
    )
    for data in wrong:
        root = xmlsafe.parse(data)
        assert syntax_of(root) is None
        with pytest.raises(NotAnInvoice, match="not a UBL or CII invoice"):
            read_root(root)


@pytest.mark.parametrize(
    ("profile", "name"),
    [
        ("urn:cen.eu:en16931:2017#compliant#urn:xeinkauf.de:kosit:xrechnung_3.0", "XRechnung 3.0"),
        ("urn:cen.eu:en16931:2017#compliant#urn:xeinkauf.de:kosit:xrechnung_2.3", "XRechnung 2.3"),
        (
            "urn:cen.eu:en16931:2017#compliant#urn:xeinkauf.de:kosit:xrechnung_3.0"
            "#conformant#urn:xeinkauf.de:kosit:extension:xrechnung_3.0",
            "XRechnung 3.0 Extension",
        ),
        ("urn:cen.eu:en16931:2017", "EN 16931"),
        ("urn:cen.eu:en16931:2017#compliant#urn:factur-x.eu:1p0:basic", "Factur-X BASIC"),
        ("urn:factur-x.eu:1p0:basicwl", "Factur-X BASIC WL"),
        ("urn:factur-x.eu:1p0:minimum", "Factur-X MINIMUM"),
        ("urn:cen.eu:en16931:2017#conformant#urn:factur-x.eu:1p0:extended", "Factur-X EXTENDED"),
        ("urn:cen.eu:en16931:2017#compliant#urn:zugferd.de:2p0:basic", "ZUGFeRD BASIC"),
        (
            "urn:cen.eu:en16931:2017#compliant#urn:fdc:peppol.eu:2017:poacc:billing:3.0",
            "Peppol BIS Billing 3.0",
        ),
        ("urn:example:own-guideline", "urn:example:own-guideline"),
        (None, None),
        ("  ", None),
    ],
)
def test_profile_names(profile: str | None, name: str | None) -> None:
    """The specification identifier (BT-24) as a short human name."""
    assert name_of_profile(profile) == name


def test_the_fields_are_json_for_the_database_and_webhooks() -> None:
    """as_fields: amounts as exact strings, dates ISO, parties nested; json.dumps takes it."""
    fields = _read(ubl_xml).as_fields()
    again = json.loads(json.dumps(fields))
    assert again == fields
    assert (fields["gross_total"], fields["tax_total"], fields["issue_date"]) == (
        "119.00",
        "19.00",
        "2026-11-20",
    )
    assert fields["seller"]["address"] == "Hauptstraße 1, 12345 Musterstadt, DE"
    assert fields["taxes"] == [
        {"category": "S", "rate": "19", "basis": "100.00", "amount": "19.00"}
    ]
    assert (fields["line_count"], fields["iban"], fields["kind"]) == (2, [IBAN], "invoice")
    assert fields["profile_name"] == "XRechnung 3.0" and fields["unreadable"] == []


def test_garbage_values_are_none_and_named_never_raised() -> None:
    """Amounts and dates that are no xsd:decimal/xsd:date (a letter for a digit, a
    comma, NaN, an exponent, February 31st, a German date) are None and named."""
    inv = read_invoice(hostile_xml()["garbage_values"])
    assert (inv.gross_total, inv.payable, inv.net_total) == (None, None, None)
    assert (inv.issue_date, inv.due_date) == (None, None)
    named = " ".join(inv.unreadable)
    for what in ("gross total", "amount due", "net total", "issue date", "due date"):
        assert what in named, what
    assert inv.tax_total == Decimal("19.00")  # the rest is read as ever


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("119.00", Decimal("119.00")),
        (" \n 119.00\t", Decimal("119.00")),
        ("-5", Decimal("-5")),
        ("+.5", Decimal("0.5")),
        ("1 190.00", Decimal("1190.00")),
        ("119,00", None),
        ("1e3", None),
        ("Infinity", None),
        ("1_000", None),
        ("١٢٣", None),  # Arabic-Indic digits: Python's Decimal takes them, XSD does not
        ("9" * 20, None),
        ("", None),
    ],
)
def test_amount_text(text: str, value: Decimal | None) -> None:
    """An amount is xsd:decimal text; whitespace around (or between digit groups) is
    tolerated, anything else is unreadable (empty is absent, not unreadable)."""
    data = edit(ubl_xml(), {"cac:LegalMonetaryTotal/cbc:PayableAmount": text})
    inv = read_invoice(data)
    assert inv.payable == value
    assert bool(inv.unreadable) == (value is None and text != "")


def test_text_is_cleaned_and_cut() -> None:
    """Control characters out, whitespace collapsed, at most MAX_TEXT characters, also
    for text where markup would be: it is only ever text."""
    name = "A\x7fB\u009bC\u0085 \t\n D <b>&amp;</b> " + "x" * 5000  # C1 controls are XML
    data = edit(ubl_xml(), {"cac:AccountingSupplierParty//cbc:RegistrationName": name})
    seller = read_invoice(data).seller.name
    assert seller is not None and len(seller) == MAX_TEXT
    assert seller.startswith("A B C D <b>&amp;</b> xxx")


def test_lines_beyond_the_bound_are_counted_not_read() -> None:
    """100,000 lines are read, the ones beyond only counted (line_count has them all)."""
    data = ubl_xml()
    at = data.index(b"<cac:InvoiceLine>")
    line = (
        b"<cac:InvoiceLine><cbc:ID>n</cbc:ID>"
        b'<cbc:LineExtensionAmount currencyID="EUR">0</cbc:LineExtensionAmount>'
        b"</cac:InvoiceLine>"
    )
    inv = read_invoice(data[:at] + line * MAX_LINES + data[at:])
    assert len(inv.lines) == MAX_LINES and inv.lines_not_read == 2
    assert inv.as_fields()["line_count"] == MAX_LINES + 2


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("billion_laughs", "DTD"),
        ("xxe_file", "DTD"),
        ("external_dtd", "DTD"),
        ("deep", "depth"),
        ("truncated", "not well-formed"),
        ("not_an_invoice", "not a UBL or CII invoice"),
    ],
)
def test_hostile_xml_is_refused_fast_with_the_reason(name: str, reason: str) -> None:
    """Entities are never expanded or fetched, nesting is bounded, the reason is said;
    /etc/passwd (XXE) never shows in the error."""
    started = time.monotonic()
    with pytest.raises(NotAnInvoice) as err:
        read_invoice(hostile_xml()[name])
    assert reason in str(err.value)
    assert "root:x:" not in str(err.value) and "lol" * 10 not in str(err.value)
    assert time.monotonic() - started < 5
    if reason != "not a UBL or CII invoice":
        assert isinstance(err.value.__cause__, xmlsafe.HostileXml)


def test_too_large_xml_is_refused_before_parsing() -> None:
    """More than xmlsafe's bound is refused by its size alone."""
    data = b" " * (xmlsafe.MAX_XML_BYTES + 1)
    with pytest.raises(NotAnInvoice, match="bytes"):
        read_invoice(data)
