"""deliver-webhook: one workflow webhook of one document, from the outbox (invariant 9).

analyze-document decides which webhooks a new document triggers and enqueues one job per
webhook in the transaction that commits its results; this kind POSTs it. A receiver that
is down fails this job, never the analysis: it is retried on the [deliveries] ladder, and
failed for good it is an operator event (``delivery.failed``). The webhook's URL and secret
are read from the current config at each attempt (a rotated secret or a moved receiver
takes effect for pending deliveries); the event itself was fixed when it was decided.
"""

from __future__ import annotations

from typing import Any

from ingestd.config.rules import WebhookConfig
from ingestd.db.database import Tx
from ingestd.jobkinds import FAILED_EVENTS, JobKind
from ingestd.queue.claims import Job
from ingestd.states import TenantStatus
from worker.jobs import JobContext, PermanentError, register
from worker.webhooks import deliver_webhook


def webhook_of(ctx: JobContext, workflow: str) -> WebhookConfig:
    for rule in ctx.config.workflows:
        if rule.tenant == ctx.job.tenant and rule.name == workflow:
            if rule.then.webhook is None:
                break
            return rule.then.webhook
    raise PermanentError(
        f"workflow {workflow!r} of tenant {ctx.job.tenant!r} has no webhook in "
        "the config any more; not delivered"
    )


def apply_delivered(tx: Tx, job: Job, data: dict[str, Any]) -> None:
    tx.run(
        "workflow_webhook_delivered",
        {"document_id": job.document_id, "workflow": data["workflow"], "tenant_id": job.tenant_id},
    )


@register(
    JobKind.deliver_webhook,
    tenant_status=(TenantStatus.active, TenantStatus.suspended),
    apply=apply_delivered,
    failed_event=FAILED_EVENTS[JobKind.deliver_webhook],
)
def deliver_workflow_webhook(ctx: JobContext) -> None:
    payload = ctx.job.payload
    try:
        workflow, event_id, event = payload["workflow"], payload["event_id"], payload["event"]
    except KeyError as exc:
        raise PermanentError(f"malformed deliver-webhook payload: no {exc.args[0]!r}") from None
    webhook = webhook_of(ctx, str(workflow))
    status = deliver_webhook(webhook, dict(event), event_id=str(event_id))
    ctx.data = {"workflow": workflow}
    ctx.result.update(workflow=workflow, event_id=event_id, status=status, url=webhook.display_url)
