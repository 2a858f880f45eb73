"""``ingestd search --tenant NAME "query"``: search in one tenant's documents.

The query uses web-search syntax (``websearch_to_tsquery``): words are ANDed, ``"a b"``
is a phrase, ``or`` and ``-word`` work. It matches title and OCR text in the tenant's
configuration ('german' by default) and 'simple' (see content_upsert in
ingestd/db/sql/queries/analysis.sql). Above them come documents whose original file name holds the
query as typed (``Scan_0815`` finds the scan whose title became its sender, marked ``=``);
below them compound ones: a query word of three or more characters inside a longer word
("Rechnung" in "Abschlagsrechnung", marked ``~``), unless ``--exact`` (queries
search_terms and search, migration 0013).

Bounded (ingestd/search/limits.py): at most 500 characters and 32 words, each statement
stopped after 5 s; past a limit the command exits 2 with one line naming it.
"""

from __future__ import annotations

import argparse
from typing import Any

from ingestd.errors import ExitCode, QueryCanceled
from ingestd.search import limits
from ingestd.search.query import search
from ingestd.tenants import lookup

__all__ = ["add_parser", "cmd_search", "search"]


# How each tier's hits are marked: a file name holding the query, whole words, inside a word.
_MARKS = {"name": "=", "exact": " ", "compound": "~"}

# The most hits one command shows (--limit): each is a snippet made from its text.
MAX_HITS = 1000


def _hits(text: str) -> int:
    """--limit's value: a whole number from 1 to MAX_HITS (else argparse's exit 2)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= n <= MAX_HITS:
        raise argparse.ArgumentTypeError(f"{n} is not from 1 to {MAX_HITS}")
    return n


def cmd_search(args: argparse.Namespace) -> int:
    from ingestd.cli.common import load, print_json, shown
    from ingestd.daemon.wiring import open_database

    config = load(args)
    query = limits.checked(args.query)  # before the database: a refusal needs none
    try:
        with open_database(config) as db, db.transaction() as tx:
            tenant = lookup.by_name(tx, args.tenant)
            rows = search(tx, tenant["id"], query, args.limit, compounds=not args.exact)
    except QueryCanceled:
        raise limits.SearchTooSlow() from None
    if args.json:
        print_json(rows)
        return ExitCode.ok
    if not rows:
        print(f"no documents of {args.tenant} match {args.query!r}")
        return ExitCode.ok
    for r in rows:
        issued = r["issued_date"].isoformat() if r["issued_date"] else "-"
        # A name hit is marked "=" (its file name holds the query; the name is shown), a
        # compound hit "~": found inside a word, ranked below every exact one.
        mark = _MARKS.get(r["match"], " ")
        name = f"  [{shown(r['original_filename'])}]" if r["match"] == "name" else ""
        print(f"{r['id']:>6} {mark}{r['rank']:.3f}  {issued:<10}  {shown(r['title'])}{name}")
        snippet = " ".join(str(r["snippet"] or "").split())
        if snippet:
            print(f"        {shown(snippet)}")
    return ExitCode.ok


def add_parser(sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser) -> None:
    s = sub.add_parser("search", parents=[common, jsonopt], help="search in one tenant's documents")
    s.add_argument("--tenant", required=True, help="the tenant whose documents to search")
    s.add_argument(
        "--limit",
        type=_hits,
        default=20,
        metavar="N",
        help=f"at most N hits, 1 to {MAX_HITS} (default %(default)s)",
    )
    s.add_argument(
        "--exact",
        action="store_true",
        help="whole words (and their inflections) only: no matches inside compound words",
    )
    s.add_argument(
        "query",
        help=f'web-search syntax: words, "a phrase", or, -word (at most '
        f"{limits.MAX_QUERY_CHARS} characters, {limits.MAX_TERMS} words)",
    )
    s.set_defaults(func=cmd_search)
