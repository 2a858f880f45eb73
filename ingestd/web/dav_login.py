"""Who is at the WebDAV mount (ingestd/web/dav.py): HTTP Basic against the people, a
person's requests per minute, and the tenants a person may mount.

Invariants enforced here: every request is authenticated (the person's password; no
anonymous share, a banned address refused before its password is looked at, a failed
login counted towards the SFTP bans); a person without ``mount`` on any tenant is refused
as a wrong password is; the console's per-person budget holds for the mount too (429).
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from wsgidav.dc.base_dc import BaseDomainController
from wsgidav.mw.base_mw import BaseMiddleware

from ingestd import log
from ingestd.archive.store import ArchiveStore
from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.people.accounts import Logins, Person
from ingestd.people.capabilities import Action, may
from ingestd.runtime import metrics
from ingestd.sources.sftp.bans import read_bans, report_failure
from ingestd.textsafe import shown
from ingestd.web.guard import LoginLimiter, PersonRate

PERSON = "ingestd.person"  # the WSGI environ key the domain controller fills


@dataclass
class DavContext:
    config: Config
    db: Database
    store: ArchiveStore
    logins: Logins
    limiter: LoginLimiter
    rate: PersonRate  # the console's: one budget per person, pages and mount together


# -- who: HTTP Basic against the people ------------------------------------------------------
class PeopleDomainController(BaseDomainController):
    """Basic authentication by a person's login and password. A good answer is cached a
    minute (keyed by an HMAC of the password with a key of this process), so a client
    that sends credentials with every request costs one bcrypt check a minute, not one
    per request; a new password or a sign-out since the check voids it at the next
    request. Failures count towards the console's login throttle."""

    CACHE_SECONDS = 60.0

    def __init__(self, wsgidav_app: Any, config: dict[str, Any]) -> None:
        super().__init__(wsgidav_app, config)
        self.ctx: DavContext = config["ingestd"]
        self._key = secrets.token_bytes(32)
        self._cache: dict[tuple[str, bytes], tuple[float, float]] = {}  # (until, checked at)
        self._lock = threading.Lock()

    def get_domain_realm(self, path_info: str, environ: dict[str, Any]) -> str:
        return "ingestd"

    def require_authentication(self, realm: str, environ: dict[str, Any]) -> bool:
        return True

    def supports_http_digest_auth(self) -> bool:
        return False  # digest needs the password or its MD5 on the server: never

    def digest_auth_user(self, realm: str, user_name: str, environ: dict[str, Any]) -> bool:
        return False

    def basic_auth_user(
        self, realm: str, user_name: str, password: str, environ: dict[str, Any]
    ) -> bool:
        address = str(environ.get("REMOTE_ADDR") or "-")
        login = user_name[:200]
        tag = hmac.new(self._key, password.encode("utf-8", "surrogateescape"), "sha256").digest()
        now = time.monotonic()
        with self._lock:
            until, checked = self._cache.get((login.lower(), tag), (0.0, 0.0))
        found = self._person(login) if until > now else None
        # A new password (or a sign-out in the console) since the check voids it at once.
        if found is None or found.sessions_from >= checked:
            if self.ctx.limiter.refused(address, login) > 0 or self._banned(address):
                metrics.WEB_LOGINS.labels("webdav", "throttled").inc()
                log.get_logger().warning("dav.login_throttled", address=address, login=shown(login))
                return False
            found = self.ctx.logins.check(login, password)
            if found is None:
                self.ctx.limiter.failed(address, login)
                with contextlib.suppress(OSError, ValueError):
                    report_failure(self.ctx.config.paths.state_dir, address)
                metrics.WEB_LOGINS.labels("webdav", "failed").inc()
                log.get_logger().warning("dav.login_failed", address=address, login=shown(login))
                return False
            metrics.WEB_LOGINS.labels("webdav", "ok").inc()
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[(login.lower(), tag)] = (now + self.CACHE_SECONDS, time.time())
        if found is None or not mountable(found):
            return False
        environ[PERSON] = found
        return True

    def _banned(self, address: str) -> bool:
        return any(b["ip"] == address for b in read_bans(self.ctx.config.paths.state_dir))

    def _person(self, login: str) -> Person | None:
        """The person as the database says now (memberships may have changed)."""
        from ingestd.people.accounts import person_now

        return person_now(self.ctx.db, login)


class PersonRateLimit(BaseMiddleware):
    """After authentication: a person past the console's requests per minute gets 429
    with Retry-After, counted in the same budget as their pages (one person's sync tool
    cannot starve everyone else's mount or page through an archive at machine speed)."""

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        person: Person | None = environ.get(PERSON)
        ctx: DavContext = self.config["ingestd"]
        wait = ctx.rate.wait(person.login) if person is not None else 0.0
        if person is None or wait <= 0:
            return self.next_app(environ, start_response)
        log.get_logger().warning("dav.rate_limited", login=shown(person.login),
                                 retry_after=int(wait) + 1)  # fmt: skip
        body = b"Too many requests: try again later.\n"
        start_response(
            "429 Too Many Requests",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("Retry-After", str(int(wait) + 1)),
            ],
        )
        return [body]


def mountable(p: Person) -> list[str]:
    return sorted(t for t, s in p.memberships.items() if may(s, Action.mount))
