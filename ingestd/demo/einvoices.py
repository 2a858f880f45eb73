"""Sample e-invoices for the demo, the README walkthrough and ``ingestd sample-einvoice``.

The first hour with a new appliance needs the documents an accounting department gets:
an XRechnung as UBL or CII XML, and a ZUGFeRD/Factur-X PDF (a readable PDF with the CII
XML embedded, written by the ``factur-x`` package). The XML follows EN 16931 and the
structure of KoSIT's XRechnung examples: seller and buyer with address and VAT id, the
Leitweg-ID as buyer reference, two lines, 19 % VAT, payment by transfer.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from lxml import etree

XRECHNUNG = "urn:cen.eu:en16931:2017#compliant#urn:xeinkauf.de:kosit:xrechnung_3.0"
EN16931 = "urn:cen.eu:en16931:2017"
PEPPOL_PROCESS = "urn:fdc:peppol.eu:2017:poacc:billing:01:1.0"

UBL_INVOICE = "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"
CAC = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
CBC = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"
RSM = "urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100"
RAM = "urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100"
UDT = "urn:un:unece:uncefact:data:standard:UnqualifiedDataType:100"
QDT = "urn:un:unece:uncefact:data:standard:QualifiedDataType:100"


@dataclass(frozen=True)
class Party:
    name: str
    street: str
    postcode: str
    city: str
    country: str = "DE"
    vat_id: str | None = None
    email: str | None = None


@dataclass(frozen=True)
class Line:
    name: str
    quantity: Decimal
    price: Decimal

    @property
    def net(self) -> Decimal:
        return (self.quantity * self.price).quantize(Decimal("0.01"))


SELLER = Party(
    "Stadtwerke Musterstadt GmbH",
    "Hauptstraße 1",
    "12345",
    "Musterstadt",
    vat_id="DE123456789",
    email="rechnung@stadtwerke-musterstadt.example",
)
BUYER = Party("ACME Buchhaltung GmbH", "Am Markt 5", "54321", "Beispielstadt", vat_id="DE987654321")


@dataclass(frozen=True)
class SampleInvoice:
    """One invoice's data; the totals follow from the lines and the rate."""

    number: str = "RE-2026-4711"
    issued: datetime.date = datetime.date(2026, 11, 20)
    due: datetime.date = datetime.date(2026, 12, 20)
    seller: Party = SELLER
    buyer: Party = BUYER
    buyer_reference: str = "04011000-12345-34"
    lines: Sequence[Line] = field(
        default_factory=lambda: (
            Line("Strom Oktober 2026, Grundpreis", Decimal("2"), Decimal("40.00")),
            Line("Zählermiete", Decimal("1"), Decimal("20.00")),
        )
    )
    rate: Decimal = Decimal("19")
    currency: str = "EUR"
    iban: str = "DE02120300000000202051"
    terms: str = "Zahlbar innerhalb von 30 Tagen ohne Abzug"
    profile: str = XRECHNUNG

    @property
    def net(self) -> Decimal:
        return sum((line.net for line in self.lines), Decimal("0.00"))

    @property
    def tax(self) -> Decimal:
        return (self.net * self.rate / 100).quantize(Decimal("0.01"))

    @property
    def gross(self) -> Decimal:
        return self.net + self.tax


def _sub(parent: Any, ns: str, tag: str, text: object = None, **attrs: str) -> Any:
    el = etree.SubElement(parent, f"{{{ns}}}{tag}", attrs)
    if text is not None:
        el.text = str(text)
    return el


