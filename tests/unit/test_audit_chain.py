"""The chain rules without a database: hashing, the checker's positions, what may be
recorded."""

from __future__ import annotations

import json

from ingestd.archive.audit import GENESIS, entry_hash, recordable
from ingestd.archive.audit_checker import AuditProblem, ChainChecker


def _chain(n: int, chain: int = 7) -> list[dict[str, object]]:
    rows, prev = [], GENESIS
    for seq in range(1, n + 1):
        body = json.dumps({"chain": chain, "seq": seq, "kind": "document.refused",
                           "tenant": "acme", "document": None, "detail": {}})  # fmt: skip
        h = entry_hash(prev, body)
        columns = {"kind": "document.refused", "tenant": "acme", "document_id": None}
        rows.append({"seq": seq, "body": body, "prev_hash": prev, "hash": h, **columns})
        prev = h
    return rows


def _check(rows: list[dict[str, object]], chain: int = 7) -> list[AuditProblem]:
    problems: list[AuditProblem] = []
    checker = ChainChecker(problems)
    for row in rows:
        checker.feed(chain, row)
    return problems


def test_an_intact_chain_has_no_problems() -> None:
    """Every entry hashes to its hash and follows the one before it."""
    assert _check(_chain(50)) == []


def test_a_gap_is_reported_once_at_the_first_missing_position() -> None:
    """Entries 4 to 6 deleted: one `missing` problem at 4, nothing more."""
    rows = [r for r in _chain(10) if r["seq"] not in (4, 5, 6)]
    (p,) = _check(rows)
    assert (p.kind, p.seq) == ("missing", 4) and "4 to 6" in p.detail


def test_a_body_replaced_with_a_fitting_hash_breaks_the_next_link() -> None:
    """Entry 3 rewritten and re-hashed: entry 4 no longer follows it."""
    rows = _chain(6)
    body = str(rows[2]["body"]).replace("refused", "archived")
    rows[2] = {**rows[2], "body": body, "hash": entry_hash(str(rows[2]["prev_hash"]), body),
               "kind": "document.archived"}  # fmt: skip
    assert [(p.kind, p.seq) for p in _check(rows)] == [("unlinked", 4)]


def test_hostile_names_become_recordable_text() -> None:
    """Undecodable bytes and NUL are escaped; plain text and structure are kept."""
    name = b"Scan-\xff\x00.pdf".decode("utf-8", "surrogateescape")
    assert recordable({"f": [name], "n": 3, "ok": "Brief"}) == {
        "f": ["Scan-\\xff\\x00.pdf"],
        "n": 3,
        "ok": "Brief",
    }


def test_class_years_is_the_longest_matching_rule_else_the_default() -> None:
    """The job child's reading of the rules agrees with the database's retention_years."""
    from ingestd.archive.retention import class_years, policy_for
    from ingestd.config.settings import RetentionConfig

    config = RetentionConfig.model_validate(
        {
            "years": 10,
            "rules": [
                {"tenant": "acme", "match": "document_type", "name": "Beleg", "years": 8},
                {"match": "tag", "name": "Korrespondenz", "years": 6},
            ],
        }
    )
    acme, other = policy_for(config, "acme"), policy_for(config, "globex")
    none: dict[str, str | None] = {"document_type": None, "correspondent": None}
    assert class_years(acme, tags=[], **none) == 10
    assert class_years(acme, tags=["korrespondenz"], **none) == 6
    assert class_years(acme, tags=["Korrespondenz"], document_type="BELEG", correspondent=None) == 8
    assert class_years(other, tags=[], document_type="Beleg", correspondent=None) == 10
