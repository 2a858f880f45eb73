"""What every response and every state change goes through: security headers (a strict
Content-Security-Policy, no framing, no sniffing), the CSRF token of the session, the
session's secret key, and the limit on failed logins.

Invariants enforced here:
- no page runs inline script or loads anything from elsewhere (CSP ``default-src 'self'``,
  no ``unsafe-inline``);
- a POST without the session's CSRF token changes nothing (403), compared in constant time;
- after ``login_failures`` failures from an address or for a login within the window,
  further attempts are refused before any password is checked (429, Retry-After).
"""

from __future__ import annotations

import hmac
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from ingestd import durable

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
]
HSTS = (b"strict-transport-security", b"max-age=31536000")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class SecurityHeaders:
    """ASGI middleware: every HTTP response carries HEADERS (and HSTS over HTTPS);
    a page that set its own header of the same name keeps its value."""

    def __init__(self, app: ASGIApp, *, https: bool) -> None:
        self.app = app
        self.extra = [*HEADERS, HSTS] if https else list(HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                have = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in self.extra if k not in have]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


# -- CSRF -------------------------------------------------------------------------------
def csrf_token(session: MutableMapping[str, Any]) -> str:
    """The session's CSRF token, made at its first form."""
    token = session.get("csrf")
    if not isinstance(token, str) or len(token) < 32:
        token = secrets.token_urlsafe(32)
        session["csrf"] = token
    return token


def csrf_ok(session: MutableMapping[str, Any], sent: object) -> bool:
    """Whether ``sent`` (a form's field) is the session's token (constant time)."""
    token = session.get("csrf")
    if not isinstance(token, str) or not isinstance(sent, str) or not token:
        return False
    return hmac.compare_digest(token.encode(), sent.encode())


# -- the session key ------------------------------------------------------------------------
def session_key(state_dir: Path) -> str:
    """The key the session cookies are signed with: ``<state_dir>/web/session.key``
    (0600), made on first use. Replacing the file logs everyone out."""
    path = state_dir / "web" / "session.key"
    try:
        key = path.read_text().strip()
        if len(key) >= 43:
            return key
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48)
    old = os.umask(0o077)
    try:
        durable.replace_whole(path, (key + "\n").encode(), 0o600)
    finally:
        os.umask(old)
    return key


# -- failed logins ---------------------------------------------------------------------------
class LoginLimiter:
    """Failed logins per address and per login in a sliding window. ``refused`` answers
    before a password is checked: an attacker cannot keep guessing by spreading guesses
    over logins (the address counts) or over addresses (the login counts)."""

    def __init__(
        self, failures: int, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.failures = failures
        self.window = window
        self.clock = clock
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        q = self._seen.setdefault(key, deque())
        while q and q[0] <= now - self.window:
            q.popleft()
        return q

    def refused(self, address: str, login: str) -> float:
        """Seconds until an attempt is allowed again (0: allowed now)."""
        now = self.clock()
        with self._lock:
            wait = 0.0
            for key in (f"a:{address}", f"l:{login.lower()}"):
                q = self._recent(key, now)
                if len(q) >= self.failures:
                    wait = max(wait, q[0] + self.window - now)
            return wait

    def failed(self, address: str, login: str) -> None:
        """Count one failure for the address and for the login."""
        now = self.clock()
        with self._lock:
            for key in (f"a:{address}", f"l:{login.lower()}"):
                self._recent(key, now).append(now)
            if len(self._seen) > 100_000:  # bounded: forget the quiet ones
                for key in [k for k, q in self._seen.items() if not self._recent(k, now)]:
                    del self._seen[key]


class RouteMetrics:
    """ASGI middleware: each HTTP request counted and timed by its route's pattern (never
    the URL, which holds ids and names), method and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from ingestd.runtime import metrics

        started = time.monotonic()
        status = [500]

        async def noted(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noted)
        finally:
            route = _route_of(scope)
            method = str(scope.get("method", "GET"))
            if method not in _METHODS:
                method = "other"
            metrics.WEB_REQUESTS.labels(route, method, str(status[0])).inc()
            metrics.WEB_SECONDS.labels(route).observe(time.monotonic() - started)


_METHODS = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PROPFIND", "PROPPATCH",
            "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK"}  # fmt: skip


def _route_of(scope: Scope) -> str:
    """The matched route's pattern; "/dav" for the mount, "other" for no route."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str) and path:
        return path
    raw = str(scope.get("path", ""))
    if raw.startswith("/dav"):
        return "/dav"
    if raw.startswith("/static/"):
        return "/static"
    return "other"


class PersonRate:
    """Requests per person in a sliding minute: past ``per_minute`` a person's further
    requests are 429 until the minute has moved on (one person's script cannot starve
    everyone else's pages, nor page through an archive at machine speed)."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def wait(self, login: str) -> float:
        """Seconds the person must wait (0: this request may go, and is counted)."""
        now = self.clock()
        key = login.lower()
        with self._lock:
            q = self._seen.setdefault(key, deque())
            while q and q[0] <= now - 60:
                q.popleft()
            if len(q) >= self.per_minute:
                return q[0] + 60 - now
            q.append(now)
            if len(self._seen) > 100_000:
                for k in [k for k, v in self._seen.items() if not v or v[-1] <= now - 60]:
                    del self._seen[k]
            return 0.0
