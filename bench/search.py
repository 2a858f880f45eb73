"""Search on the demo corpus: hits and time of full-text only next to full-text plus
compound words (``ingestd search`` and ``ingestd search --exact``), in one run.

The corpus: the demo's letters (ingestd/demo/batches.py, five senders, one to three
pages each, the text tesseract reads off those scans) and the demo's sample scans
(scripts/demo.py), written as analysis writes them (content_upsert) - no OCR, which
bench/ocr.py measures. Nine in ten documents belong to the searched tenant, the rest to
another one. Baseline: the same query with compounds off (``--exact``: the full-text
tier alone, as search was before migration 0013). Hits are counted without a limit; the
times are medians at the CLI's limit of 20. "compound tier" tells how the plan found
the compound candidates: through the trigram index, by reading the tenant's rows (when
most of them match, which the planner knows from the patterns), or not at all (the
exact hits already fill the limit).

A second table puts hostile queries (the most words, negations, operators and stacked
negations a query may hold, and some over the limits) next to the baseline "Rechnung":
each is answered, refused at once (a limit, ingestd/search/limits.py) or stopped by the
statement timeout; the bench fails if any took longer than the two statements' timeouts.

    python bench/search.py                 # 5,000 documents, 5 rounds
    python bench/search.py --small         # 300 documents, 1 round (make test)
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds a queue.py, which would shadow the stdlib's queue module (psycopg_pool
# imports it): take bench/ off the path, put the repository first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import hashlib
import time
from typing import Any

from bench._common import BenchError, bench_cluster, median, print_table, run_main
from ingestd.cli.search import search
from ingestd.db import sql
from ingestd.db.database import Database, Tx
from ingestd.db.schema import migrate
from ingestd.demo.batches import letter_lines
from ingestd.errors import QueryCanceled
from ingestd.search import limits, tsquery
from ingestd.search.query import name_pattern

# scripts/demo.py's sample scans and hot-folder drops, as their text reads.
SAMPLES = (
    ("Telekom Deutschland GmbH", "Rechnung Nr. 4711", "Datum: 15.10.2026",
     "Betreff: Ihre Rechnung Oktober"),
    ("Stadtwerke Musterstadt", "Berlin, den 3. November 2026",
     "Betreff: Kündigung Mobilfunkvertrag", "Sehr geehrte Damen und Herren,"),
    ("Lieferschein 0815", "Papier A4, 10 Kartons"),
    ("Sprint Planung", "Demo am Freitag"),
    ("Stadtwerke Musterstadt", "Rechnung Strom Oktober", "Betrag 84,20 EUR"),
    ("Telekom Deutschland GmbH", "Bonn, den 24.11.2026", "Betreff: Mahnung",
     "Bitte zahlen Sie die offene Rechnung."),
    ("Vertrag Hausmeisterdienst", "zwischen Hausverwaltung und Firma Meyer"),
)  # fmt: skip

QUERIES = (
    "Rechnung",
    "Rechnungen",
    "Gericht",
    "Kosten",
    "Mobilfunk",
    "Vertrag",
    "Dienst",
    "Rechnung -Versicherung",
    '"Rechnung Nummer"',
)


def _insert(tx: Tx, tenant_id: int, n: int, title: str, pages: list[str]) -> None:
    row = tx.raw(
        "INSERT INTO documents (tenant_id, sha256, size_bytes, mime_type, extension, "
        "original_filename, source, archive_path, title) VALUES (%(t)s, %(sha)s, 1, "
        "'application/pdf', 'pdf', %(name)s, 'cli', %(name)s, %(title)s) RETURNING id",
        {
            "t": tenant_id,
            "sha": hashlib.sha256(f"bench {n}".encode()).hexdigest(),
            "name": f"Scan_{n:05d}.pdf",
            "title": title,
        },
    )
    tx.run(
        "content_upsert",
        {
            "document_id": row[0]["id"],
            "tenant_id": tenant_id,
            "page_count": len(pages),
            "pages": pages,
            "content": "\f".join(pages),
            "languages": "deu+eng",
            "searchable_pdf": None,
            "thumbnail": None,
            "engine": "bench",
            "placeholder_title": None,
            "derived_title": None,
            "derived_issued_date": None,
        },
    )


def populate(db: Database, docs: int) -> int:
    """``docs`` letters and the samples; returns the searched tenant's id."""
    with db.transaction() as tx:
        ids = [tx.raw("INSERT INTO tenants (name, status) VALUES (%(n)s, 'active') RETURNING id",
                      {"n": name})[0]["id"] for name in ("acme", "other")]  # fmt: skip
        for i, lines in enumerate(SAMPLES):
            _insert(tx, ids[0], docs + i, lines[0], ["\n".join(lines)])
        for n in range(docs):
            pages = ["\n".join(letter_lines(n, p)) for p in range(1, 2 + n % 3)]
            _insert(tx, ids[n % 10 == 9], n, letter_lines(n)[1], pages)
    with db.autocommit() as tx:
        tx.raw("VACUUM ANALYZE document_content")
        tx.raw("ANALYZE documents")
    return int(ids[0])


