"""On-upload workflows: which ones apply to a new document, and their webhook delivery.

``plan`` is pure: given the tenant's ``[[workflows]]`` and what is known about the
document (after OCR, title, date and taxonomy), it returns the actions to apply, one
``Applied`` per workflow whose conditions hold. Workflows run in config order and each
one sees the document as the earlier ones left it: tags they added count for
``has_tags``, a correspondent, document type or title they set is what later conditions
and title templates see. Within one workflow the tags, correspondent and document type
are applied before its title is rendered, so ``title = "{correspondent} {year}"`` sees
the correspondent the same workflow set. The job handler writes the results and records
each workflow as run (``document_workflow_runs``).

Webhooks
--------
``deliver_webhook`` POSTs the event (``event_payload``) as JSON (UTF-8, sorted keys, no
insignificant whitespace) with these headers:

- ``Content-Type: application/json``
- ``User-Agent: ingestd/<version>``
- ``X-Ingestd-Event-Id``: unique per document and workflow and the same on every retry;
  receivers use it to drop duplicates (delivery is at least once)
- ``X-Ingestd-Timestamp``: Unix time in seconds when the request was signed
- ``X-Ingestd-Signature: sha256=<hex>``: HMAC-SHA256 with the webhook's secret over
  ``<timestamp>.<body>`` (the timestamp's ASCII digits, a dot, the raw body bytes)

A receiver recomputes the HMAC over the bytes it received (``verify_signature``), rejects
a mismatch, and rejects timestamps older than a few minutes so that a recorded request
cannot be replayed later. Any 2xx status is success. Redirects are not followed (a
signed POST must not be sent somewhere else; configure the final URL); any other status,
a timeout or a network error raises ``WebhookError``, which the job retries with backoff.
The system's ``http_proxy``/``https_proxy``/``no_proxy`` settings apply.

The webhook's ``timeout`` bounds the whole delivery: looking up the host, connecting (and
the TLS handshake or proxy tunnel), sending the request, and receiving the status, the
headers and the (bounded) start of the body. A receiver that has not finished its answer
by then is cut off and the delivery fails (``did not answer within N s``), however
steadily it keeps sending; the job retries it like any other failure.
"""

from __future__ import annotations

import contextlib
import datetime
import fnmatch
import hashlib
import hmac
import http.client
import json
import re
import socket
import threading
import time
import unicodedata
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any, Self

from ingestd import __version__
from ingestd.config.rules import WebhookConfig, WorkflowConditions, WorkflowRule, template_fields
from ingestd.errors import IngestdError
from ingestd.intake.titles import _cap as _cap_title

EVENT_ANALYZED = "document.analyzed"
# Enough of an error response to see what the receiver complained about.
_EXCERPT = 200


@dataclass(frozen=True)
class DocumentFacts:
    """What workflow conditions, title templates and the event see of a document."""

    tenant: str
    document_id: int
    sha256: str
    filename: str  # the original file name as uploaded
    source: str  # "cli", "sftp:<account>", "watch:<folder path>"
    subfolder: str  # below the inbox or hot folder, "/"-separated; "" at the top level
    tags: tuple[str, ...]
    correspondent: str | None
    document_type: str | None
    title: str
    issued_date: datetime.date | None
    page_count: int


@dataclass(frozen=True)
class Applied:
    """What one workflow does to the document."""

    workflow: str
    add_tags: tuple[str, ...]  # only tags the document did not have yet
    correspondent: str | None  # None: leave as is
    document_type: str | None
    title: str | None  # rendered; None: leave as is (no template, or it rendered empty)
    webhook: WebhookConfig | None


class WebhookError(IngestdError):
    """A webhook was not accepted (non-2xx, timeout, network error); worth a retry."""

    def __init__(self, url: str, status: int | None, detail: str) -> None:
        shown = f"HTTP {status}" if status is not None else "no response"
        super().__init__(f"webhook {url}: {shown}" + (f": {detail}" if detail else ""))
        self.url = url  # without credentials, query or token-like path segments
        self.status = status
        self.detail = detail


# --- conditions and actions -----------------------------------------------------------


