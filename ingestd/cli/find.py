"""``ingestd documents find``: which files arrived, by name, source, time and outcome.

Registered below ``documents`` by ``cli/main.py`` (``add_parser``), over the arrivals
(every file that reached a source, ingestd/arrivals/) and the documents.
"""

from __future__ import annotations

import argparse
from typing import Any

from ingestd.cli import timebounds
from ingestd.cli.common import load, local_time, print_json, print_table, shown
from ingestd.errors import ExitCode


def outcome_text(row: dict[str, Any]) -> str:
    """The OUTCOME column: ``archived #42``, ``duplicate of #42``, ``refused (bad_type)``."""
    outcome = row["outcome"]
    if outcome == "archived":
        status = f" {row['document_status']}" if row.get("document_status") else ""
        return f"archived #{row['document_id']}{status}"
    if outcome == "duplicate":
        return f"duplicate of #{row['document_id']}"
    return f"{outcome} ({row['reason']})" if row["reason"] else outcome


def cmd_find(args: argparse.Namespace) -> int:
    from ingestd.arrivals import story
    from ingestd.daemon.wiring import open_database

    config = load(args)
    story.check_status(args.status)
    with open_database(config) as db:
        rows = story.find(
            db,
            tenant=args.tenant,
            name_like=timebounds.like_pattern(args.name) if args.name else None,
            source=args.source,
            since=args.since,
            until=args.until,
            status=args.status,
            limit=args.limit,
        )
    if args.json:
        print_json(story.rows_for_print(rows))
        return ExitCode.ok
    if not rows:
        print("no file arrived that matches")
        return ExitCode.ok
    print_table(
        ("ARRIVED", "TENANT", "SOURCE", "NAME", "SIZE", "OUTCOME", "TRACE"),
        (
            [
                local_time(r["arrived_at"]),
                r["tenant"],
                shown(f"{r['source']}:{r['origin']}" if r["origin"] else r["source"]),
                shown(f"{r['subdir']}/{r['original_name']}" if r["subdir"] else r["original_name"]),
                r["size_bytes"] if r["size_bytes"] is not None else "-",
                outcome_text(r),
                r["trace_id"] or "-",
            ]
            for r in rows
        ),
        right=("SIZE",),
    )
    return ExitCode.ok


def add_parser(
    dsub: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: argparse.ArgumentParser,
    jsonopt: argparse.ArgumentParser,
) -> None:
    """``find`` under ``documents`` (``dsub``: its sub-commands)."""
    d = dsub.add_parser(
        "find",
        parents=[common, jsonopt],
        help="which files arrived: by name, source, time and outcome (refused ones too)",
    )
    d.add_argument("--tenant", default=None, help="only this tenant's files")
    d.add_argument(
        "--name",
        default=None,
        metavar="GLOB",
        help="the file name as received, case-insensitive; * and ? as in the shell, a name "
        "without them matches as a part (0815 finds Scan_0815.pdf)",
    )
    d.add_argument(
        "--source",
        default=None,
        metavar="S",
        help="sftp, watch or cli; an SFTP account or hot folder; or both as sftp:ACCOUNT",
    )
    d.add_argument(
        "--since",
        default=None,
        type=timebounds.since,
        metavar="WHEN",
        help="arrived at or after: 2026-12-04, 2026-12-04T09:30, today, yesterday, 2h, 3d",
    )
    d.add_argument(
        "--until",
        default=None,
        type=timebounds.until,
        metavar="WHEN",
        help="arrived before (as --since; a date: to its end, the day included)",
    )
    d.add_argument(
        "--status",
        default=None,
        metavar="S",
        help="archived, duplicate, refused, quarantined, waiting, or the document's "
        "processing status (queued, done, failed, attention ...)",
    )
    d.add_argument(
        "--limit", type=int, default=200, metavar="N", help="at most N files (default %(default)s)"
    )
    d.set_defaults(func=cmd_find)