def _ubl_party(parent: Any, tag: str, p: Party) -> None:
    party = _sub(_sub(parent, CAC, tag), CAC, "Party")
    if p.email:
        _sub(party, CBC, "EndpointID", p.email, schemeID="EM")
    _sub(_sub(party, CAC, "PartyName"), CBC, "Name", p.name)
    addr = _sub(party, CAC, "PostalAddress")
    _sub(addr, CBC, "StreetName", p.street)
    _sub(addr, CBC, "CityName", p.city)
    _sub(addr, CBC, "PostalZone", p.postcode)
    _sub(_sub(addr, CAC, "Country"), CBC, "IdentificationCode", p.country)
    if p.vat_id:
        scheme = _sub(party, CAC, "PartyTaxScheme")
        _sub(scheme, CBC, "CompanyID", p.vat_id)
        _sub(_sub(scheme, CAC, "TaxScheme"), CBC, "ID", "VAT")
    _sub(_sub(party, CAC, "PartyLegalEntity"), CBC, "RegistrationName", p.name)


def ubl_xml(inv: SampleInvoice | None = None) -> bytes:
    """The invoice as a UBL 2.1 ``Invoice`` (XRechnung UBL)."""
    inv = inv or SampleInvoice()
    cur = {"currencyID": inv.currency}
    root = etree.Element(
        f"{{{UBL_INVOICE}}}Invoice", nsmap={None: UBL_INVOICE, "cac": CAC, "cbc": CBC}
    )
    _sub(root, CBC, "CustomizationID", inv.profile)
    _sub(root, CBC, "ProfileID", PEPPOL_PROCESS)
    _sub(root, CBC, "ID", inv.number)
    _sub(root, CBC, "IssueDate", inv.issued.isoformat())
    _sub(root, CBC, "DueDate", inv.due.isoformat())
    _sub(root, CBC, "InvoiceTypeCode", "380")
    _sub(root, CBC, "DocumentCurrencyCode", inv.currency)
    _sub(root, CBC, "BuyerReference", inv.buyer_reference)
    _ubl_party(root, "AccountingSupplierParty", inv.seller)
    _ubl_party(root, "AccountingCustomerParty", inv.buyer)
    means = _sub(root, CAC, "PaymentMeans")
    _sub(means, CBC, "PaymentMeansCode", "58")
    _sub(_sub(means, CAC, "PayeeFinancialAccount"), CBC, "ID", inv.iban)
    _sub(_sub(root, CAC, "PaymentTerms"), CBC, "Note", inv.terms)
    total = _sub(root, CAC, "TaxTotal")
    _sub(total, CBC, "TaxAmount", inv.tax, **cur)
    sub = _sub(total, CAC, "TaxSubtotal")
    _sub(sub, CBC, "TaxableAmount", inv.net, **cur)
    _sub(sub, CBC, "TaxAmount", inv.tax, **cur)
    cat = _sub(sub, CAC, "TaxCategory")
    _sub(cat, CBC, "ID", "S")
    _sub(cat, CBC, "Percent", inv.rate)
    _sub(_sub(cat, CAC, "TaxScheme"), CBC, "ID", "VAT")
    money = _sub(root, CAC, "LegalMonetaryTotal")
    _sub(money, CBC, "LineExtensionAmount", inv.net, **cur)
    _sub(money, CBC, "TaxExclusiveAmount", inv.net, **cur)
    _sub(money, CBC, "TaxInclusiveAmount", inv.gross, **cur)
    _sub(money, CBC, "PayableAmount", inv.gross, **cur)
    for i, line in enumerate(inv.lines, 1):
        el = _sub(root, CAC, "InvoiceLine")
        _sub(el, CBC, "ID", i)
        _sub(el, CBC, "InvoicedQuantity", line.quantity, unitCode="C62")
        _sub(el, CBC, "LineExtensionAmount", line.net, **cur)
        item = _sub(el, CAC, "Item")
        _sub(item, CBC, "Name", line.name)
        tax = _sub(item, CAC, "ClassifiedTaxCategory")
        _sub(tax, CBC, "ID", "S")
        _sub(tax, CBC, "Percent", inv.rate)
        _sub(_sub(tax, CAC, "TaxScheme"), CBC, "ID", "VAT")
        _sub(_sub(el, CAC, "Price"), CBC, "PriceAmount", line.price, **cur)
    out: bytes = etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True)
    return out


