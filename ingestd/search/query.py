"""The search itself: a query checked against the limits, then its terms and hits, each
statement under the search's statement timeout.

Results: documents whose original file name holds the query as typed first (``name``),
then exact hits, then compound ones (``match`` says which), each with
rank and snippet (queries search_terms and search, migration 0013). A statement that runs past
the timeout is cancelled by PostgreSQL; the caller's transaction then ends with
``QueryCanceled`` (ingestd/errors.py), which the command shows as ``SearchTooSlow``.
"""

from __future__ import annotations

from ingestd.db.database import Row, Tx
from ingestd.search import limits, tsquery


def search(
    tx: Tx, tenant_id: int, query: str, limit: int = 20, compounds: bool = True
) -> list[Row]:
    """The tenant's documents matching ``query``: exact hits first, then compound ones,
    at most ``limit``. QueryRefused before any statement when a limit is passed."""
    limits.checked(query)
    timeout = f"{int(limits.STATEMENT_TIMEOUT * 1000)}ms"
    was = tx.one("search_timeout_set", {"timeout": timeout})
    assert was is not None  # one row always
    text = tsquery.websearch_text(query)
    terms = tx.one("search_terms", {"tenant_id": tenant_id, "query": text})
    assert terms is not None  # one row always
    params = {
        **terms,
        "tenant_id": tenant_id,
        "limit": limit,
        "compounds": compounds,
        "name_pattern": name_pattern(query),
    }
    rows = tx.all("search", params)
    tx.one("search_timeout_set", {"timeout": was["was"]})  # the caller's, for what follows
    return rows


# A name hit needs this many characters: shorter ones have no trigram to look up (and
# match half the names).
MIN_NAME_CHARS = 3


def name_pattern(query: str) -> str | None:
    """The LIKE pattern that finds ``query`` as typed inside a file name (``%Scan\\_0815%``:
    its ``%``, ``_`` and ``\\`` literal), None for a query under MIN_NAME_CHARS."""
    text = query.strip()
    if len(text) < MIN_NAME_CHARS:
        return None
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
