"""Operator notifications: which sinks want an event, what they are told, and sending it.

``matching_sinks`` decides (the relay in ``worker/jobs/notify.py`` makes one notify job
per sink it names); ``render`` (``rendering.py``) turns an event (``events.py``) into a
one-line summary, a paragraph of what happened and what to do; ``deliver`` sends it to
one ``[[notify]]`` sink:

- **webhook**: a JSON POST ``{"event", "event_id", "severity", "tenant", "detail",
  "trace_id", "created_at", "text"}`` through ``worker.webhooks.deliver_webhook``, so it
  is signed and bounded exactly like workflow webhooks. ``X-Ingestd-Event-Id`` is
  ``<event_id>:<sink>``: the same on every retry of the same notification, so receivers
  drop duplicates (delivery is at least once). ``text`` is the e-mail's subject, which
  chat webhooks (Mattermost, Rocket.Chat, Slack-compatible ones) show as the message.
- **email**: one plain-text UTF-8 message (``mail.py``) to all the sink's addresses
  through the ``[smtp]`` relay (``smtp.py``, stdlib ``smtplib``); its subject is a
  ``LiteralHeader`` (``headers.py``): a file name in it arrives as text, never as
  headers. Its Message-ID is made of the event id and the sink too, so a mail program
  can spot a duplicate from a retry after a lost answer.

Failures: ``SmtpError`` / ``WebhookError`` / ``ConfigError`` (a missing secret) are worth
a retry, and the job retries on the [deliveries] ladder. ``SmtpRefused`` (a
``PermanentError``) is for what no retry fixes: the relay's 5xx to every recipient
(no such mailbox) or to the message itself. Everything about the relay or our side of it
(connection refused, TLS, a 5xx greeting, AUTH refused, the sender refused, 4xx anywhere)
retries: the relay may come back, and the config and the password file are read again at
each attempt, so fixing them delivers what is pending.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC
from typing import Any

from ingestd.config.notify import NotifySink
from ingestd.config.settings import Config
from ingestd.errors import ConfigError, IngestdError
from worker.jobs import PermanentError
from worker.notify.events import Event, delivery_id
from worker.notify.mail import build_message
from worker.notify.rendering import Rendered, admin_cli, render
from worker.notify.smtp import SmtpRefused, send_mail
from worker.webhooks import deliver_webhook

# What worker/jobs/notify.py takes from here: the entry points and the event they take.
__all__ = ["Event", "NotifyError", "deliver", "delivery_id", "find_sink", "matching_sinks"]


def matching_sinks(config: Config, event: Mapping[str, Any]) -> list[str]:
    """The names of the ``[[notify]]`` sinks that want ``event``, in config order."""
    tenant = str(event["tenant"]) if event.get("tenant") is not None else None
    kind, severity = str(event["type"]), str(event["severity"])
    return [sink.name for sink in config.notify if sink.wants(kind, severity, tenant)]


def find_sink(config: Config, name: str) -> NotifySink | None:
    return next((s for s in config.notify if s.name == name), None)


def webhook_payload(event: Event, rendered: Rendered) -> dict[str, Any]:
    """The JSON a webhook sink receives for ``event``."""
    created = event.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return {
        "event": event.type,
        "event_id": event.event_id,
        "severity": event.severity,
        "tenant": event.tenant,
        "detail": event.detail,
        "trace_id": event.trace_id,
        "created_at": created.astimezone(UTC).isoformat(),
        "text": rendered.subject,
    }


class NotifyError(IngestdError):
    """A notification was not delivered this time; worth a retry."""

    transient = True


def deliver(config: Config, sink: NotifySink, event: Event) -> dict[str, Any]:
    """Send ``event`` to ``sink``; what to note in the job's result. Raises NotifyError
    (retry) or PermanentError (do not), both naming the sink."""
    rendered = render(event, admin_cli(config.source_path))
    try:
        if sink.webhook is not None:
            status = deliver_webhook(
                sink.webhook, webhook_payload(event, rendered), event_id=delivery_id(event, sink)
            )
            return {"via": "webhook", "url": sink.webhook.display_url, "status": status}
        smtp = config.smtp
        if smtp is None or not sink.email:  # the config's validation rules this out
            raise ConfigError("email needs an [smtp] section")
        message = build_message(smtp, sink, event, rendered)
        refused = send_mail(smtp, sink.email, message)
    except PermanentError as exc:
        raise SmtpRefused(f"notify sink {sink.name!r}: {exc}") from None
    except IngestdError as exc:
        raise NotifyError(f"notify sink {sink.name!r}: {exc.message}") from None
    note: dict[str, Any] = {"via": "email", "relay": smtp.relay, "to": len(sink.email)}
    if refused:
        # Some recipients got it: a retry would send it to them again.
        note["refused"] = refused
    return note
