"""How a typed query becomes a tsquery, and the words it is counted by.

The text is never spliced into tsquery syntax: it goes to PostgreSQL as a bound value of
``websearch_to_tsquery`` (query search_terms), which reads quotes, ``or`` and ``-word``
and ignores every other operator character (``&|!():*\\``). Two things are done to it
first, both over the same split into words and the gaps between them (a word: letters
and decimal digits, which is what PostgreSQL's parser reads as a word in a UTF-8
database; ``_``, ``²``, ``½`` and marks are gaps to both):

- ``websearch_text``: in each gap at most one ``-`` is kept, the last. PostgreSQL stacks
  one NOT for each ``-`` before a word (``--x`` is ``!!x``), and 33 of them overflow its
  parser ("tsquery stack too small", an internal error): ``------x`` means ``-x`` here,
  a double negation nothing.
- ``words``: the words the limits count, so ``"a b"``, ``-a`` and ``a-b`` are two each
  (``or`` counts too).
"""

from __future__ import annotations

from itertools import groupby


def _is_word(c: str) -> bool:
    return c.isalpha() or c.isdecimal()


def _parts(query: str) -> list[tuple[bool, str]]:
    """``query`` as (is a word, text) runs, words and gaps alternating."""
    return [(word, "".join(chars)) for word, chars in groupby(query, _is_word)]


def words(query: str) -> list[str]:
    """The query's words: what websearch_to_tsquery makes lexemes of (``or`` included)."""
    return [text for word, text in _parts(query) if word]


def _one_dash(gap: str) -> str:
    last = gap.rfind("-")
    if last <= 0 or "-" not in gap[:last]:
        return gap
    return gap[:last].replace("-", "") + gap[last:]


def websearch_text(query: str) -> str:
    """``query`` with at most one ``-`` in each gap between words (the last one kept)."""
    return "".join(text if word else _one_dash(text) for word, text in _parts(query))