def plan(rules: Sequence[WorkflowRule], facts: DocumentFacts) -> list[Applied]:
    """The actions of ``facts.tenant``'s workflows whose conditions hold, in config order."""
    applied = []
    for rule in rules:
        if rule.tenant != facts.tenant or not matches(rule.when, facts):
            continue
        then = rule.then
        known = {t.casefold() for t in facts.tags}
        new_tags: list[str] = []
        for tag in then.add_tags:
            if tag.casefold() not in known:
                known.add(tag.casefold())
                new_tags.append(tag)
        step = Applied(
            workflow=rule.name,
            add_tags=tuple(new_tags),
            correspondent=then.correspondent,
            document_type=then.document_type,
            title=None,
            webhook=then.webhook,
        )
        if then.title is not None:
            # Rendered with this workflow's own tags, correspondent and type in place.
            rendered = render_title(then.title, apply_step(facts, step))
            step = replace(step, title=rendered or None)
        facts = apply_step(facts, step)
        applied.append(step)
    return applied


def apply_step(facts: DocumentFacts, step: Applied) -> DocumentFacts:
    """``facts`` as they are after ``step``: what the next workflow sees."""
    return replace(
        facts,
        tags=facts.tags + step.add_tags,
        correspondent=step.correspondent if step.correspondent is not None else facts.correspondent,
        document_type=step.document_type if step.document_type is not None else facts.document_type,
        title=step.title if step.title is not None else facts.title,
    )


def matches(when: WorkflowConditions, facts: DocumentFacts) -> bool:
    """True if every condition given in ``when`` holds for ``facts``."""
    # Sources name accounts and paths, which are case-sensitive.
    if when.sources and not any(fnmatch.fnmatchcase(facts.source, g) for g in when.sources):
        return False
    if when.filename is not None and not _iglob(facts.filename, when.filename):
        return False
    if when.subfolder is not None and not _iglob(facts.subfolder.strip("/"), when.subfolder):
        return False
    tags = {t.casefold() for t in facts.tags}
    if not all(t.casefold() in tags for t in when.has_tags):
        return False
    return _same_name(when.correspondent, facts.correspondent) and _same_name(
        when.document_type, facts.document_type
    )


def _iglob(value: str, pattern: str) -> bool:
    # Scanners and Windows shares do not agree on case, nor macOS and Linux on NFC/NFD.
    return fnmatch.fnmatchcase(_fold_case(value), _fold_case(pattern))


