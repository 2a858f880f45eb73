"""`ingestd search`: exact full-text hits first, then words found inside compound words
(migration 0013, queries search_terms and search). Documents and their text are written
the way analysis writes them (content_upsert), without OCR; real Postgres."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

import pytest

from ingestd.cli.search import search
from ingestd.db.database import Database
from tests.conftest import Env, run_cli

_seq = itertools.count()


def _tenant(db: Database, name: str) -> int:
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": name, "status": "active"})
        return int(tx.raw("SELECT id FROM tenants WHERE name = %(n)s", {"n": name})[0]["id"])


def _doc(db: Database, tenant_id: int, title: str, *pages: str, name: str | None = None) -> int:
    """A document with ``title`` and OCR text ``pages``, as analysis records it (none:
    not analysed yet); its original file name ``name`` or ``Scan_NNNN.pdf``."""
    n = next(_seq)
    with db.transaction() as tx:
        doc_id = int(
            tx.raw(
                "INSERT INTO documents (tenant_id, sha256, size_bytes, mime_type, extension, "
                "original_filename, source, archive_path, title) VALUES (%(t)s, %(sha)s, 1, "
                "'application/pdf', 'pdf', %(name)s, 'cli', %(name)s, %(title)s) RETURNING id",
                {
                    "t": tenant_id,
                    "sha": hashlib.sha256(f"doc {n}".encode()).hexdigest(),
                    "name": name or f"Scan_{n:04d}.pdf",
                    "title": title,
                },
            )[0]["id"]
        )
        if not pages:
            return doc_id
        tx.run(
            "content_upsert",
            {
                "document_id": doc_id,
                "tenant_id": tenant_id,
                "page_count": len(pages),
                "pages": list(pages),
                "content": "\f".join(pages),
                "languages": "deu+eng",
                "searchable_pdf": None,
                "thumbnail": None,
                "engine": "test",
                "placeholder_title": None,
                "derived_title": None,
                "derived_issued_date": None,
            },
        )
    return doc_id


def _hits(db: Database, tenant_id: int, query: str, **kw: Any) -> list[tuple[int, str]]:
    with db.transaction() as tx:
        return [(r["id"], r["match"]) for r in search(tx, tenant_id, query, **kw)]


@pytest.fixture
def acme(db: Database) -> int:
    return _tenant(db, "acme")


def test_a_word_finds_its_compounds_ranked_below_its_exact_match(
    env: Env, db: Database, acme: int
) -> None:
    """A query for "Rechnung" finds "Abschlagsrechnung" too, below the document that has
    "Rechnung" itself; --exact finds the exact one only; the snippet marks the compound."""
    abschlag = _doc(db, acme, "Stadtwerke", "Ihre Abschlagsrechnung für November")
    exact = _doc(db, acme, "Telekom", "Rechnung Nummer 4711")
    _doc(db, acme, "Mahnung", "Bitte zahlen Sie den offenen Betrag")
    assert _hits(db, acme, "Rechnung") == [(exact, "exact"), (abschlag, "compound")]
    assert _hits(db, acme, "rechnung", compounds=False) == [(exact, "exact")]

    proc = run_cli(env, "search", "--tenant", "acme", "--json", "Rechnung")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["id"], r["match"]) for r in rows] == [(exact, "exact"), (abschlag, "compound")]
    assert "«Abschlagsrechnung»" in rows[1]["snippet"]
    text = run_cli(env, "search", "--tenant", "acme", "Rechnung").stdout
    assert f"{abschlag:>6} ~" in text and f"{exact:>6}  " in text
    only = run_cli(env, "search", "--tenant", "acme", "--exact", "--json", "Rechnung")
    assert [r["id"] for r in json.loads(only.stdout)] == [exact]


def test_inflected_query_and_title_find_compounds(db: Database, acme: int) -> None:
    """The query's stem is looked for too ("Rechnungen" -> "Nebenkostenabrechnung"), in
    the title as in the text; a word no document contains inside another finds nothing."""
    text = _doc(db, acme, "Hausverwaltung", "Die Nebenkostenabrechnung 2025 liegt bei")
    title = _doc(db, acme, "Beitragsrechnung Versicherung", "Allgemeine Versicherung AG")
    assert sorted(_hits(db, acme, "Rechnungen")) == sorted(
        [(text, "compound"), (title, "compound")]
    )
    assert _hits(db, acme, "Gericht") == []


def test_a_negated_word_still_excludes_also_inside_compounds(db: Database, acme: int) -> None:
    """`Rechnung -Strom`: no document with the word Strom (either tier), and no compound
    hit with "strom" inside one of its words (Stromzähler); or and -word as in web search."""
    power = _doc(db, acme, "a", "Rechnung für Strom")
    _doc(db, acme, "b", "Abschlagsrechnung Strom")
    meter = _doc(db, acme, "c", "Abschlagsrechnung, Stand Stromzähler")
    water = _doc(db, acme, "d", "Abschlagsrechnung Wasser")
    exact = _doc(db, acme, "e", "Rechnung für Wasser")
    assert _hits(db, acme, "Rechnung -Strom") == [(exact, "exact"), (water, "compound")]
    assert _hits(db, acme, "Rechnung -Abschlagsrechnung") == [(exact, "exact"), (power, "exact")]
    assert _hits(db, acme, "Rechnung -Wasser -Strom") == []
    assert _hits(db, acme, "Zähler") == [(meter, "compound")]
    assert _hits(db, acme, "Zähler -Strom") == []
    assert _hits(db, acme, "-Abschlagsrechnung")[0] == (exact, "exact")


def test_a_phrase_stays_exact_its_other_words_may_be_compounds(db: Database, acme: int) -> None:
    """A quoted phrase matches whole words in a row only; the query's other words may still
    be found inside compounds (`"Rechnung Nummer" Kunde` finds Kundennummer)."""
    exact = _doc(db, acme, "a", "Rechnung Nummer 4711, Kunde 58")
    compound = _doc(db, acme, "b", "Rechnung Nummer 4712, Kundennummer 59")
    _doc(db, acme, "c", "Abschlagsrechnung Nummer 4713")
    assert sorted(_hits(db, acme, '"Rechnung Nummer"')) == [(exact, "exact"), (compound, "exact")]
    assert _hits(db, acme, '"Rechnung Nummer" Kunde') == [(exact, "exact"), (compound, "compound")]


def test_compounds_stay_within_the_tenant(db: Database, acme: int) -> None:
    """Another tenant's compound (and exact) matches are never found."""
    other = _tenant(db, "other")
    theirs = _doc(db, other, "x", "Abschlagsrechnung und Rechnung")
    mine = _doc(db, acme, "y", "Jahresabrechnung")
    assert _hits(db, acme, "Rechnung") == [(mine, "compound")]
    assert _hits(db, other, "Rechnung") == [(theirs, "exact")]


