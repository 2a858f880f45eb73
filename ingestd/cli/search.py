"""``ingestd search --tenant NAME "query"``: full-text search over one tenant's documents.

The query uses web-search syntax (``websearch_to_tsquery``): words are ANDed, ``"a b"``
is a phrase, ``or`` and ``-word`` work. It matches title and OCR text in the 'german'
and 'simple' configurations (see content_upsert in ingestd/db/sql/queries.sql).
"""

from __future__ import annotations

import argparse
from typing import Any

from ingestd.errors import ExitCode
from ingestd.tenants import lookup


def cmd_search(args: argparse.Namespace) -> int:
    from ingestd.cli.common import load, print_json, shown
    from ingestd.ops.runtime import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        tenant = lookup.by_name(tx, args.tenant)
        rows = tx.all(
            "search", {"tenant_id": tenant["id"], "query": args.query, "limit": args.limit}
        )
    if args.json:
        print_json(rows)
        return ExitCode.ok
    if not rows:
        print(f"no documents of {args.tenant} match {args.query!r}")
        return ExitCode.ok
    for r in rows:
        issued = r["issued_date"].isoformat() if r["issued_date"] else "-"
        print(f"{r['id']:>6}  {r['rank']:.3f}  {issued:<10}  {shown(r['title'])}")
        snippet = " ".join(str(r["snippet"] or "").split())
        if snippet:
            print(f"        {shown(snippet)}")
    return ExitCode.ok


def add_parser(sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "search", parents=[common, jsonopt], help="full-text search in one tenant's documents"
    )
    s.add_argument("--tenant", required=True)
    s.add_argument("--limit", type=int, default=20)
    s.add_argument("query", help='web-search syntax: words, "a phrase", or, -word')
    s.set_defaults(func=cmd_search)
