"""Read an EN 16931 invoice from its XML: UBL 2.1 (``Invoice``, ``CreditNote``) or
UN/CEFACT CII (``CrossIndustryInvoice``), into an ``Invoice``.

The XML comes from outside: it is parsed by ingestd/xmlsafe.py only, every value is cut
and cleaned of control characters, an amount or date that cannot be read is None and
named in ``Invoice.unreadable`` (validation turns that into a format finding): reading
never fails on a bad value, only on XML that is not an invoice at all (``NotAnInvoice``).
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from ingestd import xmlsafe
from worker.analysis.einvoice.model import Invoice, Line, Party, TaxLine

UBL_INVOICE = "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"
UBL_CREDIT = "urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2"
CII = "urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100"
NS = {
    "cac": "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2",
    "cbc": "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2",
    "rsm": CII,
    "ram": "urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100",
    "udt": "urn:un:unece:uncefact:data:standard:UnqualifiedDataType:100",
}
MAX_LINES = 100_000
MAX_TEXT = 1000
# UNTDID 1001 codes of credit notes (CII carries the kind in the code only).
CREDIT_CODES = frozenset({"381", "396", "261", "262", "532"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# xsd:decimal: an optional sign, digits and one point; no exponent, no "NaN", no "1_000".
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)", re.ASCII)
# xsd:date may carry a time zone ("2026-11-20Z", "2026-11-20+01:00"): the day is the date.
_ISO_DAY = re.compile(r"(\d{4}-\d{2}-\d{2})(?:Z|[+-]\d{2}:\d{2})?", re.ASCII)
_CII_DAY = re.compile(r"\d{8}", re.ASCII)


class NotAnInvoice(Exception):
    """Not XML we read as an invoice: not well-formed, a DTD, too large or too deep, not
    UBL/CII; the message says why (xmlsafe's reason for hostile XML)."""


def syntax_of(root: Any) -> Literal["ubl", "cii"] | None:
    """ "ubl" or "cii" by the root element's namespace and name, else None."""
    tag = root.tag if isinstance(root.tag, str) else ""
    if tag in (f"{{{UBL_INVOICE}}}Invoice", f"{{{UBL_CREDIT}}}CreditNote"):
        return "ubl"
    if tag == f"{{{CII}}}CrossIndustryInvoice":
        return "cii"
    return None


def read_invoice(data: bytes) -> Invoice:
    """The invoice in ``data``; NotAnInvoice with the reason if there is none."""
    try:
        root = xmlsafe.parse(data, what="the invoice XML")
    except xmlsafe.HostileXml as exc:
        raise NotAnInvoice(exc.message) from exc
    return read_root(root)


def read_root(root: Any) -> Invoice:
    """The invoice of a parsed root element (from ``xmlsafe.parse``); NotAnInvoice if the
    root is not a UBL Invoice/CreditNote or a CII CrossIndustryInvoice."""
    syntax = syntax_of(root)
    if syntax == "ubl":
        return _Reader(root).ubl()
    if syntax == "cii":
        return _Reader(root).cii()
    raise NotAnInvoice(f"the root element {root.tag!r} is not a UBL or CII invoice")


def clean(value: str | None) -> str | None:
    """``value`` as one line of plain text: control characters out, whitespace collapsed,
    at most MAX_TEXT characters; None if nothing is left."""
    if value is None:
        return None
    text = " ".join(_CONTROL.sub(" ", value).split())[:MAX_TEXT]
    return text or None


class _Reader:
    """XPath reads over one document, noting values it could not read."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.unreadable: list[str] = []

    # -- values ----------------------------------------------------------------------
    def text(self, el: Any, path: str) -> str | None:
        found = el.xpath(path, namespaces=NS)
        for item in found:
            value = item if isinstance(item, str) else item.text
            got = clean(value)
            if got:
                return got
        return None

    def texts(self, el: Any, path: str) -> tuple[str, ...]:
        out = []
        for item in el.xpath(path, namespaces=NS)[:20]:
            got = clean(item if isinstance(item, str) else item.text)
            if got and got not in out:
                out.append(got)
        return tuple(out)

    def amount(self, el: Any, path: str, name: str) -> Decimal | None:
        raw = self.text(el, path)
        if raw is None:
            return None
        digits = raw.replace(" ", "")
        try:
            value = Decimal(digits) if _DECIMAL.fullmatch(digits) else None
        except InvalidOperation:
            value = None
        if value is None or abs(value) >= Decimal("1e15"):
            self.unreadable.append(f"{name} ({raw[:40]!r})")
            return None
        return value

    def date(self, el: Any, path: str, name: str, cii: bool = False) -> datetime.date | None:
        """A UBL date (YYYY-MM-DD, maybe with a time zone) or a CII date (YYYYMMDD)."""
        raw = self.text(el, path)
        if raw is None:
            return None
        if cii:
            day, fmt = (raw if _CII_DAY.fullmatch(raw) else None), "%Y%m%d"
        else:
            found = _ISO_DAY.fullmatch(raw)
            day, fmt = (found.group(1) if found else None), "%Y-%m-%d"
        try:
            if day is not None:
                return datetime.datetime.strptime(day, fmt).date()
        except ValueError:
            pass
        self.unreadable.append(f"{name} ({raw[:40]!r})")
        return None

    def money(self, el: Any, path: str, currency: str | None, name: str) -> Decimal | None:
        """The amount at ``path`` in ``currency`` (a tax total is there twice when the VAT
        is accounted in another currency), else the first."""
        if currency:
            found = el.xpath(f"{path}[@currencyID=$cur]", namespaces=NS, cur=currency)
            if found:
                return self.amount(found[0], ".", name)
        return self.amount(el, path, name)

    # -- UBL -------------------------------------------------------------------------
    def ubl_party(self, path: str) -> Party:
        found = self.root.xpath(path, namespaces=NS)
        if not found:
            return Party()
        p = found[0]
        return Party(
            name=self.text(p, "cac:PartyLegalEntity/cbc:RegistrationName")
            or self.text(p, "cac:PartyName/cbc:Name"),
            vat_id=self.text(p, "cac:PartyTaxScheme[cac:TaxScheme/cbc:ID='VAT']/cbc:CompanyID"),
            tax_number=self.text(
                p, "cac:PartyTaxScheme[not(cac:TaxScheme/cbc:ID='VAT')]/cbc:CompanyID"
            ),
            street=self.text(p, "cac:PostalAddress/cbc:StreetName"),
            postcode=self.text(p, "cac:PostalAddress/cbc:PostalZone"),
            city=self.text(p, "cac:PostalAddress/cbc:CityName"),
            country=self.text(p, "cac:PostalAddress/cac:Country/cbc:IdentificationCode"),
            email=self.text(p, "cbc:EndpointID[@schemeID='EM']")
            or self.text(p, "cac:Contact/cbc:ElectronicMail"),
        )

    def ubl(self) -> Invoice:
        r = self.root
        credit = r.tag == f"{{{UBL_CREDIT}}}CreditNote"
        currency = self.text(r, "cbc:DocumentCurrencyCode")
        money = "cac:LegalMonetaryTotal/cbc:"
        tax_total = self.money(r, "cac:TaxTotal/cbc:TaxAmount", currency, "tax total")
        taxes = tuple(
            TaxLine(
                category=self.text(s, "cac:TaxCategory/cbc:ID"),
                rate=self.amount(s, "cac:TaxCategory/cbc:Percent", "tax rate"),
                basis=self.amount(s, "cbc:TaxableAmount", "tax basis"),
                amount=self.amount(s, "cbc:TaxAmount", "tax amount"),
            )
            for s in r.xpath("cac:TaxTotal/cac:TaxSubtotal", namespaces=NS)[:100]
        )
        line_els = r.xpath("cac:InvoiceLine | cac:CreditNoteLine", namespaces=NS)
        lines = tuple(
            Line(
                id=self.text(el, "cbc:ID"),
                name=self.text(el, "cac:Item/cbc:Name"),
                quantity=self.amount(
                    el, "cbc:InvoicedQuantity | cbc:CreditedQuantity", "line quantity"
                ),
                unit_price=self.amount(el, "cac:Price/cbc:PriceAmount", "line price"),
                net=self.amount(el, "cbc:LineExtensionAmount", "line net amount"),
            )
            for el in line_els[:MAX_LINES]
        )
        issue = self.date(r, "cbc:IssueDate", "issue date")
        due = self.date(r, "cbc:DueDate | cac:PaymentMeans/cbc:PaymentDueDate", "due date")
        return Invoice(
            syntax="ubl",
            kind="credit_note" if credit else "invoice",
            profile=self.text(r, "cbc:CustomizationID"),
            number=self.text(r, "cbc:ID"),
            type_code=self.text(r, "cbc:InvoiceTypeCode | cbc:CreditNoteTypeCode"),
            issue_date=issue,
            due_date=due,
            currency=currency,
            seller=self.ubl_party("cac:AccountingSupplierParty/cac:Party"),
            buyer=self.ubl_party("cac:AccountingCustomerParty/cac:Party"),
            buyer_reference=self.text(r, "cbc:BuyerReference"),
            order_reference=self.text(r, "cac:OrderReference/cbc:ID"),
            line_net_total=self.amount(r, money + "LineExtensionAmount", "line total"),
            allowance_total=self.amount(r, money + "AllowanceTotalAmount", "allowances"),
            charge_total=self.amount(r, money + "ChargeTotalAmount", "charges"),
            net_total=self.amount(r, money + "TaxExclusiveAmount", "net total"),
            tax_total=tax_total,
            gross_total=self.amount(r, money + "TaxInclusiveAmount", "gross total"),
            prepaid=self.amount(r, money + "PrepaidAmount", "prepaid amount"),
            payable=self.amount(r, money + "PayableAmount", "amount due"),
            taxes=taxes,
            lines=lines,
            lines_not_read=max(0, len(line_els) - MAX_LINES),
            payment_terms=self.text(r, "cac:PaymentTerms/cbc:Note"),
            iban=self.texts(r, "cac:PaymentMeans/cac:PayeeFinancialAccount/cbc:ID"),
            note=self.text(r, "cbc:Note"),
            unreadable=tuple(self.unreadable),
        )

    # -- CII -------------------------------------------------------------------------
    def cii_party(self, path: str) -> Party:
        found = self.root.xpath(path, namespaces=NS)
        if not found:
            return Party()
        p = found[0]
        addr = "ram:PostalTradeAddress/ram:"
        return Party(
            name=self.text(p, "ram:Name"),
            vat_id=self.text(p, "ram:SpecifiedTaxRegistration/ram:ID[@schemeID='VA']"),
            tax_number=self.text(p, "ram:SpecifiedTaxRegistration/ram:ID[@schemeID='FC']"),
            street=self.text(p, addr + "LineOne"),
            postcode=self.text(p, addr + "PostcodeCode"),
            city=self.text(p, addr + "CityName"),
            country=self.text(p, addr + "CountryID"),
            email=self.text(p, "ram:URIUniversalCommunication/ram:URIID[@schemeID='EM']"),
        )

    def cii(self) -> Invoice:
        r = self.root
        trade = "rsm:SupplyChainTradeTransaction/"
        agree = trade + "ram:ApplicableHeaderTradeAgreement/"
        settle = trade + "ram:ApplicableHeaderTradeSettlement/"
        money = settle + "ram:SpecifiedTradeSettlementHeaderMonetarySummation/ram:"
        currency = self.text(r, settle + "ram:InvoiceCurrencyCode")
        tax_total = self.money(r, money + "TaxTotalAmount", currency, "tax total")
        type_code = self.text(r, "rsm:ExchangedDocument/ram:TypeCode")
        taxes = tuple(
            TaxLine(
                category=self.text(t, "ram:CategoryCode"),
                rate=self.amount(t, "ram:RateApplicablePercent", "tax rate"),
                basis=self.amount(t, "ram:BasisAmount", "tax basis"),
                amount=self.amount(t, "ram:CalculatedAmount", "tax amount"),
            )
            for t in r.xpath(settle + "ram:ApplicableTradeTax", namespaces=NS)[:100]
        )
        line_els = r.xpath(trade + "ram:IncludedSupplyChainTradeLineItem", namespaces=NS)
        lines = tuple(
            Line(
                id=self.text(el, "ram:AssociatedDocumentLineDocument/ram:LineID"),
                name=self.text(el, "ram:SpecifiedTradeProduct/ram:Name"),
                quantity=self.amount(
                    el, "ram:SpecifiedLineTradeDelivery/ram:BilledQuantity", "line quantity"
                ),
                unit_price=self.amount(
                    el,
                    "ram:SpecifiedLineTradeAgreement/ram:NetPriceProductTradePrice/"
                    "ram:ChargeAmount",
                    "line price",
                ),
                net=self.amount(
                    el,
                    "ram:SpecifiedLineTradeSettlement/"
                    "ram:SpecifiedTradeSettlementLineMonetarySummation/ram:LineTotalAmount",
                    "line net amount",
                ),
            )
            for el in line_els[:MAX_LINES]
        )
        date = "/udt:DateTimeString"
        return Invoice(
            syntax="cii",
            kind="credit_note" if type_code in CREDIT_CODES else "invoice",
            profile=self.text(
                r,
                "rsm:ExchangedDocumentContext/ram:GuidelineSpecifiedDocumentContextParameter/ram:ID",
            ),
            number=self.text(r, "rsm:ExchangedDocument/ram:ID"),
            type_code=type_code,
            issue_date=self.date(
                r, "rsm:ExchangedDocument/ram:IssueDateTime" + date, "issue date", cii=True
            ),
            due_date=self.date(
                r,
                settle + "ram:SpecifiedTradePaymentTerms/ram:DueDateDateTime" + date,
                "due date",
                cii=True,
            ),
            currency=currency,
            seller=self.cii_party(agree + "ram:SellerTradeParty"),
            buyer=self.cii_party(agree + "ram:BuyerTradeParty"),
            buyer_reference=self.text(r, agree + "ram:BuyerReference"),
            order_reference=self.text(
                r, agree + "ram:BuyerOrderReferencedDocument/ram:IssuerAssignedID"
            ),
            line_net_total=self.amount(r, money + "LineTotalAmount", "line total"),
            allowance_total=self.amount(r, money + "AllowanceTotalAmount", "allowances"),
            charge_total=self.amount(r, money + "ChargeTotalAmount", "charges"),
            net_total=self.amount(r, money + "TaxBasisTotalAmount", "net total"),
            tax_total=tax_total,
            gross_total=self.amount(r, money + "GrandTotalAmount", "gross total"),
            prepaid=self.amount(r, money + "TotalPrepaidAmount", "prepaid amount"),
            payable=self.amount(r, money + "DuePayableAmount", "amount due"),
            taxes=taxes,
            lines=lines,
            lines_not_read=max(0, len(line_els) - MAX_LINES),
            payment_terms=self.text(r, settle + "ram:SpecifiedTradePaymentTerms/ram:Description"),
            iban=self.texts(
                r,
                settle + "ram:SpecifiedTradeSettlementPaymentMeans/"
                "ram:PayeePartyCreditorFinancialAccount/ram:IBANID",
            ),
            note=self.text(r, "rsm:ExchangedDocument/ram:IncludedNote/ram:Content"),
            unreadable=tuple(self.unreadable),
        )
