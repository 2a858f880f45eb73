"""Reading arrivals: ``documents find`` (which files arrived) and ``trace`` (one file's
whole story), answered from the database alone, never from a log.

A story is a list of steps, one line each with its time: the arrival, the decision
(archived, duplicate, refused, quarantined, waiting), then for an archived file its
document's jobs (analysis, split, webhook deliveries) with their attempts and errors, the
operator events (notifications are relayed from them) and the audit entries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ingestd.arrivals.record import OUTCOMES
from ingestd.db.database import Database, Tx
from ingestd.errors import UsageError

MAX_FOUND = 10_000  # --limit's ceiling
# What an audit entry of the document means, for the helpdesk.
AUDIT_SAID = {
    "document.archived": " (recorded in the archive's trail)",
    "document.duplicate": " (the same content arrived again, as another file)",
    "document.split": " (a batch cut into its documents)",
    "document.purged": " (removed after its retention)",
    "hold.set": " (a legal hold)",
    "hold.released": " (the legal hold lifted)",
}


def check_status(status: str | None) -> str | None:
    """``--status``: an arrival outcome or a document's processing status."""
    known = (*OUTCOMES, "queued", "processing", "done", "failed", "attention")
    if status is not None and status not in known:
        raise UsageError(f"--status must be one of {', '.join(known)} (got {status!r})")
    return status


def find(
    db: Database,
    *,
    tenant: str | None = None,
    name_like: str | None = None,
    source: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    status: str | None = None,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """Arrivals (and documents from before arrivals were recorded) matching every filter
    given, newest first; ``name_like`` a lower-case LIKE pattern (cli/timebounds.py)."""
    params = {
        "tenant": tenant,
        "name": name_like,
        "source": source,
        "since": since,
        "until": until,
        "status": check_status(status),
        "limit": max(1, min(limit, MAX_FOUND)),
    }
    with db.transaction() as tx:
        return [dict(r) for r in tx.all("arrivals_find", params)]


@dataclass(frozen=True)
class Step:
    """One line of a story."""

    at: datetime | None
    what: str  # a short word: arrived, archived, job, delivery, notification, audit ...
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat() if self.at else None,
            "what": self.what,
            "text": self.text,
        }


@dataclass
class Story:
    """One file's story: its arrival row (None for a document without one) and steps."""

    tenant: str
    name: str
    trace_id: str | None
    outcome: str
    document_id: int | None
    arrival: dict[str, Any] | None = None
    steps: list[Step] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "name": self.name,
            "trace_id": self.trace_id,
            "outcome": self.outcome,
            "document_id": self.document_id,
            "arrival": _jsonable(self.arrival) if self.arrival is not None else None,
            "steps": [s.as_dict() for s in self.steps],
        }


def _jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}


def stories(db: Database, key: str, *, tenant: str | None = None, limit: int = 20) -> list[Story]:
    """The stories ``key`` stands for: a trace id, a document id (digits) or a file name
    (case-insensitive, whole name), newest first. Empty: nothing of that name or id."""
    doc_id = int(key) if key.isdigit() else None
    with db.transaction() as tx:
        rows = tx.all(
            "arrivals_for_trace",
            {"key": key, "document_id": doc_id, "tenant": tenant, "limit": limit},
        )
        found = [_from_arrival(tx, dict(r)) for r in rows]
        if not found and doc_id is not None:
            doc = tx.one("trace_document", {"id": doc_id})
            if doc is not None and (tenant is None or doc["tenant"] == tenant):
                found.append(_from_document(tx, dict(doc)))
    return found


def _source_text(row: Mapping[str, Any]) -> str:
    origin = f" {row['origin']}" if row.get("origin") else ""
    sub = f", folder {row['subdir']}" if row.get("subdir") else ""
    return f"{row['source']}{origin}{sub}"


