"""Legal holds and retention on the command line.

    ingestd hold set --tenant T [--document ID]... --reason TEXT   hold documents (or all)
    ingestd hold release --tenant T [--document ID]...             release them
    ingestd hold list [--tenant T] [--json]
    ingestd retention show --tenant T [--json] [ID...]             years, last day kept, hold

Without ``--document`` a hold is on the whole tenant: nothing of it may be purged, and the
tenant may not be deleted or reset. Every set and release is an audit entry.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from ingestd.archive import audit, retention
from ingestd.archive.audit import AuditKind
from ingestd.cli.common import load, print_json, print_table, shown
from ingestd.errors import ExitCode
from ingestd.tenants import lookup


def _tenant_id(tx: Any, name: str) -> int:
    return int(lookup.by_name(tx, name)["id"])


def cmd_hold(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database

    config = load(args)
    problems: list[str] = []
    done: list[str] = []
    with open_database(config) as db, db.transaction() as tx:
        if args.hold_cmd == "list":
            tid = _tenant_id(tx, args.tenant) if args.tenant else None
            rows = tx.all("hold_list", {"tenant_id": tid})
            if args.json:
                print_json(rows)
            else:
                print_table(
                    ("TENANT", "HELD", "SINCE", "REASON"),
                    (
                        [
                            r["tenant"],
                            f"document {r['document_id']}" if r["document_id"] else "whole tenant",
                            f"{r['set_at']:%Y-%m-%d}",
                            shown(r["reason"]),
                        ]
                        for r in rows
                    ),
                )
            return ExitCode.ok
        tid = _tenant_id(tx, args.tenant)
        targets: list[int | None] = list(args.document) or [None]
        for doc in targets:
            if (
                doc is not None
                and tx.one("document_of_tenant", {"id": doc, "tenant_id": tid}) is None
            ):
                problems.append(f"document {doc}: no such document of {args.tenant}")
                continue
            what = f"document {doc}" if doc is not None else f"tenant {args.tenant}"
            ids = {"tenant_id": tid, "document_id": doc}
            if args.hold_cmd == "set":
                row = tx.one("hold_set", {**ids, "reason": args.reason})
                if row is None:
                    problems.append(f"{what}: already under a legal hold")
                    continue
                kind, detail = AuditKind.hold_set, {"hold": int(row["id"]), "reason": args.reason}
            else:
                row = tx.one("hold_release", ids)
                if row is None:
                    problems.append(f"{what}: not under a legal hold")
                    continue
                kind, detail = (
                    AuditKind.hold_released,
                    {"hold": int(row["id"]), "reason": row["reason"]},
                )
            audit.append(
                tx, chain=tid, tenant=args.tenant, kind=kind, document_id=doc, detail=detail
            )
            done.append(f"{what}: {'held' if args.hold_cmd == 'set' else 'released'}")
    for line in done:
        print(line)
    for p in problems:
        print(p, file=sys.stderr)
    return ExitCode.ok if not problems else ExitCode.not_found


def cmd_retention_show(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database

    config = load(args)
    policy = retention.policy_for(config.retention, args.tenant)
    today = datetime.now(UTC).date()
    with open_database(config) as db, db.transaction() as tx:
        tid = _tenant_id(tx, args.tenant)
        retention.record_policy(tx, tid, args.tenant, policy)
        rows = [
            r
            for doc in (args.ids or [None])
            for r in tx.all(
                "retention_documents", {**policy.params(), "tenant_id": tid, "document_id": doc}
            )
        ]
    if args.json:
        print_json({"policy": policy.as_json(), "documents": rows})
        return ExitCode.ok
    print(f"{'ID':>8} {'INGESTED':<10} {'YEARS':>5} {'KEPT UNTIL':<10} STATE")
    for r in rows:
        until = r["retain_until"]
        state = (
            "legal hold"
            if r["held"]
            else ("retained" if until and until >= today else "may be purged")
        )
        print(
            f"{r['id']:>8} {r['created_at']:%Y-%m-%d} {r['years']:>5} "
            f"{until.isoformat() if until else '-':<10} {state}"
        )
    return ExitCode.ok


def add_parsers(
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    h = sub.add_parser("hold", parents=[common], help="legal holds: set, release, list")
    hsub = h.add_subparsers(dest="hold_cmd", required=True)
    for name, text in (("set", "put documents (or a whole tenant) under a legal hold"),
                       ("release", "release a legal hold")):  # fmt: skip
        s = hsub.add_parser(name, parents=[common], help=text)
        s.add_argument("--tenant", required=True, help="the tenant")
        s.add_argument("--document", type=int, action="append", default=[], metavar="ID",
                       help="a document (repeatable); none: the whole tenant")  # fmt: skip
        if name == "set":
            s.add_argument("--reason", required=True, help="why (a case number): recorded")
        s.set_defaults(func=cmd_hold)
    s = hsub.add_parser("list", parents=[common, jsonopt], help="the holds in force")
    s.add_argument("--tenant", default=None, help="only this tenant's holds")
    s.set_defaults(func=cmd_hold)

    r = sub.add_parser("retention", parents=[common], help="what each document is kept for")
    rsub = r.add_subparsers(dest="retention_cmd", required=True)
    s = rsub.add_parser("show", parents=[common, jsonopt], help="years, last day kept, holds")
    s.add_argument("--tenant", required=True, help="the tenant")
    s.add_argument(
        "ids", nargs="*", type=int, metavar="ID", help="these documents (default: all of them)"
    )
    s.set_defaults(func=cmd_retention_show)
