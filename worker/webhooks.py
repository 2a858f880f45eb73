"""Webhook delivery: one signed JSON POST, bounded as a whole by a deadline.

``deliver_webhook`` POSTs an event (a workflow's ``event_payload`` from
``worker/analysis/workflows.py``, an operator notification from ``worker/notify.py``) as
JSON (UTF-8, sorted keys, no insignificant whitespace) with these headers:

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

import hashlib
import hmac
import http.client
import json
import re
import time
import urllib.error
import urllib.request
from typing import Any

from ingestd import __version__
from ingestd.config.rules import WebhookConfig
from ingestd.errors import IngestdError
from ingestd.textsafe import recordable
from worker.deadline import Deadline

# Enough of an error response to see what the receiver complained about.
_EXCERPT = 200
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_WHITESPACE = re.compile(r"\s+")


class WebhookError(IngestdError):
    """A webhook was not accepted (non-2xx, timeout, network error); worth a retry."""

    transient = True

    def __init__(self, url: str, status: int | None, detail: str) -> None:
        shown = f"HTTP {status}" if status is not None else "no response"
        super().__init__(f"webhook {url}: {shown}" + (f": {detail}" if detail else ""))
        self.url = url  # without credentials, query or token-like path segments
        self.status = status
        self.detail = detail


def event_body(event: dict[str, Any]) -> bytes:
    """The exact bytes sent (and signed) for ``event``: UTF-8 JSON, whatever its text held
    (a file name's undecodable bytes escaped as ``\\xNN``: ingestd/textsafe.py)."""
    data = recordable(event)
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


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
