"""notify: one operator event to one [[notify]] sink.

Events are written to ``operator_events`` where they are decided (the outbox, migration
0008). ``relay`` turns new rows into one notify job per matching sink, in one
transaction with marking them relayed: so each sink gets each event once and retries on
its own ([deliveries] ladder), and a sink that is down delays nobody else. Notify jobs
run under the '_system' tenant, in a lane of their own in the round robin.
"""

from __future__ import annotations

from typing import Any

from ingestd.config import Config
from ingestd.db import Database
from ingestd.jobkinds import JobKind
from ingestd.jobs import enqueue
from worker.jobs import JobContext, register

RELAY_BATCH = 500


def matching_sinks(config: Config, event: dict[str, Any]) -> list[str]:
    """The names of the sinks that want ``event`` (none configured yet: none)."""
    return []


def relay(db: Database, config: Config) -> int:
    """Turn new operator events into notify jobs; returns how many events were relayed."""
    with db.transaction() as tx:
        rows = tx.all("operator_events_to_relay", {"limit": RELAY_BATCH})
        if not rows:
            return 0
        system = tx.one("system_tenant")
        assert system is not None  # made by migration 0008
        for event in rows:
            for sink in matching_sinks(config, event):
                enqueue(tx, tenant_id=int(system["id"]), kind=JobKind.notify,
                        payload={"event_id": str(event["event_id"]), "sink": sink,
                                 "type": event["type"]},
                        trace=event["trace_id"])  # fmt: skip
        tx.run("operator_events_relayed", {"ids": [int(r["id"]) for r in rows]})
    return len(rows)


@register(JobKind.notify, tenant_status=("active",), failed_event=None)
def notify_event(ctx: JobContext) -> None:
    ctx.result.update(event=ctx.job.payload.get("type"), sink=ctx.job.payload.get("sink"))
