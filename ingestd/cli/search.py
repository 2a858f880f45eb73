"""``ingestd search --tenant NAME "query"``: search in one tenant's documents.

The query uses web-search syntax (``websearch_to_tsquery``): words are ANDed, ``"a b"``
is a phrase, ``or`` and ``-word`` work. It matches title and OCR text in the tenant's
configuration ('german' by default) and 'simple' (see content_upsert in
ingestd/db/sql/queries.sql). Below those exact hits come compound ones: a query word of
three or more characters inside a longer word ("Rechnung" in "Abschlagsrechnung"),
unless ``--exact`` (queries search_terms and search, migration 0013).
"""

from __future__ import annotations

import argparse
from typing import Any

from ingestd.db.database import Row, Tx
from ingestd.errors import ExitCode
from ingestd.tenants import lookup


def search(
    tx: Tx, tenant_id: int, query: str, limit: int = 20, compounds: bool = True
) -> list[Row]:
    """The tenant's documents matching ``query``: exact hits first, then compound ones
    (``match`` says which), each with rank and snippet; at most ``limit``."""
    terms = tx.one("search_terms", {"tenant_id": tenant_id, "query": query})
    assert terms is not None  # one row always
    params = {**terms, "tenant_id": tenant_id, "limit": limit, "compounds": compounds}
    return tx.all("search", params)


def cmd_search(args: argparse.Namespace) -> int:
    from ingestd.cli.common import load, print_json, shown
    from ingestd.ops.runtime import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        tenant = lookup.by_name(tx, args.tenant)
        rows = search(tx, tenant["id"], args.query, args.limit, compounds=not args.exact)
    if args.json:
        print_json(rows)
        return ExitCode.ok
    if not rows:
        print(f"no documents of {args.tenant} match {args.query!r}")
        return ExitCode.ok
    for r in rows:
        issued = r["issued_date"].isoformat() if r["issued_date"] else "-"
        # A compound hit is marked "~": found inside a word, ranked below every exact one.
        mark = " " if r["match"] == "exact" else "~"
        print(f"{r['id']:>6} {mark}{r['rank']:.3f}  {issued:<10}  {shown(r['title'])}")
        snippet = " ".join(str(r["snippet"] or "").split())
        if snippet:
            print(f"        {shown(snippet)}")
    return ExitCode.ok


def add_parser(sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser) -> None:
    s = sub.add_parser("search", parents=[common, jsonopt], help="search in one tenant's documents")
    s.add_argument("--tenant", required=True, help="the tenant whose documents to search")
    s.add_argument(
        "--limit", type=int, default=20, metavar="N", help="at most N hits (default %(default)s)"
    )
    s.add_argument(
        "--exact",
        action="store_true",
        help="whole words (and their inflections) only: no matches inside compound words",
    )
    s.add_argument("query", help='web-search syntax: words, "a phrase", or, -word')
    s.set_defaults(func=cmd_search)