def _fold_case(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold()


def _same_name(wanted: str | None, actual: str | None) -> bool:
    return wanted is None or (actual is not None and _fold_case(wanted) == _fold_case(actual))


# --- title templates ------------------------------------------------------------------

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_WHITESPACE = re.compile(r"\s+")
# What separates placeholders; at the edges it was next to an empty value.
_DANGLING = " -–—_,;:/|·"


def template_values(facts: DocumentFacts) -> dict[str, str]:
    """The value of every placeholder a title template may use ("" when unknown)."""
    issued = facts.issued_date
    return {
        "filename": facts.filename,
        "stem": PurePosixPath(facts.filename.replace("\\", "/")).stem,
        "correspondent": facts.correspondent or "",
        "document_type": facts.document_type or "",
        "issued_date": issued.isoformat() if issued is not None else "",
        "year": f"{issued.year:04d}" if issued is not None else "",
        "month": f"{issued.month:02d}" if issued is not None else "",
        "tenant": facts.tenant,
        "source": facts.source,
        "subfolder": facts.subfolder,
        "title": facts.title,
        "page_count": str(facts.page_count),
    }


def render_title(template: str, facts: DocumentFacts) -> str:
    """``template`` with its ``{placeholders}`` filled in, at most 200 characters.

    Unknown values render empty; separators left dangling at the edges go, so
    ``"{correspondent} - {title}"`` without a correspondent is just the title. ValueError
    for a template that config validation would refuse.
    """
    values = template_values(facts)
    out = []
    for literal, field in template_fields(template):
        out.append(literal)
        if field is not None:
            out.append(values[field])
    text = _CONTROL_CHARS.sub(" ", "".join(out))
    return _cap_title(_WHITESPACE.sub(" ", text).strip(_DANGLING))


# --- the event and its delivery -------------------------------------------------------


def event_payload(facts: DocumentFacts, workflow: str) -> dict[str, Any]:
    """The JSON event a workflow's webhook receives."""
    return {
        "event": EVENT_ANALYZED,
        "workflow": workflow,
        "tenant": facts.tenant,
        "document": {
            "id": facts.document_id,
            "sha256": facts.sha256,
            "filename": facts.filename,
            "title": facts.title,
            "issued_date": facts.issued_date.isoformat() if facts.issued_date else None,
            "tags": list(facts.tags),
            "correspondent": facts.correspondent,
            "document_type": facts.document_type,
            "source": facts.source,
            "subfolder": facts.subfolder,
            "page_count": facts.page_count,
        },
    }


def event_body(event: dict[str, Any]) -> bytes:
    """The exact bytes sent (and signed) for ``event``."""
    return json.dumps(event, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Ingestd-Signature`` value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret, timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return f"sha256={digest.hexdigest()}"


def verify_signature(
    secret: bytes,
    timestamp: str,
    body: bytes,
    header: str,
    *,
    max_age: float | None = None,
    now: float | None = None,
) -> bool:
    """True if ``header`` signs ``body`` at ``timestamp`` with ``secret`` (for receivers).

    With ``max_age`` (seconds), a timestamp further than that from ``now`` is refused too.
    """
    if not timestamp.isascii() or not timestamp.isdigit():
        return False
    if max_age is not None:
        current = time.time() if now is None else now
        if abs(current - int(timestamp)) > max_age:
            return False
    return hmac.compare_digest(sign(secret, timestamp, body), header.strip())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # Returning None makes urllib raise HTTPError for the 3xx response itself.
    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        return None


_AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]


class Deadline:
    """The end of one delivery, enforced on every step of it.

    Socket timeouts bound each operation, not their sum: a receiver that sends a byte a
    little more often than the timeout (or an endless body) would hold the job for as long
    as it likes. So a timer shuts the connection's socket down when the time is up; every
    send or recv blocked on it then returns at once, whichever layer is waiting (TLS
    handshake, proxy tunnel, status line, headers, body), and the request fails. The timer
    shuts down a duplicate of the socket's descriptor that it owns: the connection is the
    same, but the descriptor cannot be closed (and its number reused) under the timer, nor
    be detached by ``ssl.wrap_socket`` mid-handshake. Before there is a connection the
    lookup and the connect are bounded by the time that is left (``connect``).

    This keeps urllib doing the HTTP (proxies, TLS defaults, no redirects) and needs no
    check between reads inside http.client, which reads headers through a buffered file.
    """

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._watched: socket.socket | None = None  # our dup of the connection's socket
        self._finished = False
        self.expired = False  # the timer fired before the delivery had finished
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.name = "webhook-deadline"
        self._timer.daemon = True

    def __enter__(self) -> Self:
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._finished = True
            self._timer.cancel()
            self._forget()

    def remaining(self) -> float:
        """Seconds left; TimeoutError once there are none."""
        left = self._end - time.monotonic()
        if left <= 0 or self.expired:
            raise TimeoutError("deadline passed")
        return left

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down when the time is up; TimeoutError if it already is."""
        # After settimeout: dup() copies the timeout, and so the descriptors' shared
        # O_NONBLOCK flag stays as ``sock`` needs it.
        dup = sock.dup()
        with self._lock:
            self._forget()
            self._watched = dup
            if self.expired or self._finished:
                raise TimeoutError("deadline passed")

    def connect(
        self,
        address: tuple[str, int],
        timeout: float | None = None,
        source_address: tuple[str, int] | None = None,
    ) -> socket.socket:
        """``socket.create_connection`` within the deadline (which supersedes ``timeout``).

        Every address tried gets the time that is left, not a full timeout each; the
        socket keeps that timeout as a backstop for later operations, which the timer
        ends at the deadline anyway.
        """
        host, port = address
        error: OSError | None = None
        for family, kind, proto, _, sockaddr in self._resolve(host, port):
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(self.remaining())
                self.watch(sock)
                if source_address is not None:
                    sock.bind(source_address)
                sock.connect(sockaddr)
                return sock
            except TimeoutError:
                sock.close()
                raise
            except OSError as exc:
                sock.close()
                error = exc
        raise error if error is not None else OSError(f"no address found for {host}")

    def _resolve(self, host: str, port: int) -> list[_AddrInfo]:
        # getaddrinfo has no timeout of its own (the resolver waits 5 s and more per server
        # and attempt): look up in a thread and stop waiting at the deadline. A lookup that
        # outlives it finishes unobserved in its daemon thread.
        found: list[_AddrInfo] = []
        failed: list[Exception] = []

        def lookup() -> None:
            try:
                found.extend(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
            except Exception as exc:  # handed to the caller, as if raised there
                failed.append(exc)

        thread = threading.Thread(target=lookup, name="webhook-lookup", daemon=True)
        thread.start()
        thread.join(self.remaining())
        if thread.is_alive():
            raise TimeoutError(f"looking up {host} took too long")
        if failed:
            raise failed[0]
        return found

    def _expire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self.expired = True
            if self._watched is not None:
                with contextlib.suppress(OSError):
                    self._watched.shutdown(socket.SHUT_RDWR)

    def _forget(self) -> None:
        # With the lock held.
        if self._watched is not None:
            self._watched.close()
            self._watched = None


class _HTTPConnection(http.client.HTTPConnection):
    """A connection that opens its socket within ``deadline``."""

    def __init__(self, *args: Any, deadline: Deadline | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if deadline is not None:  # always given; a default only to fit do_open's type
            # What connect() opens its socket with (socket.create_connection otherwise).
            self._create_connection = deadline.connect


class _HTTPSConnection(_HTTPConnection, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPConnection, req, deadline=self._deadline)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    # Like the default HTTPSHandler: no context given, so http.client's default one.
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPSConnection, req, deadline=self._deadline)


def deliver_webhook(
    webhook: WebhookConfig, event: dict[str, Any], *, event_id: str, timeout: float | None = None
) -> int:
    """POST ``event`` signed to ``webhook.url``; the 2xx status, else WebhookError.

    ``timeout`` (default ``webhook.timeout``) bounds the whole delivery: lookup, connect,
    sending, and receiving the status, headers and the start of the body; a receiver still
    answering then is cut off (WebhookError "did not answer within N s"). The secret is
    read on every call, so a rotated secret file takes effect at once; a missing or unsafe
    secret raises ConfigError.
    """
    url = webhook.display_url
    body = event_body(event)
    timestamp = str(int(time.time()))
    # S310: WebhookConfig admits only http:// and https:// URLs.
    request = urllib.request.Request(  # noqa: S310
        webhook.url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": f"ingestd/{__version__}",
            "X-Ingestd-Event-Id": event_id,
            "X-Ingestd-Timestamp": timestamp,
            "X-Ingestd-Signature": sign(webhook.secret(), timestamp, body),
        },
    )
    limit = webhook.timeout if timeout is None else timeout
    late = WebhookError(url, None, f"did not answer within {limit:g} s")
    failure: WebhookError | None = None
    with Deadline(limit) as deadline:
        # Built per call: proxy settings are read from the environment when it is built.
        opener = urllib.request.build_opener(
            _NoRedirect(), _HTTPHandler(deadline), _HTTPSHandler(deadline)
        )
        try:
            with opener.open(request, timeout=limit) as response:
                status = int(response.status)
                response.read(65536)  # let the receiver finish its answer before we hang up
        except urllib.error.HTTPError as exc:
            with exc:
                failure = WebhookError(url, exc.code, _excerpt(exc))
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, TimeoutError):
                failure = late
            else:
                failure = WebhookError(url, None, str(reason) or type(reason).__name__)
    if failure is not None and failure.status is not None:
        raise failure  # the receiver's refusal stands, even if its excerpt was cut short
    # Cut off, whatever that looked like: an error, or a short answer that http.client
    # took for a complete one (end of stream ends the headers and an unframed body).
    if deadline.expired:
        raise late
    if failure is not None:
        raise failure
    if not 200 <= status < 300:
        raise WebhookError(url, status, "")
    return status


def _excerpt(response: urllib.error.HTTPError) -> str:
    """The start of an error response's body, on one line."""
    try:
        raw = response.read(_EXCERPT * 4)
    except (OSError, http.client.HTTPException):
        return ""
    text = _WHITESPACE.sub(" ", _CONTROL_CHARS.sub(" ", raw.decode("utf-8", "replace"))).strip()
    return text[:_EXCERPT] + ("…" if len(text) > _EXCERPT else "")
