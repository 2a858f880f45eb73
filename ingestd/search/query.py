"""The search itself: a query checked against the limits, then its terms and hits, each
statement under the search's statement timeout.

Results: exact hits first, then compound ones (``match`` says which), each with rank and
snippet (queries search_terms and search, migration 0013). A statement that runs past
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
    params = {**terms, "tenant_id": tenant_id, "limit": limit, "compounds": compounds}
    rows = tx.all("search", params)
    tx.one("search_timeout_set", {"timeout": was["was"]})  # the caller's, for what follows
    return rows
