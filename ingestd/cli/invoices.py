"""``ingestd invoices``: the e-invoices a tenant received, for accounting (issue 33).

    ingestd invoices list --tenant T [--since D] [--until D] [--format table|csv|json]
    ingestd invoices show DOCUMENT --tenant T [--json]

``list`` is the accounting export: one row per invoice (XRechnung, ZUGFeRD/Factur-X, any
EN 16931 UBL or CII), by issue date, with its seller, buyer reference, totals and what
the validation found. A CSV cell that a spreadsheet would run as a formula (the text
comes from the sender's XML) is prefixed with ``'``. ``show`` is one invoice's fields and
its validation report.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import sys
from collections.abc import Sequence
from typing import Any

from ingestd.cli import timebounds
from ingestd.cli.common import load, print_json, print_table, shown
from ingestd.errors import ExitCode, UsageError

CSV_COLUMNS = (
    "document_id",
    "issue_date",
    "due_date",
    "number",
    "kind",
    "type_code",
    "seller_name",
    "seller_vat_id",
    "buyer_name",
    "buyer_reference",
    "currency",
    "net_total",
    "tax_total",
    "gross_total",
    "payable",
    "iban",
    "payment_terms",
    "syntax",
    "profile",
    "source",
    "legal_status",
    "format_errors",
    "rule_errors",
    "pdf_check",
    "duplicate_of",
    "title",
    "original_filename",
)
# What a spreadsheet takes as the start of a formula (OWASP: CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _day(value: datetime.datetime | None) -> datetime.date | None:
    return value.date() if value is not None else None


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    text = str(value)
    if text.startswith(_FORMULA_START) and not _is_number(text):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from ingestd.daemon.wiring import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        return tx.all(
            "invoices_list",
            {
                "tenant": args.tenant,
                "since": _day(args.since),
                "until": _day(args.until),
                "limit": args.limit,
            },
        )


def cmd_list(args: argparse.Namespace) -> int:
    rows = _rows(args)
    if args.format == "json":
        print_json(rows)
        return ExitCode.ok
    if args.format == "csv":
        out = csv.writer(sys.stdout, lineterminator="\r\n")
        out.writerow(CSV_COLUMNS)
        for r in rows:
            out.writerow([_cell(r.get(c)) for c in CSV_COLUMNS])
        return ExitCode.ok
    if not rows:
        print(f"no invoices for tenant {args.tenant}")
        return ExitCode.ok
    print_table(
        ("DOC", "ISSUED", "NUMBER", "SELLER", "VAT ID", "GROSS", "CUR", "STATUS", "CHECKS"),
        ([_table_row(r) for r in rows]),
        right=("DOC", "GROSS"),
    )
    return ExitCode.ok


def _checks(r: dict[str, Any]) -> str:
    """What the validation found, short: "ok", "2 rule errors", "duplicate of #7"."""
    bits = []
    if r["format_errors"]:
        bits.append(f"{r['format_errors']} format errors")
    if r["rule_errors"]:
        bits.append(f"{r['rule_errors']} rule errors")
    if r["pdf_check"] not in (None, "ok"):
        bits.append("PDF differs")
    if r["duplicate_of"]:
        bits.append(f"duplicate of #{r['duplicate_of']}")
    return ", ".join(bits) or "ok"


def _table_row(r: dict[str, Any]) -> Sequence[object]:
    return [
        r["document_id"],
        r["issue_date"] or "-",
        shown(r["number"] or "-"),
        shown((r["seller_name"] or "-")[:40]),
        shown(r["seller_vat_id"] or "-"),
        r["gross_total"] if r["gross_total"] is not None else "-",
        shown(r["currency"] or ""),
        r["legal_status"],
        _checks(r),
    ]


def cmd_show(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        row = tx.one("invoice_show", {"tenant": args.tenant, "document_id": args.document})
    if row is None:
        raise UsageError(f"document {args.document} of tenant {args.tenant} is not an e-invoice")
    if args.json:
        print_json(row)
        return ExitCode.ok
    fields: dict[str, Any] = row["fields"] or {}
    print(f"document {row['document_id']}  {shown(row['title'])}")
    for label, key in (
        ("number", "number"),
        ("kind", "kind"),
        ("issued", "issue_date"),
        ("due", "due_date"),
        ("seller", "seller_name"),
        ("seller VAT id", "seller_vat_id"),
        ("buyer", "buyer_name"),
        ("buyer reference", "buyer_reference"),
        ("net", "net_total"),
        ("tax", "tax_total"),
        ("gross", "gross_total"),
        ("payable", "payable"),
        ("currency", "currency"),
        ("profile", "profile"),
        ("syntax", "syntax"),
        ("source", "source"),
        ("status", "legal_status"),
        ("PDF check", "pdf_check"),
        ("duplicate of", "duplicate_of"),
    ):
        if row.get(key) is not None:
            print(f"  {label:<16} {shown(str(row[key]))}")
    for key in ("iban", "payment_terms"):
        if fields.get(key):
            print(f"  {key:<16} {shown(str(fields[key]))}")
    report = row["report"] or {}
    findings = report.get("findings") or []
    print(f"validation: {len(findings)} findings")
    for f in findings:
        print(
            f"  {f.get('kind')}/{f.get('severity')} {f.get('code')}: {shown(f.get('message', ''))}"
        )
    if report.get("schema_note"):
        print(f"  note: {shown(report['schema_note'])}")
    return ExitCode.ok


def add_parsers(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: argparse.ArgumentParser,
    jsonopt: argparse.ArgumentParser,
) -> None:
    p = sub.add_parser(
        "invoices",
        parents=[common],
        help="the e-invoices a tenant received (XRechnung, ZUGFeRD/Factur-X)",
    )
    isub = p.add_subparsers(dest="invoices_command", required=True, metavar="COMMAND")
    ls = isub.add_parser(
        "list", parents=[common], help="a tenant's invoices by issue date: the accounting export"
    )
    ls.add_argument("--tenant", required=True, help="the tenant whose invoices to list")
    ls.add_argument(
        "--since",
        type=timebounds.since,
        default=None,
        metavar="WHEN",
        help="issued on or after this day (2026-11-01, 30d, ...)",
    )
    ls.add_argument(
        "--until",
        type=timebounds.until,
        default=None,
        metavar="WHEN",
        help="issued up to this day, the day included",
    )
    ls.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="a table to read, CSV for a spreadsheet, or JSON (default %(default)s)",
    )
    ls.add_argument("--limit", type=int, default=100_000, metavar="N", help="at most N invoices")
    ls.set_defaults(func=cmd_list)
    show = isub.add_parser(
        "show", parents=[common, jsonopt], help="one invoice's fields and validation report"
    )
    show.add_argument("document", type=int, metavar="DOCUMENT", help="the document's id")
    show.add_argument("--tenant", required=True, help="the document's tenant")
    show.set_defaults(func=cmd_show)