def _cii_date(parent: Any, tag: str, day: datetime.date) -> None:
    _sub(_sub(parent, RAM, tag), UDT, "DateTimeString", day.strftime("%Y%m%d"), format="102")


def _cii_party(parent: Any, tag: str, p: Party) -> None:
    party = _sub(parent, RAM, tag)
    _sub(party, RAM, "Name", p.name)
    addr = _sub(party, RAM, "PostalTradeAddress")
    _sub(addr, RAM, "PostcodeCode", p.postcode)
    _sub(addr, RAM, "LineOne", p.street)
    _sub(addr, RAM, "CityName", p.city)
    _sub(addr, RAM, "CountryID", p.country)
    if p.email:
        uri = _sub(party, RAM, "URIUniversalCommunication")
        _sub(uri, RAM, "URIID", p.email, schemeID="EM")
    if p.vat_id:
        _sub(_sub(party, RAM, "SpecifiedTaxRegistration"), RAM, "ID", p.vat_id, schemeID="VA")


def _cii_tax(parent: Any, inv: SampleInvoice, basis: Decimal | None = None) -> None:
    tax = _sub(parent, RAM, "ApplicableTradeTax")
    if basis is not None:
        _sub(tax, RAM, "CalculatedAmount", inv.tax)
    _sub(tax, RAM, "TypeCode", "VAT")
    if basis is not None:
        _sub(tax, RAM, "BasisAmount", basis)
    _sub(tax, RAM, "CategoryCode", "S")
    _sub(tax, RAM, "RateApplicablePercent", inv.rate)


def cii_xml(inv: SampleInvoice | None = None) -> bytes:
    """The invoice as a UN/CEFACT ``CrossIndustryInvoice`` (XRechnung CII, the XML of a
    Factur-X/ZUGFeRD PDF with ``profile=EN16931``)."""
    inv = inv or SampleInvoice()
    nsmap = {"rsm": RSM, "ram": RAM, "udt": UDT, "qdt": QDT}
    root = etree.Element(f"{{{RSM}}}CrossIndustryInvoice", nsmap=nsmap)
    ctx = _sub(root, RSM, "ExchangedDocumentContext")
    _sub(
        _sub(ctx, RAM, "BusinessProcessSpecifiedDocumentContextParameter"),
        RAM,
        "ID",
        PEPPOL_PROCESS,
    )
    _sub(_sub(ctx, RAM, "GuidelineSpecifiedDocumentContextParameter"), RAM, "ID", inv.profile)
    doc = _sub(root, RSM, "ExchangedDocument")
    _sub(doc, RAM, "ID", inv.number)
    _sub(doc, RAM, "TypeCode", "380")
    _cii_date(doc, "IssueDateTime", inv.issued)
    trade = _sub(root, RSM, "SupplyChainTradeTransaction")
    for i, line in enumerate(inv.lines, 1):
        item = _sub(trade, RAM, "IncludedSupplyChainTradeLineItem")
        _sub(_sub(item, RAM, "AssociatedDocumentLineDocument"), RAM, "LineID", i)
        _sub(_sub(item, RAM, "SpecifiedTradeProduct"), RAM, "Name", line.name)
        agreement = _sub(item, RAM, "SpecifiedLineTradeAgreement")
        _sub(_sub(agreement, RAM, "NetPriceProductTradePrice"), RAM, "ChargeAmount", line.price)
        delivery = _sub(item, RAM, "SpecifiedLineTradeDelivery")
        _sub(delivery, RAM, "BilledQuantity", line.quantity, unitCode="C62")
        settlement = _sub(item, RAM, "SpecifiedLineTradeSettlement")
        _cii_tax(settlement, inv)
        summation = _sub(settlement, RAM, "SpecifiedTradeSettlementLineMonetarySummation")
        _sub(summation, RAM, "LineTotalAmount", line.net)
    agreement = _sub(trade, RAM, "ApplicableHeaderTradeAgreement")
    _sub(agreement, RAM, "BuyerReference", inv.buyer_reference)
    _cii_party(agreement, "SellerTradeParty", inv.seller)
    _cii_party(agreement, "BuyerTradeParty", inv.buyer)
    _sub(trade, RAM, "ApplicableHeaderTradeDelivery")
    settle = _sub(trade, RAM, "ApplicableHeaderTradeSettlement")
    _sub(settle, RAM, "InvoiceCurrencyCode", inv.currency)
    means = _sub(settle, RAM, "SpecifiedTradeSettlementPaymentMeans")
    _sub(means, RAM, "TypeCode", "58")
    _sub(_sub(means, RAM, "PayeePartyCreditorFinancialAccount"), RAM, "IBANID", inv.iban)
    _cii_tax(settle, inv, basis=inv.net)
    terms = _sub(settle, RAM, "SpecifiedTradePaymentTerms")
    _sub(terms, RAM, "Description", inv.terms)
    _cii_date(terms, "DueDateDateTime", inv.due)
    money = _sub(settle, RAM, "SpecifiedTradeSettlementHeaderMonetarySummation")
    _sub(money, RAM, "LineTotalAmount", inv.net)
    _sub(money, RAM, "TaxBasisTotalAmount", inv.net)
    _sub(money, RAM, "TaxTotalAmount", inv.tax, currencyID=inv.currency)
    _sub(money, RAM, "GrandTotalAmount", inv.gross)
    _sub(money, RAM, "DuePayableAmount", inv.gross)
    out: bytes = etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True)
    return out


