"""What a person is told about an operator event: a one-line summary, a paragraph of what
happened and the steps to take, per event type (unknown types render plainly).

Names in an event (a file, a folder, an account, an address) are untrusted text: they are
shown whole and escaped (``name_of``: ingestd/textsafe.py), an error by its first line
(``one_line``); and ``render`` passes whatever it made through the same rule once more, so
no raw line break or control character reaches a subject, a body or a webhook's text
from any field."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingestd.config.load import DEFAULT_CONFIG_PATH
from ingestd.states import TenantStatus
from ingestd.textsafe import escaped, shown
from worker.notify.events import Event

SUBJECT_PREFIX = "[ingestd]"
_SUBJECT_MAX = 180  # characters of the summary in a subject; the body has it all
LINE_MAX = 300
_WHITESPACE = re.compile(r"\s+")


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


def one_line(value: Any, limit: int = LINE_MAX) -> str:
    """The first line of ``value`` (an error, a reason), runs of spaces folded, what is
    left of control characters escaped."""
    text = str(value).strip().splitlines()[0] if str(value).strip() else ""
    return shown(_WHITESPACE.sub(" ", text), limit)


def name_of(value: Any, limit: int = 200) -> str:
    """A name (file, folder, account, address) whole on one line: every byte that is not
    UTF-8 and every control character escaped, never cut at a line break."""
    return shown(value, limit)


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
    reason = one_line(_get(d, "error", "reason") or "no reason recorded")
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
    error = one_line(_get(d, "error") or "no error recorded")
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
    error = one_line(_get(d, "error") or "no error recorded")
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
        status = d.get("status") or TenantStatus.creating
        return Rendered(
            f"tenant {t} created",
            f"Tenant {t} was created (status {status}); provision-tenant sets it up and "
            "makes it active.",
            ["see all tenants: ingestd tenant list"],
        )
    if state == TenantStatus.active:
        again = before == TenantStatus.suspended
        return Rendered(
            f"tenant {t} is active" + (" again" if again else ""),
            f"Tenant {t} is active (it was {before or 'not active'}): its SFTP accounts may "
            "log in and its files are ingested and analysed.",
            ["see all tenants: ingestd tenant list"],
        )
    if state == TenantStatus.suspended:
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
    if state == TenantStatus.deleting:
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
    name = name_of(_get(d, "filename", "file", "name", "path") or "a file")
    reason = one_line(_get(d, "reason") or "no reason given")
    more = _get(d, "detail", "error", "message")
    source = _get(d, "source")
    source = name_of(source) if source else None
    where = _get(d, "moved_to", "quarantine_path", "failed_path", "note")
    where = name_of(where, LINE_MAX) if where else None
    verb = "quarantined" if e.type == "file.quarantined" else "refused"
    what = f"The file {name}" + (f" (from {source})" if source else "")
    what += f" was {verb} and not ingested: {reason}"
    if more:
        what += f"\n  {one_line(more)}"
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
    name = name_of(_get(d, "filename", "path") or "a file")
    doc = d.get("document_id")
    archived = f" as document {doc}" if doc is not None else ""
    return Rendered(
        f"{_prefix(t)}file {name} is archived but stays in its hot folder",
        f"The file {name} was archived{archived}, but ingestd cannot remove it from the "
        f"hot folder: {one_line(_get(d, 'detail', 'reason') or 'no reason given')}\n"
        "It is not ingested or copied again; its removal is retried until it works.",
        [
            "fix the folder's owner and mode (README: hot folder ownership)",
            "see the stuck files: ingestd status",
        ],
    )


def _folder_event(e: Event) -> Rendered:
    d, t = e.detail, e.tenant
    folder = name_of(_get(d, "folder", "path") or "a hot folder")
    if e.type == "folder.back":
        found = d.get("files")
        files = f"; {found} file(s) found in it" if found is not None else ""
        return Rendered(
            f"{_prefix(t)}hot folder {folder} is back",
            f"The hot folder {folder} is there again and watched{files}.",
            ["nothing to do"],
        )
    if e.type == "folder.unreadable":
        cannot = d.get("cannot")
        what = ", ".join(str(c) for c in cannot) if isinstance(cannot, list) else "use"
        owner = name_of(_get(d, "folder_owner") or "unknown")
        running = name_of(_get(d, "running_as") or "the service user")
        return Rendered(
            f"{_prefix(t)}hot folder {folder} cannot be read by ingestd",
            f"The daemon ({running}) cannot {what} the hot folder {folder} (owner and mode: "
            f"{owner}). It is not watched: files dropped there stay until this is fixed.",
            [
                "give the service user access through the folder's group (README: hot "
                "folder ownership); a group added to the user takes effect at "
                "`systemctl restart ingestd`, not at reload"
            ],
        )
    reason = one_line(_get(d, "reason") or "gone")
    return Rendered(
        f"{_prefix(t)}hot folder {folder} is gone ({reason})",
        f"The hot folder {folder} vanished or is a different directory now ({reason}): "
        "a share unmounted, the folder deleted. ingestd never creates it; files dropped "
        "there are not seen until it is back.",
        ["mount the share again or recreate the folder; ingestd picks it up by itself"],
    )


def _sftp_banned(e: Event) -> Rendered:
    d = e.detail
    ip = name_of(_get(d, "remote_ip", "ip", "address") or "an address", 100)
    length = _duration(_get(d, "seconds", "ban_seconds", "duration"))
    count = d.get("ban_count")
    for_ = f" for {length}" if length else ""
    what = f"Too many failed SFTP logins came from {ip}: its connections are refused{for_}."
    if isinstance(count, int) and count > 1:
        what += f" This is ban number {count} in a row: each repeat lasts twice as long."
    if _get(d, "username"):
        what += f" The last login tried the user '{name_of(d['username'], 100)}'."
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
    summary = f"{_prefix(e.tenant)}{e.type}" + (f": {one_line(reason)}" if reason else "")
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
    "folder.unreadable": _folder_event,
    "sftp.banned": _sftp_banned,
}


def admin_cli(config_path: Path | None) -> str:
    """How an admin's shell runs ingestd against the config the worker runs with: plain
    ``ingestd`` for the default file (or a config built in memory), else with
    ``--config PATH`` (a path from ``--config`` or $INGESTD_CONFIG that the admin's shell
    would not know). Never ``runuser``: run as root, ingestd switches user by itself."""
    if config_path is None or config_path == DEFAULT_CONFIG_PATH:
        return "ingestd"
    return f"ingestd --config {shlex.quote(str(config_path))}"


def _with_cli(step: str, cli: str) -> str:
    advice, sep, command = step.partition(": ingestd ")
    return f"{advice}: {cli} {command}" if sep else step


def render(event: Event, cli: str = "ingestd") -> Rendered:
    """The summary, explanation and next steps for ``event`` (any type; unknown types and
    missing detail fields render plainly rather than fail); each step's command starts
    with ``cli`` (``admin_cli``). Every line of it is escaped text: whatever a field
    held, a line break in it is one the renderer made."""
    made = _RENDERERS.get(event.type, _generic)(event)
    return Rendered(
        escaped(made.summary),
        "\n".join(escaped(line) for line in made.what.split("\n")),
        [escaped(_with_cli(step, cli)) for step in made.todo],
    )
