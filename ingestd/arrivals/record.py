"""Writing arrivals: one row per file that reached a source, keyed by its trace id.

Three writers, one row shape (``Arrival``):

- intake, inside its own transaction: archived and duplicate (query ``arrival_intake``,
  queued with the COMMIT) and refused (with the refusal's audit entry);
- the sources, through the operator event log (``ingestd/events/outbox.py``) as events of
  type ``arrival.<outcome>``: quarantined (after the move), waiting (tenant not active,
  database down) and the SFTP server's refusals. The event log writes them at once or,
  with the database down, into its on-disk buffer and from there once it is back; its
  events of these types go to the ``arrivals`` table, never to the notification outbox;
- the row is an upsert by trace id (``arrival_upsert``): a retry, a second flush after a
  crash or the archived row after a waiting one never make a second row, and a waiting
  row never undoes a decision.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ingestd.textsafe import recordable_text

# Operator events of these types are arrivals (``EventLog`` writes them to ``arrivals``).
EVENT_PREFIX = "arrival."


class ArrivalOutcome(enum.StrEnum):
    """What became of a file that reached a source (arrivals.outcome)."""

    archived = "archived"
    duplicate = "duplicate"
    refused = "refused"
    quarantined = "quarantined"
    waiting = "waiting"


OUTCOMES = tuple(str(o) for o in ArrivalOutcome)


def split_source(source: str) -> tuple[str, str]:
    """``sftp:scanner-1`` -> (``sftp``, ``scanner-1``); ``cli`` -> (``cli``, ``""``)."""
    kind, _, origin = source.partition(":")
    return kind, origin


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Arrival:
    """One arrival row as written (``arrival_note``); ``source`` is ``kind[:origin]``."""

    trace_id: str
    tenant: str
    source: str
    name: str
    outcome: ArrivalOutcome
    subdir: str = ""
    size: int | None = None
    sha256: str | None = None
    arrived_at: datetime | None = None
    decided_at: datetime | None = None
    document_id: int | None = None
    reason: str = ""
    detail: str = ""
    location: str | None = None

    def params(self) -> dict[str, Any]:
        """The ``arrival_note`` parameters."""
        kind, origin = split_source(self.source)
        decided = self.decided_at or now()
        return {
            "trace_id": recordable_text(self.trace_id),
            "tenant": recordable_text(self.tenant),
            "source": kind,
            "origin": recordable_text(origin),
            "subdir": recordable_text(self.subdir),
            "original_name": recordable_text(self.name),
            "size_bytes": self.size,
            "sha256": self.sha256,
            "arrived_at": self.arrived_at or decided,
            "decided_at": decided,
            "outcome": str(self.outcome),
            "document_id": self.document_id,
            "reason": recordable_text(self.reason),
            "detail": recordable_text(self.detail),
            "location": recordable_text(self.location) if self.location is not None else None,
        }

    def event_type(self) -> str:
        return f"{EVENT_PREFIX}{self.outcome}"

    def event_detail(self) -> dict[str, Any]:
        """The detail of its ``arrival.<outcome>`` event (times as ISO text, for JSON)."""
        body = asdict(self)
        body["outcome"] = str(self.outcome)
        decided = self.decided_at or now()
        body["decided_at"] = decided.isoformat()
        body["arrived_at"] = (self.arrived_at or decided).isoformat()
        return body


def from_event(detail: Mapping[str, Any]) -> Arrival:
    """The arrival an ``arrival.<outcome>`` event's detail holds (ValueError/KeyError/
    TypeError when it is not one)."""
    outcome = ArrivalOutcome(str(detail["outcome"]))
    size = detail.get("size")
    document = detail.get("document_id")
    location = detail.get("location")
    return Arrival(
        trace_id=str(detail["trace_id"]),
        tenant=str(detail["tenant"]),
        source=str(detail["source"]),
        name=str(detail["name"]),
        outcome=outcome,
        subdir=str(detail.get("subdir") or ""),
        size=int(size) if size is not None else None,
        sha256=str(detail["sha256"]) if detail.get("sha256") else None,
        arrived_at=datetime.fromisoformat(str(detail["arrived_at"])),
        decided_at=datetime.fromisoformat(str(detail["decided_at"])),
        document_id=int(document) if document is not None else None,
        reason=str(detail.get("reason") or ""),
        detail=str(detail.get("detail") or ""),
        location=str(location) if location is not None else None,
    )


def event_params(record: Mapping[str, Any]) -> dict[str, Any]:
    """The ``arrival_note`` parameters of a buffered or emitted ``arrival.*`` event."""
    detail = record["detail"]
    if not isinstance(detail, Mapping):
        raise ValueError("detail is not an object")
    return from_event(detail).params()
