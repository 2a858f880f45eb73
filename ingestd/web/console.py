"""What every console page shares: the app's state (``Console``), who is asking (the
session), in which tenant (the URL) and whether they may (the capability table,
``scope``), rendering, the CSRF-checked form, and the download file name."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from ingestd import log
from ingestd.archive.store import ArchiveStore
from ingestd.config.settings import TENANT_NAME, Config
from ingestd.db.database import Database
from ingestd.people.accounts import Logins, Person, person_now
from ingestd.people.capabilities import Action, may
from ingestd.web import guard, i18n

HERE = Path(__file__).resolve().parent
PAGE_SIZE = 50
PREVIEW_PAGES = 100  # a document page shows the previews of its first pages
FILTERS = ("name", "source", "since", "until", "status", "tag", "correspondent", "type")
STATUSES = ("queued", "processing", "done", "attention", "failed", "split")
MAX_FILTERED = 1000  # a query's hits the filters choose from
_TENANT = re.compile(TENANT_NAME)


@dataclass
class Console:
    """What the pages share: config, database, archive, the login check and limiter."""

    config: Config
    db: Database
    store: ArchiveStore
    logins: Logins
    limiter: guard.LoginLimiter
    rate: guard.PersonRate
    templates: Jinja2Templates
    secret: str  # the session key: it signs the cookies and the first-password links


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def _lang(request: Request) -> str:
    return i18n.language(request.headers.get("accept-language"))


def address_of(request: Request) -> str:
    return request.client.host if request.client else "-"


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    lang = _lang(request)
    console = console_of(request)
    role = context.get("role")
    return console.templates.TemplateResponse(
        request,
        template,
        {
            "lang": lang,
            "t": lambda key: i18n.text(lang, key),
            "csrf": guard.csrf_token(request.session),
            "me": context.pop("me", None),
            "can": {str(a): may(role, a) for a in Action},
            **context,
        },
        status_code=status_code,
    )


# -- who is asking ----------------------------------------------------------------------------
def who_asks(request: Request) -> Person | None:
    """The logged-in person, read from the database on every request (a membership
    removed a second ago counts now); None when not logged in or the login expired."""
    login = request.session.get("login")
    at = request.session.get("at")
    if not isinstance(login, str) or not isinstance(at, int | float):
        return None
    if time.time() - at > console_of(request).config.web.session_minutes * 60:
        request.session.clear()
        return None
    found = person_now(console_of(request).db, login)
    if found is None or at <= found.sessions_from:  # signed out since, or a new password
        request.session.clear()
        return None
    return found


def required(request: Request) -> Person:
    me = who_asks(request)
    if me is None:
        raise HTTPException(303, headers={"location": "/login"})
    wait = console_of(request).rate.wait(me.login)
    if wait > 0:
        log.get_logger().warning("web.rate_limited", login=me.login, retry_after=int(wait))
        raise HTTPException(429, headers={"retry-after": str(int(wait) + 1)})
    return me


def scope(request: Request, action: Action) -> tuple[Person, str, int]:
    """(person, tenant, tenant id) if the person may do ``action`` in the URL's tenant;
    404 when they are no member (or it is no tenant), 403 when their set does not allow."""
    me = required(request)
    tenant = str(request.path_params["tenant"])
    capability_set = me.set_in(tenant) if _TENANT.fullmatch(tenant) else None
    if capability_set is None:
        raise HTTPException(404)
    if not may(capability_set, action):
        raise HTTPException(403)
    return me, tenant, me.tenant_ids[tenant]  # read with the memberships: no second query


def web_actor(request: Request, me: Person) -> dict[str, object]:
    return {"login": me.login, "address": address_of(request), "via": "web"}


def doc_id_of(request: Request) -> int:
    raw = str(request.path_params["doc"])
    if not raw.isdigit() or len(raw) > 18:
        raise HTTPException(404)
    return int(raw)


# -- changes: each a POST with the session's CSRF token ------------------------------------
async def checked_form(request: Request) -> Any:
    form = await request.form(max_files=0, max_fields=20)
    if not guard.csrf_ok(request.session, form.get("csrf")):
        raise HTTPException(403)
    return form


CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def attachment(name: str) -> str:
    """Content-Disposition for ``name`` (already made safe): an ASCII stand-in and the
    exact name as RFC 5987 UTF-8 (every browser reads the latter)."""
    plain = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"
