"""What a search query may hold, and how long one may run.

A query is refused before it reaches the database when it is longer than
``MAX_QUERY_CHARS`` characters, has more than ``MAX_TERMS`` words, or holds what
PostgreSQL cannot take as text (a NUL, bytes that are not UTF-8). Within these limits
every statement of a search runs under ``STATEMENT_TIMEOUT`` (query.py): 10,000 negated
words once took PostgreSQL 1.9 GB and the command a crash, 5,000 of them 7-9 s.
"""

from __future__ import annotations

from ingestd.errors import UsageError
from ingestd.search import tsquery

MAX_QUERY_CHARS = 500
MAX_TERMS = 32
STATEMENT_TIMEOUT = 5.0  # seconds, each statement of one search


class QueryRefused(UsageError):
    """A query over a limit or with characters no search can use (exit 2): nothing was
    searched; the message names the limit."""


class SearchTooSlow(UsageError):
    """A search stopped at ``STATEMENT_TIMEOUT`` (exit 2): a narrower query answers."""

    def __init__(self) -> None:
        super().__init__(
            f"search stopped after {STATEMENT_TIMEOUT:g} s (the limit of one search): "
            "use fewer or more specific words, fewer -negations"
        )


def checked(query: str) -> str:
    """``query`` if a search may run it, else QueryRefused naming the limit."""
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:  # argv bytes that are not UTF-8 (surrogateescape)
        bad = query[exc.start].encode("utf-8", "surrogateescape")
        raise QueryRefused(
            f"the query is not UTF-8 text (byte {bad!r} at character {exc.start + 1})"
        ) from None
    if "\x00" in query:
        raise QueryRefused(f"the query holds a NUL character (at {query.index(chr(0)) + 1})")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryRefused(
            f"the query has {len(query):,} characters; a search takes at most "
            f"{MAX_QUERY_CHARS} characters"
        )
    n = len(tsquery.words(query))
    if n > MAX_TERMS:
        raise QueryRefused(f"the query has {n} words; a search takes at most {MAX_TERMS} words")
    return query
