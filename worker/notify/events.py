"""One operator event as notifications see it (a row of ``operator_events``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ingestd.config.notify import NotifySink


@dataclass(frozen=True)
class Event:
    """One row of ``operator_events`` (as the ``operator_event`` query returns it)."""

    event_id: str
    type: str
    severity: str
    tenant: str | None
    detail: dict[str, Any]
    trace_id: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Event:
        created = row.get("created_at")
        if isinstance(created, str):
            created = datetime.fromisoformat(created)
        if not isinstance(created, datetime):
            created = datetime.now(UTC)
        detail = row.get("detail")
        return cls(
            event_id=str(row["event_id"]),
            type=str(row["type"]),
            severity=str(row.get("severity") or "warning"),
            tenant=str(row["tenant"]) if row.get("tenant") is not None else None,
            detail=dict(detail) if isinstance(detail, Mapping) else {},
            trace_id=str(row["trace_id"]) if row.get("trace_id") else None,
            created_at=created,
        )


def delivery_id(event: Event, sink: NotifySink) -> str:
    """The same for every attempt of one event to one sink (receivers dedupe on it)."""
    return f"{event.event_id}:{sink.name}"