def compound_scan(tx: Tx, tenant_id: int, query: str) -> str:
    """How the plan of the compound tier found its candidates (EXPLAIN ANALYZE)."""
    terms = tx.one("search_terms", {"tenant_id": tenant_id, "query": query})
    assert terms is not None
    params = {
        **terms,
        "tenant_id": tenant_id,
        "limit": 20,
        "compounds": True,
        "name_pattern": name_pattern(query),
    }
    plan = tx.raw("EXPLAIN (ANALYZE, FORMAT JSON) " + sql.query("search"), params)
    found: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        text = str(node.get("Filter", "")) + str(node.get("Recheck Cond", ""))
        if node.get("Index Name") == "idx_document_content_words" or "search_words" in text:
            if node.get("Actual Loops", 0) == 0:
                found.append("not run: exact hits fill the limit")
            elif node.get("Node Type") == "Seq Scan":
                found.append("read the tenant's rows")
            elif node.get("Node Type") == "Bitmap Index Scan":
                found.append("trigram index")
            elif node.get("Recheck Cond") and "search_words" not in node["Recheck Cond"]:
                found.append(f"other index ({node['Recheck Cond'][:30]})")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["QUERY PLAN"][0]["Plan"])
    if not found:
        return "none (no word of 3+ letters)"
    return found[0]


