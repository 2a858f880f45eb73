"""The words a search's limits count and the text websearch_to_tsquery gets: at most one
'-' in each gap between words, whatever separates them (ingestd/search/tsquery.py)."""

from __future__ import annotations

import pytest

from ingestd.search import tsquery


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("Rechnung -Strom", "Rechnung -Strom"),
        ("E-Mail-Adresse", "E-Mail-Adresse"),
        ("x -- y", "x - y"),
        ("-" * 40 + "x", "-x"),
        ("a-(-(-(-b", "a(((-b"),
        ("-_-_-_x", "__-_x"),
        ("-\u00b2-\u00b2x", "\u00b2-\u00b2x"),
    ],
)
def test_each_gap_keeps_one_dash_at_most(query: str, text: str) -> None:
    """Stacked negations collapse to the last '-' of their gap; hyphens in words stay."""
    assert tsquery.websearch_text(query) == text


def test_words_are_letters_and_decimal_digits() -> None:
    """Phrases, negations and hyphenated words count each word; operators and '_' none."""
    assert tsquery.words('"Rechnung Nummer" -Strom E-Mail or 4711') == [
        "Rechnung", "Nummer", "Strom", "E", "Mail", "or", "4711",
    ]  # fmt: skip
    assert tsquery.words("&|!():*\\ _ \u00b2") == []
