"""Operator notifications: which sinks want an event, what they are told, and sending it.

``matching_sinks`` decides (the relay in ``worker/jobs/notify.py`` makes one notify job
per sink it names); ``render`` turns an event into a one-line summary, a paragraph of
what happened and what to do; ``deliver`` sends it to one ``[[notify]]`` sink:

- **webhook**: a JSON POST ``{"event", "event_id", "severity", "tenant", "detail",
  "trace_id", "created_at", "text"}`` through ``worker.webhooks.deliver_webhook``, so it
  is signed and bounded exactly like workflow webhooks. ``X-Ingestd-Event-Id`` is
  ``<event_id>:<sink>``: the same on every retry of the same notification, so receivers
  drop duplicates (delivery is at least once). ``text`` is the e-mail's subject, which
  chat webhooks (Mattermost, Rocket.Chat, Slack-compatible ones) show as the message.
- **email**: one plain-text UTF-8 message to all the sink's addresses through the
  ``[smtp]`` relay (stdlib ``smtplib``). Its Message-ID is made of the event id and the
  sink too, so a mail program can spot a duplicate from a retry after a lost answer.

Failures: ``SmtpError`` / ``WebhookError`` / ``ConfigError`` (a missing secret) are worth
a retry, and the job retries on the [deliveries] ladder. ``SmtpRefused`` (a
``PermanentError``) is for what no retry fixes: the relay's 5xx to every recipient
(no such mailbox) or to the message itself. Everything about the relay or our side of it
(connection refused, TLS, a 5xx greeting, AUTH refused, the sender refused, 4xx anywhere)
retries: the relay may come back, and the config and the password file are read again at
each attempt, so fixing them delivers what is pending.
"""

from __future__ import annotations

import base64
import contextlib
import email.policy
import functools
import re
import smtplib
import socket
import ssl
import textwrap
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from ingestd.config.notify import NotifySink, SmtpConfig, address_of
from ingestd.config.settings import Config
from ingestd.errors import ConfigError, IngestdError
from worker.deadline import Deadline
from worker.jobs import PermanentError
from worker.webhooks import deliver_webhook

SUBJECT_PREFIX = "[ingestd]"
_SUBJECT_MAX = 180  # characters of the summary in a subject; the body has it all
_LINE_MAX = 300
_WHITESPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# --- events ------------------------------------------------------------------------------


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


def matching_sinks(config: Config, event: Mapping[str, Any]) -> list[str]:
    """The names of the ``[[notify]]`` sinks that want ``event``, in config order."""
    tenant = str(event["tenant"]) if event.get("tenant") is not None else None
    kind, severity = str(event["type"]), str(event["severity"])
    return [sink.name for sink in config.notify if sink.wants(kind, severity, tenant)]


def find_sink(config: Config, name: str) -> NotifySink | None:
    return next((s for s in config.notify if s.name == name), None)


# --- rendering ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """What a person is told about one event."""

    summary: str  # one line: "acme: document 42 needs attention: the PDF is encrypted"
    what: str  # what happened, in plain words (may span lines)
    # What to do, one step per entry; "advice: ingestd ..." puts the command on a line of
    # its own in the e-mail (to copy and paste).
    todo: list[str] = field(default_factory=list)

    @property
    def subject(self) -> str:
        text = self.summary
        if len(text) > _SUBJECT_MAX:
            text = text[: _SUBJECT_MAX - 1].rstrip() + "…"
        return f"{SUBJECT_PREFIX} {text}"


def _line(value: Any, limit: int = _LINE_MAX) -> str:
    """The first line of ``value``, control characters and runs of spaces folded."""
    text = str(value).strip().splitlines()[0] if str(value).strip() else ""
    text = _WHITESPACE.sub(" ", _CONTROL.sub(" ", text)).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _get(detail: Mapping[str, Any], *keys: str) -> Any:
    """The first of ``keys`` that ``detail`` has a non-empty value for, else None."""
    for key in keys:
        value = detail.get(key)
        if value not in (None, ""):
            return value
    return None


def _attempts(detail: Mapping[str, Any]) -> str:
    n = detail.get("attempts")
    if not isinstance(n, int):
        return ""
    return f" after {n} attempt{'s' if n != 1 else ''}"


