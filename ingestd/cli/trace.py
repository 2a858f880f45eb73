"""``ingestd trace NAME|ID``: one file's whole story from the database, a line per step.

For the helpdesk: when it arrived and from where, whether it was archived (as which
document), a duplicate, refused, quarantined or is waiting and why, then each job with its
attempts and errors, webhook deliveries, notifications and audit entries. Nothing comes
from a log (ingestd/arrivals/story.py).
"""

from __future__ import annotations

import argparse

from ingestd.cli.common import load, local_time, print_json, shown
from ingestd.errors import ExitCode, NotFound


def cmd_trace(args: argparse.Namespace) -> int:
    from ingestd.arrivals import story
    from ingestd.daemon.wiring import open_database

    config = load(args)
    with open_database(config) as db:
        found = story.stories(db, args.key, tenant=args.tenant, limit=args.limit)
    if not found:
        raise NotFound(
            f"no file named {shown(args.key)!r} and no trace or document id {shown(args.key)!r}"
            + (f" for tenant {args.tenant}" if args.tenant else "")
            + " (try `ingestd documents find --name` with a part of the name)"
        )
    if args.json:
        print_json([s.as_dict() for s in found])
        return ExitCode.ok
    for i, s in enumerate(found):
        if i:
            print()
        doc = f", document {s.document_id}" if s.document_id else ""
        print(f"{shown(s.name)}  (tenant {s.tenant}, trace {s.trace_id or '-'}{doc}): {s.outcome}")
        for step in s.steps:
            when = local_time(step.at, missing=" " * 19)
            print(f"  {when}  {step.what:<12} {shown(step.text)}")
    return ExitCode.ok


def add_parser(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: argparse.ArgumentParser,
    jsonopt: argparse.ArgumentParser,
) -> None:
    s = sub.add_parser(
        "trace",
        parents=[common, jsonopt],
        help="one file's whole story: arrival, checks, archive, jobs, deliveries, notices",
    )
    s.add_argument(
        "key",
        metavar="NAME|ID",
        help="the file name as received (whole, any case), its trace id, or a document id",
    )
    s.add_argument("--tenant", default=None, help="only this tenant's files")
    s.add_argument(
        "--limit",
        type=int,
        default=20,
        metavar="N",
        help="at most N files of that name, newest first (default %(default)s)",
    )
    s.set_defaults(func=cmd_trace)
