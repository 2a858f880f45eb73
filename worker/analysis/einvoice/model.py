"""What an e-invoice says (``Invoice``) and what its validation found (``Report``).

Plain frozen dataclasses: they cross the pipe from the job child to the worker, and
``as_fields``/``as_dict`` give the JSON stored in the invoices row and sent to webhooks.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal


def _json(value: object) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


_LEVELS = (
    ("extended", "EXTENDED"),
    ("basicwl", "BASIC WL"),
    ("basic-wl", "BASIC WL"),
    ("basic", "BASIC"),
    ("minimum", "MINIMUM"),
)


def name_of_profile(profile: str | None) -> str | None:
    """The human name of a specification identifier (CII's guideline parameter, UBL's
    CustomizationID), e.g. "urn:cen.eu:en16931:2017#compliant#urn:factur-x.eu:1p0:basic"
    is "Factur-X BASIC"."""
    p = (profile or "").strip().lower()
    if not p:
        return None
    if "xrechnung" in p:
        version = p.rsplit("xrechnung_", 1)[1].split("#")[0] if "xrechnung_" in p else ""
        name = f"XRechnung {version}".strip()
        return f"{name} Extension" if "extension" in p else name
    if "peppol" in p:
        return "Peppol BIS Billing 3.0"
    family = "ZUGFeRD" if "zugferd" in p else "Factur-X" if "factur-x" in p else None
    for key, level in _LEVELS:
        if key in p:
            return f"{family} {level}" if family else level
    if family:
        return f"{family} EN 16931"
    if p.startswith("urn:cen.eu:en16931:2017"):
        return "EN 16931"
    return profile


@dataclass(frozen=True, slots=True)
class Party:
    name: str | None = None
    vat_id: str | None = None
    tax_number: str | None = None
    street: str | None = None
    postcode: str | None = None
    city: str | None = None
    country: str | None = None
    email: str | None = None

    @property
    def address(self) -> str | None:
        """One line: "Hauptstraße 1, 12345 Musterstadt, DE"."""
        town = " ".join(p for p in (self.postcode, self.city) if p)
        text = ", ".join(p for p in (self.street, town, self.country) if p)
        return text or None

    def as_fields(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "vat_id": self.vat_id,
            "tax_number": self.tax_number,
            "address": self.address,
            "country": self.country,
            "email": self.email,
        }


@dataclass(frozen=True, slots=True)
class TaxLine:
    category: str | None
    rate: Decimal | None
    basis: Decimal | None
    amount: Decimal | None

    def as_fields(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "rate": _json(self.rate),
            "basis": _json(self.basis),
            "amount": _json(self.amount),
        }


@dataclass(frozen=True, slots=True)
class Line:
    id: str | None
    name: str | None
    quantity: Decimal | None
    unit_price: Decimal | None
    net: Decimal | None


@dataclass(frozen=True, slots=True)
class Invoice:
    syntax: Literal["ubl", "cii"]
    kind: Literal["invoice", "credit_note"]
    profile: str | None = None
    number: str | None = None
    type_code: str | None = None
    issue_date: datetime.date | None = None
    due_date: datetime.date | None = None
    currency: str | None = None
    seller: Party = field(default_factory=Party)
    buyer: Party = field(default_factory=Party)
    buyer_reference: str | None = None
    order_reference: str | None = None
    line_net_total: Decimal | None = None
    allowance_total: Decimal | None = None
    charge_total: Decimal | None = None
    net_total: Decimal | None = None
    tax_total: Decimal | None = None
    gross_total: Decimal | None = None
    prepaid: Decimal | None = None
    payable: Decimal | None = None
    taxes: tuple[TaxLine, ...] = ()
    lines: tuple[Line, ...] = ()
    lines_not_read: int = 0  # lines beyond the reader's bound: counted, not read
    payment_terms: str | None = None
    iban: tuple[str, ...] = ()
    note: str | None = None
    unreadable: tuple[str, ...] = ()  # fields present but not readable (a date, an amount)

    @property
    def profile_name(self) -> str | None:
        """A short human name of the profile (BT-24): "XRechnung 3.0", "EN 16931",
        "Factur-X BASIC", "ZUGFeRD EXTENDED", "Peppol BIS Billing 3.0"; an unknown one as
        it is written."""
        return name_of_profile(self.profile)

    def as_fields(self) -> dict[str, Any]:
        """Every field, JSON-ready (amounts as strings, dates ISO)."""
        return {
            "syntax": self.syntax,
            "kind": self.kind,
            "profile": self.profile,
            "profile_name": self.profile_name,
            "number": self.number,
            "type_code": self.type_code,
            "issue_date": _json(self.issue_date),
            "due_date": _json(self.due_date),
            "currency": self.currency,
            "seller": self.seller.as_fields(),
            "buyer": self.buyer.as_fields(),
            "buyer_reference": self.buyer_reference,
            "order_reference": self.order_reference,
            "line_net_total": _json(self.line_net_total),
            "allowance_total": _json(self.allowance_total),
            "charge_total": _json(self.charge_total),
            "net_total": _json(self.net_total),
            "tax_total": _json(self.tax_total),
            "gross_total": _json(self.gross_total),
            "prepaid": _json(self.prepaid),
            "payable": _json(self.payable),
            "taxes": [t.as_fields() for t in self.taxes],
            "line_count": len(self.lines) + self.lines_not_read,
            "unreadable": list(self.unreadable),
            "payment_terms": self.payment_terms,
            "iban": list(self.iban),
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class Finding:
    kind: Literal["format", "rule"]
    code: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def as_dict(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "code": self.code,
            "message": self.message,
            "severity": self.severity,
        }


@dataclass(frozen=True, slots=True)
class Report:
    findings: tuple[Finding, ...]
    schema_checked: bool
    schema_note: str | None = None

    def _count(self, kind: str) -> int:
        return sum(1 for f in self.findings if f.kind == kind and f.severity == "error")

    @property
    def format_errors(self) -> int:
        return self._count("format")

    @property
    def rule_errors(self) -> int:
        return self._count("rule")

    @property
    def legal_status(self) -> Literal["e-invoice", "other invoice"]:
        """An invoice with format errors is legally an "other invoice" (sonstige Rechnung)."""
        return "other invoice" if self.format_errors else "e-invoice"

    def as_dict(self) -> dict[str, Any]:
        return {
            "findings": [f.as_dict() for f in self.findings],
            "schema_checked": self.schema_checked,
            "schema_note": self.schema_note,
            "legal_status": self.legal_status,
        }
