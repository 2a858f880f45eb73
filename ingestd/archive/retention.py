"""Retention by document class, and legal holds: what may be removed, and when.

A tenant's policy is its default years plus the rules of ``[[retention.rules]]`` that
apply to it; a document is kept for the longest period of the rules that match it (else
the default) to the end of the calendar year that many years after the year of its
ingest. A legal hold (on the document or its whole tenant) keeps it regardless. The
database computes this (``retention_years``, ``retention_until`` in migration 0011) so
one tenant's million documents are counted in one query.

The policy applied is recorded: whenever the rules a tenant is judged by differ from the
last ones recorded, the decision's transaction appends ``retention.changed`` first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from ingestd.archive import audit
from ingestd.archive.audit import AuditKind
from ingestd.config.settings import RetentionConfig
from ingestd.db.database import Tx, jsonb
from ingestd.errors import ExitCode, IngestdError


class RetentionRefused(IngestdError):
    """Removal refused: within retention or under a legal hold; nothing was removed."""

    exit_code = ExitCode.refused


@dataclass(frozen=True, slots=True)
class Policy:
    default_years: int
    rules: tuple[tuple[str, str, int], ...]  # (match, name, years)

    def as_json(self) -> dict[str, Any]:
        return {
            "default_years": self.default_years,
            "rules": [{"kind": k, "name": n, "years": y} for k, n, y in self.rules],
        }

    def params(self) -> dict[str, Any]:
        return {"rules": jsonb(self.as_json()["rules"]), "default_years": self.default_years}

    @property
    def fingerprint(self) -> str:
        text = json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Blockers:
    """What keeps a tenant's documents: counts and the earliest expiry."""

    retained: int
    earliest_expiry: date | None
    held: int
    tenant_holds: int

    @property
    def none(self) -> bool:
        return self.retained == 0 and self.held == 0 and self.tenant_holds == 0

    def describe(self) -> str:
        parts = []
        if self.retained:
            assert self.earliest_expiry is not None
            parts.append(
                f"{self.retained} document(s) are within retention "
                f"(the earliest expires after {self.earliest_expiry.isoformat()})"
            )
        if self.held or self.tenant_holds:
            what = "the tenant is under a legal hold" if self.tenant_holds else ""
            docs = f"{self.held} document(s) under legal hold" if self.held else ""
            parts.append(", ".join(p for p in (what, docs) if p))
        return "; ".join(parts)


def lock_until(archived: datetime, years: int) -> datetime | None:
    """The Object Lock date of a file archived at ``archived`` kept ``years`` (the first
    moment after 31 December of year + years), None for no retention. The tenant's
    default: a class known later may only lengthen it (locks are never shortened)."""
    if years <= 0:
        return None
    return datetime(archived.year + years + 1, 1, 1, tzinfo=UTC)


def policy_for(config: RetentionConfig, tenant: str) -> Policy:
    rules = tuple(sorted((r.match, r.name.lower(), r.years) for r in config.rules_for(tenant)))
    return Policy(config.years_for(tenant), rules)


def class_years(
    policy: Policy, *, tags: Iterable[str], document_type: str | None, correspondent: str | None
) -> int:
    """A document's period from what analysis knows of it, before it is written: the same
    rule as the database's ``retention_years`` (longest matching rule, else the default),
    for the one decision taken in the job child: how long to lock its original."""
    names = {t.lower() for t in tags}
    matching = [
        years
        for kind, name, years in policy.rules
        if (kind == "tag" and name in names)
        or (kind == "document_type" and document_type and name == document_type.lower())
        or (kind == "correspondent" and correspondent and name == correspondent.lower())
    ]
    return max(matching) if matching else policy.default_years


def record_policy(tx: Tx, tenant_id: int, tenant: str, policy: Policy) -> bool:
    """Append ``retention.changed`` if ``policy`` is not the one last recorded for the
    tenant (the first decision after a config change); True if it was recorded now."""
    known = tx.one("retention_policy_of", {"tenant_id": tenant_id})
    if known is not None and known["fingerprint"] == policy.fingerprint:
        return False
    tx.run(
        "retention_policy_record",
        {
            "tenant_id": tenant_id,
            "fingerprint": policy.fingerprint,
            "policy": jsonb(policy.as_json()),
        },
    )
    audit.append(
        tx,
        chain=tenant_id,
        tenant=tenant,
        kind=AuditKind.retention_changed,
        detail={**policy.as_json(), "previous": known["fingerprint"] if known else None},
    )
    return True


def document_retention(
    tx: Tx, tenant_id: int, document_id: int, policy: Policy
) -> dict[str, Any] | None:
    """One document's years, last day kept (None: no retention) and hold."""
    rows = tx.all(
        "retention_documents",
        {**policy.params(), "tenant_id": tenant_id, "document_id": document_id},
    )
    return dict(rows[0]) if rows else None


def blockers(tx: Tx, tenant_id: int, policy: Policy, today: date) -> Blockers:
    row = tx.one("retention_summary", {**policy.params(), "tenant_id": tenant_id, "today": today})
    assert row is not None
    return Blockers(
        int(row["retained"]), row["earliest_expiry"], int(row["held"]), int(row["tenant_holds"])
    )