def _amount(value: Decimal) -> str:
    """1234.5 as German text: 1.234,50."""
    return f"{value:,.2f}".replace(",", "_").replace(".", ",").replace("_", ".")


def readable_pdf(inv: SampleInvoice, visible_total: str | None = None) -> bytes:
    """The invoice as a person reads it: one A4 page of text (the PDF of a Factur-X)."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)

    def say(text: str, size: int = 11) -> None:
        pdf.set_font("Helvetica", size=size)
        pdf.multi_cell(0, 6, text.encode("latin-1", "replace").decode("latin-1"))
        pdf.ln(1)

    s, b = inv.seller, inv.buyer
    say(f"{s.name}, {s.street}, {s.postcode} {s.city}", 9)
    say(f"{b.name}\n{b.street}\n{b.postcode} {b.city}")
    say(f"Rechnung {inv.number}", 16)
    say(f"Rechnungsdatum: {inv.issued:%d.%m.%Y}    Leitweg-ID: {inv.buyer_reference}")
    for i, line in enumerate(inv.lines, 1):
        say(f"{i}  {line.name}  {line.quantity} x {_amount(line.price)}  {_amount(line.net)} EUR")
    say(f"Nettobetrag {_amount(inv.net)} EUR")
    say(f"Umsatzsteuer {inv.rate} % {_amount(inv.tax)} EUR")
    say(f"Gesamtbetrag {visible_total or _amount(inv.gross)} EUR", 13)
    say(f"{inv.terms}. IBAN {inv.iban}. USt-IdNr. {s.vat_id}")
    return bytes(pdf.output())


def facturx_pdf(inv: SampleInvoice | None = None, *, visible_total: str | None = None) -> bytes:
    """A Factur-X (ZUGFeRD 2) PDF: the readable page with the CII XML embedded as
    ``factur-x.xml``, written by the factur-x package (profile EN 16931)."""
    from facturx import generate_from_binary

    inv = inv or SampleInvoice(profile=EN16931)
    out: bytes = generate_from_binary(
        readable_pdf(inv, visible_total), cii_xml(inv), flavor="factur-x", level="en16931"
    )
    return out


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