@pytest.mark.parametrize(
    "query", ["ab", "a", "5", "§", "ab cd", '"', "-", "or", "", "%", "_", "a_", "%ab%"]
)
def test_short_and_odd_terms_match_whole_words_only(db: Database, acme: int, query: str) -> None:
    """Terms of one or two characters, operators alone and LIKE wildcards do not match
    inside words (no trigram to look up: that would be every document); no error."""
    _doc(db, acme, "Abschlag", "Abschlagszahlung ab sofort, a5 cd")
    _doc(db, acme, "Kabel", "Kabelanschluss Grabstein")
    found = _hits(db, acme, query)
    assert all(match == "exact" for _, match in found), found


def test_numbers_are_not_found_inside_longer_numbers(db: Database, acme: int) -> None:
    """An invoice number finds itself, not a longer number that contains it."""
    hit = _doc(db, acme, "a", "Rechnung 4711")
    _doc(db, acme, "b", "Rechnung 147110")
    assert _hits(db, acme, "4711") == [(hit, "exact")]


def test_the_compound_tier_fills_only_the_room_below_the_limit(db: Database, acme: int) -> None:
    """With as many exact hits as the limit, no compound hit is shown (they rank below);
    with fewer, compound hits fill up to the limit."""
    exact = [_doc(db, acme, f"e{i}", "Rechnung") for i in range(3)]
    compound = [_doc(db, acme, f"c{i}", "Abschlagsrechnung") for i in range(3)]
    assert _hits(db, acme, "Rechnung", limit=3) == [(d, "exact") for d in reversed(exact)]
    assert _hits(db, acme, "Rechnung", limit=5) == [
        *((d, "exact") for d in reversed(exact)),
        *((d, "compound") for d in reversed(compound[1:])),
    ]


def test_the_original_file_name_finds_a_document_whatever_its_title_became(
    env: Env, db: Database, acme: int
) -> None:
    """`search Scan_0815` finds the scan whose title became the letter's sender (and one
    not analysed yet) by its original file name, in any case, ranked above text hits and
    listed once; the plain output shows the name; a short query matches no names, the
    limit holds, another tenant's file is not found."""
    renamed = _doc(db, acme, "Müller GmbH", "Sehr geehrte Damen und Herren", name="Scan_0815.pdf")
    waiting = _doc(db, acme, "Scan_0815 (1)", name="scan_0815 (1).pdf")
    _doc(db, acme, "Scan_08150", "nothing", name="Scan_X0815.pdf")
    text_hit = _doc(db, acme, "Notiz", "siehe Scan_0815 im Anhang", name="Notiz.pdf")
    other = _tenant(db, "other")
    _doc(db, other, "Fremd", "fremd", name="Scan_0815.pdf")
    assert _hits(db, acme, "Scan_0815") == [
        (waiting, "name"), (renamed, "name"), (text_hit, "exact")
    ]  # fmt: skip
    assert _hits(db, acme, "SCAN_0815.PDF") == [(renamed, "name")]
    assert _hits(db, acme, "Scan_0815", limit=1) == [(waiting, "name")]
    assert _hits(db, acme, "Sc") == []
    proc = run_cli(env, "search", "--tenant", "acme", "Scan_0815.pdf")
    assert proc.returncode == 0, proc.stderr
    assert f"{renamed:>6} =" in proc.stdout and "Müller GmbH  [Scan_0815.pdf]" in proc.stdout
