"""The e-mail for an operator event: a plain-text UTF-8 message, its body laid out for a
person (prose wrapped, commands on lines of their own, the event's details at the end).

Untrusted text arrives literally: the subject and the tenant header are ``LiteralHeader``s
(``headers.py``: escaped, and sent as encoded words of their own, so no encoded word or
line break in a file name is ever decoded into a header), and every detail in the body
is escaped text (ingestd/textsafe.py); a name is one line whatever it holds."""

from __future__ import annotations

import email.policy
import functools
import re
import socket
import textwrap
from collections.abc import Mapping
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from ingestd.config.notify import NotifySink, SmtpConfig, address_of
from ingestd.textsafe import escaped
from worker.notify.events import Event, delivery_id
from worker.notify.headers import LiteralHeader
from worker.notify.rendering import Rendered

# Detail fields that name something (a file, a folder, an account): one escaped line each;
# other fields (an error's text) keep their line breaks, each line escaped.
_NAME_KEYS = frozenset(
    {"filename", "file", "name", "path", "moved_to", "note", "folder", "source", "username"}
)


@functools.cache
def hostname() -> str:
    return socket.gethostname() or "localhost"


def _time(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _detail_lines(detail: Mapping[str, Any]) -> list[str]:
    if not detail:
        return ["  (none)"]
    width = min(max(len(escaped(str(k))) for k in detail) + 1, 20)
    out = []
    for key in sorted(detail):
        value = detail[key]
        text = str(value) if not isinstance(value, str) else value
        if key in _NAME_KEYS:
            lines = [escaped(text)]
        else:
            lines = [escaped(line) for line in text.split("\n")] or [""]
        out.append(f"  {escaped(str(key)) + ':':<{width}} {lines[0]}")
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
        f"  trace id:  {escaped(event.trace_id or '-')}",
        f"  event id:  {event.event_id}",
        f"  host:      {hostname()}",
        "",
        "Details",
        *_detail_lines(event.detail),
        "",
        "-- ",
        f"ingestd on {hostname()}, notify sink {sink.name!r} "
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


def build_message(
    smtp: SmtpConfig, sink: NotifySink, event: Event, rendered: Rendered
) -> EmailMessage:
    """The e-mail for ``event`` to ``sink``'s addresses (UTF-8, plain text)."""
    assert sink.email
    msg = EmailMessage(policy=email.policy.SMTP)
    msg["Subject"] = LiteralHeader("Subject", rendered.subject)
    msg["From"] = smtp.from_address
    msg["To"] = ", ".join(sink.email)
    msg["Date"] = format_datetime(datetime.now(UTC))
    domain = address_of(smtp.from_address).rpartition("@")[2] or hostname()
    local = re.sub(r"[^A-Za-z0-9-]", "-", sink.name)
    msg["Message-ID"] = f"<{event.event_id}.{local}@{domain}>"
    msg["X-Ingestd-Event-Id"] = delivery_id(event, sink)
    msg["X-Ingestd-Event"] = event.type
    msg["X-Ingestd-Severity"] = event.severity
    if event.tenant:
        msg["X-Ingestd-Tenant"] = LiteralHeader("X-Ingestd-Tenant", event.tenant)
    # RFC 3834: no out-of-office replies to the appliance.
    msg["Auto-Submitted"] = "auto-generated"
    msg.set_content(email_body(event, rendered, sink), charset="utf-8")
    return msg