def measure(tx: Tx, tenant_id: int, query: str, compounds: bool, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        search(tx, tenant_id, query, 20, compounds)
        times.append(time.perf_counter() - t0)
    return median(times) * 1000


# (what it is, the query): the worst a user may type, and beyond.
_W32 = [f"w{i:02d}" for i in range(32)]
HOSTILE = (
    ("32 -negated words", " ".join("-" + w for w in _W32)),
    ("16 words or-ed", " or ".join(_W32[:16])),
    ("a 32-word phrase", '"' + " ".join(_W32) + '"'),
    ("16 common infixes or-ed", " or ".join(["ung", "ein", "ech", "ter", "sch", "ich", "der", "ren",
                                       "ber", "ach", "und", "gen", "ten", "ier", "den", "hen"])),
    ("-Rechnung and 31 -infixes", "-Rechnung " + " ".join(
        "-" + w for w in ["ung", "ein", "ech", "ter", "sch", "ich", "der", "ren", "ber", "ach",
                          "und", "gen", "ten", "ier", "den", "hen", "ste", "ver", "ert", "nen",
                          "lic", "ges", "ine", "cht", "eit", "ide", "ind", "nde", "ist", "mer",
                          "tra"])),
    ("500 operator characters", ("&|!():*\\'" * 60)[:500]),
    ("400 stacked negations", "-" * 400 + "Rechnung"),
    ("5,000 -negated words", " ".join(f"-w{i}" for i in range(5000))),
    ("10,000 -negated words", " ".join(f"-w{i}" for i in range(10000))),
    ("33 words", " ".join([*_W32, "w32"])),
)  # fmt: skip


def hostile(db: Database, tenant_id: int, query: str, rounds: int) -> tuple[float, str, int]:
    """(median ms, outcome, hits) of ``query``, each round in a transaction of its own
    (a statement the timeout stopped aborts it)."""
    times, outcome, hits = [], "answered", 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        try:
            with db.transaction() as tx:
                hits = len(search(tx, tenant_id, query, 20, True))
        except limits.QueryRefused as exc:
            outcome = "refused: " + exc.message.split("; ")[-1]
        except QueryCanceled:
            outcome = f"stopped at {limits.STATEMENT_TIMEOUT:g} s"
        times.append(time.perf_counter() - t0)
    return median(times) * 1000, outcome, hits


def hostile_table(db: Database, tenant_id: int, rounds: int) -> None:
    base, _, base_hits = hostile(db, tenant_id, "Rechnung", rounds)
    rows: list[list[object]] = [["baseline: Rechnung", 1, 8, base_hits, f"{base:.1f}", "1.00x",
                                 "answered"]]  # fmt: skip
    worst = 0.0
    for what, query in HOSTILE:
        ms, outcome, hits = hostile(db, tenant_id, query, rounds)
        worst = max(worst, ms)
        rows.append([what, len(tsquery.words(query)), len(query), hits, f"{ms:.1f}",
                     f"{ms / base:.2f}x", outcome])  # fmt: skip
    print()
    print_table(["hostile query", "words", "characters", "hits", "ms (median)",
                 "ratio to baseline", "outcome"], rows)  # fmt: skip
    bound = 2 * limits.STATEMENT_TIMEOUT * 1000 + 1000  # two statements, and a margin
    if worst > bound:
        raise BenchError(f"a hostile query took {worst:.0f} ms, over {bound:.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--small", action="store_true", help="300 documents, 1 round")
    args = ap.parse_args()
    if args.small:
        args.docs, args.rounds = 300, 1
    with bench_cluster(durable=False) as cluster, Database(cluster.conninfo) as db:
        migrate(db)
        t0 = time.perf_counter()
        tenant_id = populate(db, args.docs)
        print(f"{args.docs + len(SAMPLES):,} documents written in {time.perf_counter() - t0:.1f} s")
        rows = []
        with db.transaction() as tx:
            sizes = tx.raw(
                "SELECT pg_size_pretty(pg_relation_size('idx_document_content_words')) AS trgm, "
                "pg_size_pretty(pg_relation_size('idx_document_content_search')) AS fts"
            )[0]
            for query in QUERIES:
                exact = search(tx, tenant_id, query, 10**6, compounds=False)
                both = search(tx, tenant_id, query, 10**6, compounds=True)
                if [r["id"] for r in both[: len(exact)]] != [r["id"] for r in exact]:
                    raise BenchError(f"{query!r}: the exact hits do not come first")
                if any(r["match"] != "compound" for r in both[len(exact) :]):
                    raise BenchError(f"{query!r}: an exact hit ranked below a compound one")
                base = measure(tx, tenant_id, query, False, args.rounds)
                ours = measure(tx, tenant_id, query, True, args.rounds)
                scan = compound_scan(tx, tenant_id, query)
                rows.append([query, len(exact), len(both), f"{base:.1f}", f"{ours:.1f}",
                             f"{ours / base:.2f}x", scan])  # fmt: skip
        print(f"indexes: trigram {sizes['trgm']}, full-text {sizes['fts']}")
        print()
        print_table(
            ["query", "hits full-text", "hits + compounds", "ms full-text (limit 20)",
             "ms + compounds", "ratio (time)", "compound tier"],
            rows,
        )  # fmt: skip
        hostile_table(db, tenant_id, args.rounds)


if __name__ == "__main__":
    run_main(main, "bench")
