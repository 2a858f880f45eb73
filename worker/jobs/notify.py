"""notify: one operator event to one [[notify]] sink.

Events are written to ``operator_events`` where they are decided (the outbox, migration
0008). ``relay`` turns new rows into one notify job per matching sink, in one
transaction with marking them relayed: so each sink gets each event once and retries on
its own ([deliveries] ladder), and a sink that is down delays nobody else. Notify jobs
run under the '_system' tenant, in a lane of their own in the round robin.
"""

from __future__ import annotations

import uuid

from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.jobkinds import FAILED_EVENTS, JobKind
from ingestd.queue.enqueue import enqueue
from ingestd.states import TenantStatus
from worker.jobs import JobContext, PermanentError, register
from worker.notify import Event, deliver, find_sink, matching_sinks

RELAY_BATCH = 500


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
                enqueue(
                    tx,
                    tenant_id=int(system["id"]),
                    kind=JobKind.notify,
                    payload={
                        "event_id": str(event["event_id"]),
                        "sink": sink,
                        "type": event["type"],
                    },
                    trace=event["trace_id"],
                )
        tx.run("operator_events_relayed", {"ids": [int(r["id"]) for r in rows]})
    return len(rows)


@register(
    JobKind.notify, tenant_status=(TenantStatus.active,), failed_event=FAILED_EVENTS[JobKind.notify]
)
def notify_event(ctx: JobContext) -> None:
    """Deliver one event to one sink, both as they are now (the event from the table, the
    sink from the current config: a moved receiver or a rotated secret applies to pending
    notifications). A sink gone from the config, or one that no longer wants the event,
    is not a failure: the job is done with a note saying so.

    Failures propagate: the job retries on the [deliveries] ladder, and its error (the
    worker's ``job.retry`` / ``job.failed`` lines) names the sink and the receiver's or
    relay's answer. Failed for good it writes no operator event (FAILED_EVENTS: None, a
    notification that cannot be delivered must not notify about itself); the worker's
    ``job.failed`` line, at error level, is the one record of it.
    """
    payload = ctx.job.payload
    try:
        event_id, name = str(uuid.UUID(str(payload["event_id"]))), str(payload["sink"])
    except KeyError as exc:
        raise PermanentError(f"malformed notify payload: no {exc.args[0]!r}") from None
    except ValueError:
        raise PermanentError(
            f"malformed notify payload: event_id {payload['event_id']!r} is not a UUID"
        ) from None
    ctx.result.update(event=payload.get("type"), sink=name, event_id=event_id)
    sink = find_sink(ctx.config, name)
    if sink is None:
        ctx.result["note"] = f"sink {name!r} is no longer in the config; not sent"
        return
    with ctx.db.transaction() as tx:
        row = tx.one("operator_event", {"event_id": event_id})
    if row is None:
        ctx.result["note"] = "the event no longer exists (pruned); not sent"
        return
    event = Event.from_row(row)
    if not sink.wants(event.type, event.severity, event.tenant):
        ctx.result["note"] = (
            f"sink {name!r} no longer wants {event.type} ({event.severity}) events; not sent"
        )
        return
    ctx.result.update(deliver(ctx.config, sink, event))