def _duration(seconds: Any) -> str:
    try:
        s = int(float(seconds))
    except (TypeError, ValueError):
        return ""
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 2 * 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h" + (f" {m} min" if m else "")
    d, h = divmod(s // 3600, 24)
    return f"{d} d" + (f" {h} h" if h else "")


def _prefix(tenant: str | None) -> str:
    return f"{tenant}: " if tenant else ""


def _document_needs_attention(e: Event) -> Rendered:
    d, t = e.detail, e.tenant or "?"
    doc = d.get("document_id")
    reason = _line(_get(d, "error", "reason") or "no reason recorded")
    kind = d.get("kind") or "analysis"
    return Rendered(
        f"{t}: document {doc} needs attention: {reason}",
        f"Document {doc} of tenant {t} is archived (the original is kept as it came), but "
        f"{kind} cannot handle it for a reason no retry fixes:\n  {reason}\n"
        "It stays in status 'attention' and nothing more happens to it until someone acts.",
        [
            f"see what needs attention: ingestd documents attention --tenant {t}",
            "if the file itself is the problem (encrypted, damaged), get a usable copy from "
            "the sender and ingest that one",
            f"once the cause is fixed (a limit raised, a language installed), analyse it again: "
            f"ingestd documents analyze --tenant {t} {doc}",
            f"or accept it without text: ingestd documents mark-done --tenant {t} {doc}",
        ],
    )


def _job_failed(e: Event) -> Rendered:
    d, t = e.detail, e.tenant or "?"
    job, kind, doc = d.get("job_id"), d.get("kind") or "job", d.get("document_id")
    error = _line(_get(d, "error") or "no error recorded")
    of_doc = f" of document {doc}" if doc is not None else ""
    return Rendered(
        f"{t}: job {job} ({kind}){of_doc} failed{_attempts(d)}: {error}",
        f"Job {job} ({kind}){of_doc.replace(' of ', ' for ')} of tenant {t} failed for good"
        f"{_attempts(d)} and is not "
        f"retried any more. The last error:\n  {error}",
        [
            f"look at the job and its whole error: ingestd jobs show {job}",
            f"fix the cause, then run it again: ingestd jobs retry {job}",
        ],
    )


def _delivery_failed(e: Event) -> Rendered:
    d, t = e.detail, e.tenant or "?"
    job, doc = d.get("job_id"), d.get("document_id")
    error = _line(_get(d, "error") or "no error recorded")
    return Rendered(
        f"{t}: webhook for document {doc} not delivered{_attempts(d)}: {error}",
        f"A workflow webhook of tenant {t} for document {doc} was retried on the "
        f"[deliveries] ladder and failed for good{_attempts(d)}. The document itself is "
        f"archived and analysed; only the receiver was not told. The last error:\n  {error}",
        [
            "check that the receiver is up and accepts the signature (its URL and secret in "
            "the workflow's webhook)",
            f"look at the job: ingestd jobs show {job}",
            f"send it again: ingestd jobs retry {job}",
        ],
    )


def _tenant_event(e: Event) -> Rendered:
    d, t = e.detail, e.tenant or "?"
    state = e.type.partition(".")[2]
    before = d.get("from")
    if state == "created":
        status = d.get("status") or "creating"
        return Rendered(
            f"tenant {t} created",
            f"Tenant {t} was created (status {status}); provision-tenant sets it up and "
            "makes it active.",
            ["see all tenants: ingestd tenant list"],
        )
    if state == "active":
        again = before == "suspended"
        return Rendered(
            f"tenant {t} is active" + (" again" if again else ""),
            f"Tenant {t} is active (it was {before or 'not active'}): its SFTP accounts may "
            "log in and its files are ingested and analysed.",
            ["see all tenants: ingestd tenant list"],
        )
    if state == "suspended":
        return Rendered(
            f"tenant {t} suspended",
            f"Tenant {t} was suspended (it was {before or '?'}): SFTP logins of its accounts "
            "are refused and files in its hot folders wait where they are until it is "
            "active again.",
            [
                "if this was not intended: ingestd tenant activate " + t,
                "see all tenants: ingestd tenant list",
            ],
        )
    if state == "deleting":
        return Rendered(
            f"tenant {t} is being deleted",
            f"Tenant {t} is being deleted (it was {before or '?'}): delete-tenant removes its "
            "documents, their archived originals and derived files. This cannot be undone.",
            [f"follow the deletion: ingestd jobs list --tenant {t}"],
        )
    if state == "deleted":
        return Rendered(
            f"tenant {t} deleted",
            f"Tenant {t} is gone, with all of its documents (its last status was "
            f"{d.get('status') or '?'}).",
            ["see the remaining tenants: ingestd tenant list"],
        )
    return _generic(e)


def _file_event(e: Event) -> Rendered:
    d, t = e.detail, e.tenant
    name = _line(_get(d, "filename", "file", "name", "path") or "a file", 200)
    reason = _line(_get(d, "reason") or "no reason given")
    more = _get(d, "detail", "error", "message")
    source = _get(d, "source")
    where = _get(d, "moved_to", "quarantine_path", "failed_path", "note")
    verb = "quarantined" if e.type == "file.quarantined" else "refused"
    what = f"The file {name}" + (f" (from {source})" if source else "")
    what += f" was {verb} and not ingested: {reason}"
    if more:
        what += f"\n  {_line(more)}"
    if where:
        what += f"\nIt is now at {where}, beside a .error.txt note saying why."
    return Rendered(
        f"{_prefix(t)}file {name} {verb}: {reason}",
        what,
        [
            "look at the file and its .error.txt note" + (f" in {where}" if where else ""),
            "fix or replace it and drop it in again, or delete it",
        ],
    )


def _not_removable(e: Event) -> Rendered:
    d, t = e.detail, e.tenant
    name = _line(_get(d, "filename", "path") or "a file", 200)
    doc = d.get("document_id")
    archived = f" as document {doc}" if doc is not None else ""
    return Rendered(
        f"{_prefix(t)}file {name} is archived but stays in its hot folder",
        f"The file {name} was archived{archived}, but ingestd cannot remove it from the "
        f"hot folder: {_line(_get(d, 'detail', 'reason') or 'no reason given')}\n"
        "It is not ingested or copied again; its removal is retried until it works.",
        [
            "fix the folder's owner and mode (README: hot folder ownership)",
            "see the stuck files: ingestd status",
        ],
    )


def _folder_event(e: Event) -> Rendered:
    d, t = e.detail, e.tenant
    folder = _line(_get(d, "folder", "path") or "a hot folder", 200)
    if e.type == "folder.back":
        found = d.get("files")
        files = f"; {found} file(s) found in it" if found is not None else ""
        return Rendered(
            f"{_prefix(t)}hot folder {folder} is back",
            f"The hot folder {folder} is there again and watched{files}.",
            ["nothing to do"],
        )
    reason = _line(_get(d, "reason") or "gone")
    return Rendered(
        f"{_prefix(t)}hot folder {folder} is gone ({reason})",
        f"The hot folder {folder} vanished or is a different directory now ({reason}): "
        "a share unmounted, the folder deleted. ingestd never creates it; files dropped "
        "there are not seen until it is back.",
        ["mount the share again or recreate the folder; ingestd picks it up by itself"],
    )


def _sftp_banned(e: Event) -> Rendered:
    d = e.detail
    ip = _line(_get(d, "remote_ip", "ip", "address") or "an address", 100)
    length = _duration(_get(d, "seconds", "ban_seconds", "duration"))
    count = d.get("ban_count")
    for_ = f" for {length}" if length else ""
    what = f"Too many failed SFTP logins came from {ip}: its connections are refused{for_}."
    if isinstance(count, int) and count > 1:
        what += f" This is ban number {count} in a row: each repeat lasts twice as long."
    if _get(d, "username"):
        what += f" The last login tried the user {_line(d['username'], 100)!r}."
    return Rendered(
        f"{_prefix(e.tenant)}SFTP: {ip} banned{for_} after failed logins",
        what,
        [
            "if it is one of your scanners (a changed password, an old key), fix its "
            f"credentials, then lift the ban: ingestd sftp unban {ip}",
            "see the bans in force: ingestd sftp bans",
        ],
    )


def _generic(e: Event) -> Rendered:
    reason = _get(e.detail, "error", "reason", "detail", "message")
    summary = f"{_prefix(e.tenant)}{e.type}" + (f": {_line(reason)}" if reason else "")
    return Rendered(
        summary,
        f"ingestd recorded the event {e.type} ({e.severity}).",
        ["the details below say what it is about"],
    )


_RENDERERS: dict[str, Callable[[Event], Rendered]] = {
    "document.needs_attention": _document_needs_attention,
    "job.failed": _job_failed,
    "delivery.failed": _delivery_failed,
    "tenant.created": _tenant_event,
    "tenant.active": _tenant_event,
    "tenant.suspended": _tenant_event,
    "tenant.deleting": _tenant_event,
    "tenant.deleted": _tenant_event,
    "file.quarantined": _file_event,
    "file.refused": _file_event,
    "file.not_removable": _not_removable,
    "folder.gone": _folder_event,
    "folder.back": _folder_event,
    "sftp.banned": _sftp_banned,
}


def render(event: Event) -> Rendered:
    """The summary, explanation and next steps for ``event`` (any type; unknown types and
    missing detail fields render plainly rather than fail)."""
    return _RENDERERS.get(event.type, _generic)(event)


@functools.cache
def _hostname() -> str:
    return socket.gethostname() or "localhost"


def _time(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _detail_lines(detail: Mapping[str, Any]) -> list[str]:
    if not detail:
        return ["  (none)"]
    width = min(max(len(str(k)) for k in detail) + 1, 20)
    out = []
    for key in sorted(detail):
        value = detail[key]
        text = str(value) if not isinstance(value, str) else value
        lines = _CONTROL.sub(" ", text).splitlines() or [""]
        out.append(f"  {str(key) + ':':<{width}} {lines[0]}")
        out.extend(f"  {'':<{width}} {line}" for line in lines[1:40])
        if len(lines) > 40:
            out.append(f"  {'':<{width}} … ({len(lines) - 40} more lines)")
    return out


def _wrap(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(
        text,
        76,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=False,
    ) or [first.rstrip()]


def email_body(event: Event, rendered: Rendered, sink: NotifySink) -> str:
    """The plain-text body of the e-mail for ``event``."""
    lines = [rendered.summary, ""]
    for line in rendered.what.splitlines():
        # Quoted text (an error, indented) stays as it is; prose is wrapped.
        lines.extend([line] if line.startswith(" ") else _wrap(line, "", ""))
    lines.append("")
    if rendered.todo:
        lines.append("What to do")
        for step in rendered.todo:
            advice, sep, command = step.partition(": ingestd ")
            lines.extend(_wrap(advice + (":" if sep else ""), "  - ", "    "))
            if sep:
                lines.append(f"      ingestd {command}")
        lines.append("")
    lines += [
        "Event",
        f"  type:      {event.type} ({event.severity})",
        f"  tenant:    {event.tenant or '(the appliance itself)'}",
        f"  time:      {_time(event.created_at)}",
        f"  trace id:  {event.trace_id or '-'}",
        f"  event id:  {event.event_id}",
        f"  host:      {_hostname()}",
        "",
        "Details",
        *_detail_lines(event.detail),
        "",
        "-- ",
        f"ingestd on {_hostname()}, notify sink {sink.name!r} "
        f"(events {', '.join(sink.events)}; min_severity {sink.min_severity}"
        + (f"; tenant {sink.tenant}" if sink.tenant else "")
        + ").",
    ]
    if event.trace_id:
        lines += [
            "Every log line about this file carries its trace id:",
            f"  journalctl -u 'ingestd*' | grep {event.trace_id}",
        ]
    return "\n".join(lines).rstrip() + "\n"


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


def delivery_id(event: Event, sink: NotifySink) -> str:
    """The same for every attempt of one event to one sink (receivers dedupe on it)."""
    return f"{event.event_id}:{sink.name}"


# --- delivery ----------------------------------------------------------------------------


class NotifyError(IngestdError):
    """A notification was not delivered this time; worth a retry."""


class SmtpError(IngestdError):
    """The relay did not take the message (down, 4xx, TLS, AUTH ...); worth a retry."""

    def __init__(self, relay: str, code: int | None, reply: str) -> None:
        super().__init__(f"smtp {relay}: " + (f"{code} {reply}" if code is not None else reply))
        self.relay = relay
        self.code = code
        self.reply = reply


class SmtpRefused(PermanentError):
    """The relay refused this message or all its recipients for good (5xx)."""


def deliver(config: Config, sink: NotifySink, event: Event) -> dict[str, Any]:
    """Send ``event`` to ``sink``; what to note in the job's result. Raises NotifyError
    (retry) or PermanentError (do not), both naming the sink."""
    rendered = render(event)
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


def build_message(
    smtp: SmtpConfig, sink: NotifySink, event: Event, rendered: Rendered
) -> EmailMessage:
    """The e-mail for ``event`` to ``sink``'s addresses (UTF-8, plain text)."""
    assert sink.email
    msg = EmailMessage(policy=email.policy.SMTP)
    msg["Subject"] = rendered.subject
    msg["From"] = smtp.from_address
    msg["To"] = ", ".join(sink.email)
    msg["Date"] = format_datetime(datetime.now(UTC))
    domain = address_of(smtp.from_address).rpartition("@")[2] or _hostname()
    local = re.sub(r"[^A-Za-z0-9-]", "-", sink.name)
    msg["Message-ID"] = f"<{event.event_id}.{local}@{domain}>"
    msg["X-Ingestd-Event-Id"] = delivery_id(event, sink)
    msg["X-Ingestd-Event"] = event.type
    msg["X-Ingestd-Severity"] = event.severity
    if event.tenant:
        msg["X-Ingestd-Tenant"] = event.tenant
    # RFC 3834: no out-of-office replies to the appliance.
    msg["Auto-Submitted"] = "auto-generated"
    msg.set_content(email_body(event, rendered, sink), charset="utf-8")
    return msg


@functools.cache
def _fqdn() -> str:
    # What EHLO says by default. socket.getfqdn() may wait for a DNS server: bounded.
    found: list[str] = []
    thread = threading.Thread(
        target=lambda: found.append(socket.getfqdn()), daemon=True, name="smtp-fqdn"
    )
    thread.start()
    thread.join(2.0)
    name = found[0] if found else socket.gethostname()
    return name if name and name.isascii() and " " not in name else "localhost"


class _Client(smtplib.SMTP):
    """smtplib's client, connecting (at once) within the delivery's deadline."""

    def __init__(self, deadline: Deadline, host: str, port: int, **kwargs: Any) -> None:
        self.deadline = deadline
        super().__init__(host, port, **kwargs)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        # No source_address: the config has none to give.
        return self.deadline.connect((host, port), timeout)


class _ClientTLS(smtplib.SMTP_SSL, _Client):
    # SMTP_SSL._get_socket wraps what _Client._get_socket connected in TLS.
    def __init__(self, deadline: Deadline, host: str, port: int, **kwargs: Any) -> None:
        self.deadline = deadline
        smtplib.SMTP_SSL.__init__(self, host, port, **kwargs)


def _tls_context(smtp: SmtpConfig) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(
            cafile=str(smtp.ca_file) if smtp.ca_file is not None else None
        )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"smtp ca_file {smtp.ca_file}: cannot load: {exc}") from None


def _reply(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return _line(_WHITESPACE.sub(" ", text), 400)


def send_mail(smtp: SmtpConfig, recipients: Sequence[str], message: EmailMessage) -> dict[str, str]:
    """Hand ``message`` to the relay for ``recipients``; the recipients it refused while
    taking it for the others ({address: "code reply"}, usually empty).

    ``smtp.timeout`` bounds the whole delivery (lookup, connect, TLS, EHLO, AUTH, the
    message); SmtpError (retry) or SmtpRefused (permanent) otherwise.
    """
    relay = smtp.relay
    password = smtp.password() if smtp.username is not None else None
    context = _tls_context(smtp) if smtp.security != "none" else None
    sender = address_of(smtp.from_address)
    to = [address_of(r) for r in recipients]
    failure: BaseException | None = None
    refused: dict[str, tuple[int, bytes]] = {}
    helo = smtp.helo or _fqdn()
    with Deadline(smtp.timeout) as deadline:
        client: _Client | None = None
        try:
            # Connects and reads the greeting (smtplib keeps the host for TLS's SNI and
            # certificate check).
            if smtp.security == "tls":
                client = _ClientTLS(
                    deadline,
                    smtp.host,
                    smtp.port,
                    local_hostname=helo,
                    timeout=smtp.timeout,
                    context=context,
                )
            else:
                client = _Client(
                    deadline, smtp.host, smtp.port, local_hostname=helo, timeout=smtp.timeout
                )
            if smtp.security == "starttls":
                client.ehlo()
                if not client.has_extn("starttls"):
                    raise SmtpError(
                        relay,
                        None,
                        "does not offer STARTTLS (security = "
                        '"starttls"); set security = "none" only for a relay on a '
                        "network you trust",
                    )
                client.starttls(context=context)
                client.ehlo()
            if smtp.username is not None:
                assert password is not None
                _login(client, relay, smtp.username, password)
            refused = client.send_message(message, from_addr=sender, to_addrs=to)
        except (smtplib.SMTPException, OSError) as exc:
            failure = exc
        else:
            # Taken: whatever QUIT says does not undo that (a retry would send it twice).
            with contextlib.suppress(smtplib.SMTPException, OSError):
                client.quit()
        finally:
            if client is not None:
                client.close()
    if failure is not None:
        raise _smtp_error(failure, smtp, expired=deadline.expired)
    return {addr: f"{code} {_reply(text)}" for addr, (code, text) in refused.items()}


def _login(client: smtplib.SMTP, relay: str, username: str, password: str) -> None:
    if username.isascii() and password.isascii():
        client.login(username, password)  # CRAM-MD5, PLAIN or LOGIN, as offered
        return
    # smtplib encodes AUTH data as ASCII; PLAIN is UTF-8 (RFC 4616): send it ourselves.
    client.ehlo_or_helo_if_needed()
    if "PLAIN" not in client.esmtp_features.get("auth", "").upper().split():
        raise SmtpError(
            relay, None, "offers no AUTH PLAIN, which a password that is not ASCII needs"
        )
    token = base64.b64encode(b"\0" + username.encode() + b"\0" + password.encode()).decode()
    code, reply = client.docmd("AUTH", f"PLAIN {token}")
    if code != 235:
        raise smtplib.SMTPAuthenticationError(code, reply)


def _smtp_error(exc: BaseException, smtp: SmtpConfig, *, expired: bool) -> Exception:
    relay = smtp.relay
    late = SmtpError(relay, None, f"did not finish within {smtp.timeout:g} s")
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        answers = {a: (int(c), _reply(t)) for a, (c, t) in exc.recipients.items()}
        shown = "; ".join(f"{a}: {c} {t}" for a, (c, t) in answers.items())
        if answers and all(c >= 500 for c, _ in answers.values()):
            return SmtpRefused(f"smtp {relay}: recipients refused: {shown}")
        return SmtpError(relay, None, f"recipients not taken: {shown}")
    if isinstance(exc, smtplib.SMTPDataError) and exc.smtp_code >= 500:
        return SmtpRefused(
            f"smtp {relay}: message refused: {exc.smtp_code} {_reply(exc.smtp_error)}"
        )
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return SmtpError(
            relay,
            exc.smtp_code,
            f"{_reply(exc.smtp_error)} (AUTH as "
            f"{smtp.username!r}; check smtp.username and password_file)",
        )
    if isinstance(exc, smtplib.SMTPSenderRefused):
        return SmtpError(
            relay,
            exc.smtp_code,
            f"{_reply(exc.smtp_error)} (sender {exc.sender}; check smtp.from_address)",
        )
    if isinstance(exc, smtplib.SMTPResponseException):
        # A real answer (a 4xx anywhere, a 5xx greeting): it stands, even if late.
        return SmtpError(relay, exc.smtp_code, _reply(exc.smtp_error))
    if expired or isinstance(exc, TimeoutError):
        return late
    if isinstance(exc, smtplib.SMTPNotSupportedError):
        return SmtpError(
            relay,
            None,
            f"{exc} (smtp.username is set, but the relay offers no AUTH on this connection)",
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return SmtpError(
            relay,
            None,
            f"TLS certificate not accepted: {exc.verify_message} "
            "(smtp.ca_file names a CA to trust)",
        )
    if isinstance(exc, ssl.SSLError):
        return SmtpError(relay, None, f"TLS failed: {exc.reason or exc}")
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return SmtpError(relay, None, f"closed the connection ({exc or 'no reason'})")
    if isinstance(exc, socket.gaierror):
        return SmtpError(relay, None, f"cannot look up {smtp.host}: {exc.strerror or exc}")
    if isinstance(exc, OSError):
        return SmtpError(relay, None, (exc.strerror or str(exc) or type(exc).__name__).lower())
    return SmtpError(relay, None, str(exc) or type(exc).__name__)