def _from_arrival(tx: Tx, a: dict[str, Any]) -> Story:
    story = Story(
        tenant=a["tenant"],
        name=a["original_name"],
        trace_id=a["trace_id"],
        outcome=a["outcome"],
        document_id=a["document_id"],
        arrival=a,
    )
    size = f", {a['size_bytes']} bytes" if a["size_bytes"] is not None else ""
    story.steps.append(Step(a["arrived_at"], "arrived", f"via {_source_text(a)}{size}"))
    outcome, why = a["outcome"], _why(a)
    doc = tx.one("trace_document", {"id": a["document_id"]}) if a["document_id"] else None
    if outcome == "archived":
        sha = f", sha256 {a['sha256'][:16]}…" if a["sha256"] else ""
        where = f", kept as {doc['archive_path']}" if doc is not None else " (since removed)"
        story.steps.append(
            Step(
                a["decided_at"],
                "archived",
                f"checked and archived as document {a['document_id']}{sha}{where}",
            )
        )
        if doc is not None:
            story.steps.extend(_document_steps(tx, dict(doc)))
    elif outcome == "duplicate":
        first = f": {doc['title']!r}, archived {doc['created_at']:%Y-%m-%d %H:%M}" if doc else ""
        story.steps.append(
            Step(
                a["decided_at"],
                "duplicate",
                f"same content as document {a['document_id']}{first}; not archived again",
            )
        )
    elif outcome == "refused":
        story.steps.append(Step(a["decided_at"], "refused", why))
    elif outcome == "quarantined":
        where = f"; moved to {a['location']}" if a["location"] else ""
        story.steps.append(Step(a["decided_at"], "quarantined", f"{why}{where}"))
    else:
        story.steps.append(
            Step(
                a["decided_at"],
                "waiting",
                f"{why}; the file stays at its source and is tried again",
            )
        )
    story.steps.extend(_event_steps(tx, a["trace_id"]))
    story.steps.sort(key=lambda s: s.at or datetime.min.replace(tzinfo=UTC))
    return story


def _why(a: Mapping[str, Any]) -> str:
    reason, detail = a["reason"] or "", a["detail"] or ""
    return f"{reason}: {detail}" if reason and detail else reason or detail or "no reason given"


def _from_document(tx: Tx, doc: dict[str, Any]) -> Story:
    story = Story(
        tenant=doc["tenant"],
        name=doc["original_filename"],
        trace_id=doc["trace_id"],
        outcome="archived",
        document_id=doc["id"],
    )
    story.steps.append(
        Step(
            doc["created_at"],
            "archived",
            f"archived from {doc['source']} as document "
            f"{doc['id']}, kept as {doc['archive_path']} (no arrival row: recorded before "
            "arrivals were)",
        )
    )
    story.steps.extend(_document_steps(tx, doc))
    if doc["trace_id"]:
        story.steps.extend(_event_steps(tx, doc["trace_id"]))
    story.steps.sort(key=lambda s: s.at or datetime.min.replace(tzinfo=UTC))
    return story


def _document_steps(tx: Tx, doc: Mapping[str, Any]) -> list[Step]:
    steps = []
    for j in tx.all("trace_jobs", {"id": doc["id"]}):
        what = "delivery" if str(j["kind"]).startswith("deliver") else "job"
        attempts = int(j["retry_count"]) + (1 if j["status"] in ("done", "failed") else 0)
        text = f"job {j['id']} {j['kind']}: {j['status']}"
        if attempts:
            text += f" after {attempts} attempt{'s' if attempts != 1 else ''}"
        if j["error_message"]:
            text += f"; last error: {j['error_message']}"
        steps.append(Step(j["created_at"], what, f"job {j['id']} {j['kind']} queued"))
        done_at = j["finished_at"] or j["updated_at"]
        if j["status"] != "queued" or j["retry_count"]:
            steps.append(Step(done_at, what, text))
    status = doc["processing_status"]
    if status == "attention":
        steps.append(Step(None, "attention", f"needs attention: {doc['attention_reason']}"))
    for e in tx.all("trace_audit", {"id": doc["id"], "tenant": doc["tenant"]}):
        said = AUDIT_SAID.get(str(e["kind"]), "")
        steps.append(Step(e["at"], "audit", f"audit entry {e['seq']}: {e['kind']}{said}"))
    return steps


def _event_steps(tx: Tx, trace: str) -> list[Step]:
    steps = []
    for ev in tx.all("trace_events", {"trace_id": trace}):
        detail = ev["detail"] if isinstance(ev["detail"], dict) else json.loads(ev["detail"])
        sent = (
            f"; passed to the notification sinks at {ev['relayed_at']:%Y-%m-%d %H:%M:%S}"
            if ev["relayed_at"]
            else "; not yet passed to the notification sinks"
        )
        what = detail.get("reason") or detail.get("detail") or ""
        steps.append(
            Step(ev["created_at"], "notification", f"{ev['type']} ({ev['severity']}) {what}{sent}")
        )
    return steps


def rows_for_print(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts (times in ISO 8601)."""
    return [_jsonable(r) for r in rows]
