"""`ingestd search` is bounded: a query over the length or word limit, or holding what no
search can use (NUL, bytes that are not UTF-8), is refused with exit 2 and one line naming
the limit before the database is asked; hostile operator characters answer at once; a
statement that runs past the search's timeout ends with a clear line, never exit 4 or a
traceback. Real Postgres, the CLI as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ingestd.db.database import Database, connect_once
from ingestd.search import limits
from ingestd.search.query import search
from tests.conftest import Env, run_cli
from tests.integration.test_search import _doc, _tenant


@pytest.fixture
def acme(db: Database) -> int:
    """The tenant 'acme' with a few letters to search."""
    tenant_id = _tenant(db, "acme")
    _doc(db, tenant_id, "Stadtwerke", "Ihre Abschlagsrechnung für November")
    _doc(db, tenant_id, "Telekom", "Rechnung Nummer 4711")
    _doc(db, tenant_id, "Mahnung", "Bitte zahlen Sie den offenen Betrag")
    return tenant_id


def _refused(proc: subprocess.CompletedProcess[str], words: str) -> None:
    """Exit 2 and one stderr line that says ``words``, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_query_longer_than_the_limit_is_refused(env: Env, acme: int) -> None:
    """501 characters: exit 2, the line names the 500-character limit; 500 are searched."""
    _refused(run_cli(env, "search", "--tenant", "acme", "x" * 501), "at most 500")
    ok = run_cli(env, "search", "--tenant", "acme", "--json", "x" * 500)
    assert ok.returncode == 0 and json.loads(ok.stdout) == [], ok.stderr


def test_a_query_with_too_many_words_is_refused(env: Env, acme: int) -> None:
    """33 words: exit 2 naming the 32-word limit; 32 words are searched."""
    words = [f"w{i}" for i in range(33)]
    _refused(run_cli(env, "search", "--tenant", "acme", " ".join(words)), "at most 32 words")
    ok = run_cli(env, "search", "--tenant", "acme", "--json", " ".join(words[:32]))
    assert ok.returncode == 0 and json.loads(ok.stdout) == [], ok.stderr


@pytest.mark.parametrize("count", [5_000, 10_000])
def test_thousands_of_negated_words_are_refused_at_once(env: Env, acme: int, count: int) -> None:
    """5,000 and 10,000 -negated words (once 7-9 s, then 1.9 GB and exit 4) are refused
    with exit 2 and the limit named, in far less than the time they used to take."""
    query = " ".join(f"-w{i}" for i in range(count))
    t0 = time.monotonic()
    proc = run_cli(env, "search", "--tenant", "acme", "--", query)
    assert time.monotonic() - t0 < 60  # a bound for a busy machine; ~1 s is the norm
    _refused(proc, "at most 500")


def test_the_most_negations_allowed_answer_within_the_timeout(env: Env, acme: int) -> None:
    """32 -negated words (the word limit, under 500 characters) are searched and answered:
    every document without them, no error."""
    query = " ".join(f"-n{i:02d}" for i in range(32))
    assert len(query) <= limits.MAX_QUERY_CHARS
    proc = run_cli(env, "search", "--tenant", "acme", "--json", "--", query)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 3


@pytest.mark.parametrize(
    "query",
    [
        "'",
        "''''",
        '"""',
        "&|!():*\\",
        "&" * 500,
        "Rechnung & | ! ( ) : * \\",
        "Rechnung:*",
        "!Rechnung",
        "'Rechnung' | 'x' & !'y'",
        "(((((((((((((((((((((Rechnung",
        "\\' OR 1=1 --",
        '"Rechnung Nummer',
        "-" * 400,
        "Rechnung " + "-" * 40 + "Strom",
        "a" + "-(" * 40 + "b",
        "-_" * 40 + "x",
        "-\u00b2" * 20 + "x",
        "or or or",
        "Rechnung\t\n\r\x0b\x0c\x1f",
    ],
)
def test_hostile_characters_answer_at_once(env: Env, acme: int, query: str) -> None:
    """Quotes, tsquery operators, backslashes, an unclosed phrase, controls, 40 stacked
    negations (once PostgreSQL's "tsquery stack too small", exit 4): a plain answer (exit
    0, JSON), never a syntax error; operators are not tsquery syntax here."""
    proc = run_cli(env, "search", "--tenant", "acme", "--json", "--", query)
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout), list)


def test_bytes_that_are_not_utf8_are_refused(env: Env, acme: int) -> None:
    """A query of bytes that are not UTF-8 (a Latin-1 terminal): exit 2 naming the byte,
    not an encoding traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "ingestd.cli", "search", "--config", str(env.config_path),
         "--tenant", "acme", b"Rechnung f\xfcr Strom"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )  # fmt: skip
    _refused(proc, "not UTF-8")
    assert "\\xfc" in proc.stderr


def test_nul_and_limits_are_refused_by_search_itself(db: Database, acme: int) -> None:
    """The function every caller uses refuses a NUL (no argv can carry one), an overlong
    query and too many words before any statement: the transaction stays usable."""
    with db.transaction() as tx:
        for query, words in (
            ("Rechnung\x00", "NUL"),
            ("x" * 501, "at most 500"),
            (" ".join("w" * 3 for _ in range(40)), "at most 32"),
        ):
            with pytest.raises(limits.QueryRefused, match=words):
                search(tx, acme, query)
        assert [r["match"] for r in search(tx, acme, "Rechnung")] == ["exact", "compound"]


def test_a_search_past_the_timeout_ends_with_a_clear_line(env: Env, db_url: str, acme: int) -> None:
    """A search that cannot finish (another session holds its table locked) is stopped by
    the statement timeout: exit 2 and one line saying so, not exit 4, not a hang."""
    with connect_once(db_url) as locker:
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE document_content IN ACCESS EXCLUSIVE MODE")
        t0 = time.monotonic()
        proc = run_cli(env, "search", "--tenant", "acme", "Rechnung")
        took = time.monotonic() - t0
        locker.execute("ROLLBACK")
    _refused(proc, f"stopped after {limits.STATEMENT_TIMEOUT:g} s")
    assert took >= limits.STATEMENT_TIMEOUT
    assert took < 100  # run_cli's own bound is 120 s; a hang would hit it


def test_limit_outside_its_range_is_a_usage_error(env: Env, acme: int) -> None:
    """--limit 0, -1 or above the maximum: argparse's exit 2, not a database error."""
    for value in ("0", "-1", "1000001"):
        proc = run_cli(env, "search", "--tenant", "acme", "--limit", value, "Rechnung")
        assert proc.returncode == 2 and "--limit" in proc.stderr, proc.stderr
