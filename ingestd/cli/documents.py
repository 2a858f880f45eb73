"""Documents from the shell: list, show one (with its batch or its children), those
needing attention; the ``documents`` command group, whose other commands live in
documents_again.py (analyze, split, mark-done), document_handout.py (get) and the
tenant module (trash, purge). ``ingest`` is ingest.py's."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ingestd.cli import document_handout as handout_cli
from ingestd.cli import documents_again as again_cli
from ingestd.cli import tenants as tenant_cli
from ingestd.cli import timebounds
from ingestd.cli.common import load, local_time, print_json, print_table, shown
from ingestd.errors import ExitCode


def cmd_documents(args: argparse.Namespace) -> int:
    """Newest first: arrival time, original name and source with the title; filtered by
    tenant, name glob, source and arrival time."""
    from ingestd.daemon.wiring import open_database

    config = load(args)
    params = {
        "tenant": args.tenant,
        "limit": args.limit,
        "name": timebounds.like_pattern(args.name) if args.name else None,
        "source": args.source,
        "since": args.since,
        "until": args.until,
    }
    with open_database(config) as db, db.transaction() as tx:
        rows = tx.all("documents_list", params)
    if args.json:
        print_json(rows)
        return ExitCode.ok
    print_table(
        ("ID", "TENANT", "ARRIVED", "SOURCE", "STATUS", "ISSUED", "BATCH", "FILE", "TITLE", "TAGS"),
        (
            [
                r["id"],
                r["tenant"],
                local_time(r["created_at"]),
                shown(r["source"]),
                r["processing_status"],
                r["issued_date"].isoformat() if r["issued_date"] else "-",
                batch_mark(r),
                shown(r["original_filename"]),
                shown(r["title"]),
                shown(", ".join(r["tags"])),
            ]
            for r in rows
        ),
        right=("ID",),
    )
    return ExitCode.ok


def source_parts(source: str) -> tuple[str, str | None]:
    """("sftp", "scanner1") for "sftp:scanner1"; ("cli", None) for "cli"."""
    kind, sep, name = source.partition(":")
    return kind, (name if sep else None)


def batch_mark(row: dict[str, Any]) -> str:
    """A parent's "3 parts", a child's "17#2" (its batch and position), else "-"."""
    if row["parts"]:
        return f"{row['parts']} parts"
    if row["part_of"] is not None:
        return f"{row['part_of']}#{row['position']}"
    return "-"


def cmd_documents_show(args: argparse.Namespace) -> int:
    """One document: its record, and a batch's children or a child's batch with pages."""
    from ingestd.daemon.wiring import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        doc = tx.one("document_show", {"id": args.id, "tenant": args.tenant})
        lineage = tx.all("document_lineage", {"id": args.id}) if doc else []
    if doc is None:
        where = f" of tenant {args.tenant}" if args.tenant else ""
        print(f"document {args.id}: no such document{where}", file=sys.stderr)
        return ExitCode.not_found
    parent = next((r for r in lineage if r["relation"] == "parent"), None)
    children = [r for r in lineage if r["relation"] == "child"]
    if args.json:
        print_json({**doc, "parent": parent, "children": children})
        return ExitCode.ok
    kind, via = source_parts(str(doc["source"]))
    shown_doc = {
        **doc,
        "arrived": local_time(doc["created_at"]),
        "source": kind,
        "via": via,
        "source_subdir": doc["source_subdir"] or None,
    }
    for label, key in (
        ("title", "title"),
        ("tenant", "tenant"),
        ("status", "processing_status"),
        ("issued", "issued_date"),
        ("ASN", "asn"),
        ("original name", "original_filename"),
        ("arrived", "arrived"),
        ("source", "source"),
        (_VIA.get(kind, "via"), "via"),
        ("subfolder", "source_subdir"),
        ("trace id", "trace_id"),
        ("archived", "archive_path"),
        ("sha256", "sha256"),
        ("size", "size_bytes"),
        ("correspondent", "correspondent"),
        ("type", "document_type"),
        ("attention", "attention_reason"),
    ):
        if shown_doc[key] is not None:
            print(f"{label + ':':<15}{shown(str(shown_doc[key]))}")
    print(f"{'tags:':<15}{', '.join(doc['tags']) or '-'}")
    if parent is not None:
        print(
            f"{'batch:':<15}document {parent['id']}, part {parent['position']} of "
            f"{parent['parts']}, {pages(parent)} ({shown(parent['title'])})"
        )
    if children:
        print(f"{'children:':<15}{len(children)}")
        print_table(
            ("PART", "DOCUMENT", "PAGES", "STATUS", "ASN", "TITLE"),
            (
                [
                    f"{c['position']}.",
                    c["id"],
                    pages(c),
                    c["processing_status"],
                    "-" if c["asn"] is None else c["asn"],
                    shown(c["title"]),
                ]
                for c in children
            ),
            right=("PART", "DOCUMENT"),
            indent="  ",
        )
    return ExitCode.ok


# What the part after "kind:" of a source names.
_VIA = {"sftp": "account", "watch": "folder", "mail": "mailbox", "web": "user"}


def pages(row: dict[str, Any]) -> str:
    first, last = row["first_page"], row["last_page"]
    return f"page {first}" if first == last else f"pages {first}-{last}"


def cmd_documents_attention(args: argparse.Namespace) -> int:
    """Documents archived but not analysable (encrypted, damaged, over a limit), and why."""
    from ingestd.daemon.wiring import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        rows = tx.all("documents_attention", {"tenant": args.tenant, "limit": args.limit})
    if args.json:
        print_json(rows)
        return ExitCode.ok
    if not rows:
        print("no documents need attention")
        return ExitCode.ok
    print_table(
        ("ID", "TENANT", "ARRIVED", "FILE", "REASON"),
        (
            [
                r["id"],
                r["tenant"],
                local_time(r["created_at"]),
                shown(r["original_filename"]),
                shown(r["attention_reason"] or "-"),
            ]
            for r in rows
        ),
        right=("ID",),
    )
    print(
        f"\n{len(rows)} document(s). Re-queue with `ingestd documents analyze --tenant T ID`, "
        "or accept without text: `ingestd documents mark-done --tenant T ID`"
    )
    return ExitCode.ok


def add_parsers(
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """documents (with the tenant module's trash/purge, get, analyze, split, mark-done)."""
    s = sub.add_parser(
        "documents",
        aliases=["document"],
        parents=[common],
        help="list, re-analyze, trash and purge documents",
    )
    dsub = s.add_subparsers(dest="documents_cmd", required=True)
    tenant_cli.add_document_parsers(dsub, common, jsonopt)
    d = dsub.add_parser(
        "list", parents=[common, jsonopt], help="newest documents first, every column whole"
    )
    d.add_argument("--tenant", default=None, help="only this tenant's documents")
    d.add_argument(
        "--name",
        default=None,
        metavar="GLOB",
        help="only documents whose original file name matches GLOB (* and ?, any case), "
        "e.g. 'Scan_0815*'",
    )
    d.add_argument(
        "--source",
        default=None,
        metavar="S",
        help="only from this source: sftp:ACCOUNT, watch:FOLDER, its kind (sftp, watch, "
        "cli) or the account or folder name alone",
    )
    d.add_argument(
        "--since",
        type=timebounds.since,
        default=None,
        metavar="TIME",
        help="arrived at or after TIME: 2026-12-04, '2026-12-04 08:30', today, yesterday, "
        "or an age (90m, 2h, 3d)",
    )
    d.add_argument(
        "--until",
        type=timebounds.until,
        default=None,
        metavar="TIME",
        help="arrived before TIME (a date: up to the end of that day)",
    )
    d.add_argument(
        "--limit",
        type=int,
        default=50,
        metavar="N",
        help="at most N documents (default %(default)s)",
    )
    d.set_defaults(func=cmd_documents)
    handout_cli.add_get_parser(dsub, common, jsonopt)
    d = dsub.add_parser(
        "show", parents=[common, jsonopt], help="one document, with its batch or its children"
    )
    d.add_argument("--tenant", default=None, help="only if it is this tenant's document")
    d.add_argument("id", type=int, metavar="ID", help="the document's id")
    d.set_defaults(func=cmd_documents_show)
    again_cli.add_parsers(dsub, common, jsonopt)
    d = dsub.add_parser(
        "attention",
        parents=[common, jsonopt],
        help="documents archived but not analysable, with the reason",
    )
    d.add_argument("--tenant", default=None, help="only this tenant's documents")
    d.add_argument(
        "--limit",
        type=int,
        default=200,
        metavar="N",
        help="at most N documents (default %(default)s)",
    )
    d.set_defaults(func=cmd_documents_attention)
