"""The console's pages, top-down: who is asking (the session), in which tenant (the URL),
may they (the capability table), then the page.

    GET  /login, POST /login, POST /logout
    OPTIONS /                                "this server speaks WebDAV" (Windows asks)
    GET  /                                   the archives the person is a member of
    GET  /t/{tenant}/                        search and filters            (search)
    GET  /t/{tenant}/d/{id}                  a document: record, lineage, history (view)
    GET  /t/{tenant}/d/{id}/original         the original, re-hashed       (download)
    GET  /t/{tenant}/d/{id}/searchable       the searchable PDF            (download)
    GET  /t/{tenant}/d/{id}/preview.png      page 1 as analysis drew it    (view)
    GET  /t/{tenant}/d/{id}/page/{n}.png     page n, drawn on first view   (view)
    POST /t/{tenant}/d/{id}/edit             title and date                (edit)
    POST /t/{tenant}/upload                  files into the intake         (upload)
    GET  /t/{tenant}/attention               documents in attention        (attention)
    GET  /t/{tenant}/arrivals                every file that arrived, and why (arrivals)
    GET  /t/{tenant}/members, POST .../members/{login}   people and their sets (members)
    POST /t/{tenant}/members                 a new member                  (members)
    POST /t/{tenant}/members/{login}/welcome a link to set a first password (members)
    GET  /welcome/{token}, POST              a new member sets their password (the link)
    GET  /account, POST /account/password    one's own archives and password
    GET  /admin                              what `ingestd status` shows   (admin: status)
    POST /t/{tenant}/d/{id}/requeue|done     analyse again / accept as is  (attention)

Scope rule, enforced in ``_scope``: a tenant the person is no member of, or a name that
could not be a tenant, is 404 (its existence is not told); a member whose set lacks the
action gets 403. Every query below names the tenant, so an id of another tenant is 404.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ingestd import log, passwords
from ingestd.archive import audit, derived, handout
from ingestd.archive.store import ArchiveStore
from ingestd.config.settings import TENANT_NAME, Config
from ingestd.db.database import Database, Tx
from ingestd.errors import IngestdError, QueryCanceled, UsageError
from ingestd.people import accounts
from ingestd.people.accounts import Logins, Person, person_now
from ingestd.people.capabilities import ADMIN, TENANT_SETS, Action, may
from ingestd.people.directory import Directory
from ingestd.runtime import metrics
from ingestd.search import limits
from ingestd.search.query import search
from ingestd.textsafe import shown
from ingestd.web import guard, i18n, previews, welcome

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


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def _lang(request: Request) -> str:
    return i18n.language(request.headers.get("accept-language"))


def _address(request: Request) -> str:
    return request.client.host if request.client else "-"


def _page(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    lang = _lang(request)
    console = _console(request)
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
def _who(request: Request) -> Person | None:
    """The logged-in person, read from the database on every request (a membership
    removed a second ago counts now); None when not logged in or the login expired."""
    login = request.session.get("login")
    at = request.session.get("at")
    if not isinstance(login, str) or not isinstance(at, int | float):
        return None
    if time.time() - at > _console(request).config.web.session_minutes * 60:
        request.session.clear()
        return None
    found = person_now(_console(request).db, login)
    if found is None or at <= found.sessions_from:  # signed out since, or a new password
        request.session.clear()
        return None
    return found


def _required(request: Request) -> Person:
    me = _who(request)
    if me is None:
        raise HTTPException(303, headers={"location": "/login"})
    wait = _console(request).rate.wait(me.login)
    if wait > 0:
        log.get_logger().warning("web.rate_limited", login=me.login, retry_after=int(wait))
        raise HTTPException(429, headers={"retry-after": str(int(wait) + 1)})
    return me


def _scope(request: Request, action: Action) -> tuple[Person, str, int]:
    """(person, tenant, tenant id) if the person may do ``action`` in the URL's tenant;
    404 when they are no member (or it is no tenant), 403 when their set does not allow."""
    me = _required(request)
    tenant = str(request.path_params["tenant"])
    capability_set = me.set_in(tenant) if _TENANT.fullmatch(tenant) else None
    if capability_set is None:
        raise HTTPException(404)
    if not may(capability_set, action):
        raise HTTPException(403)
    return me, tenant, me.tenant_ids[tenant]  # read with the memberships: no second query


# -- login ----------------------------------------------------------------------------------
def login_form(request: Request) -> Response:
    if _who(request) is not None:
        return RedirectResponse("/", status_code=303)
    notice = "first_password_set" if request.query_params.get("welcome") == "1" else None
    return _page(request, "login.html", notice=notice)


async def login_post(request: Request) -> Response:
    form = await request.form()
    if not guard.csrf_ok(request.session, form.get("csrf")):
        raise HTTPException(403)
    login = str(form.get("login") or "")[:200]
    password = str(form.get("password") or "")[:1024]
    console = _console(request)
    address = _address(request)
    wait = max(console.limiter.refused(address, login), _banned(console, address))
    if wait > 0:
        log.get_logger().warning(
            "web.login_throttled", address=address, login=shown(login), retry_after=int(wait)
        )
        metrics.WEB_LOGINS.labels("web", "throttled").inc()
        response = _page(request, "login.html", 429, error="login_throttled")
        response.headers["retry-after"] = str(int(wait) + 1)
        return response
    found = await run_in_threadpool(console.logins.check, login, password)
    if found is None:
        console.limiter.failed(address, login)
        _report(console, address)
        metrics.WEB_LOGINS.labels("web", "failed").inc()
        log.get_logger().warning("web.login_failed", address=address, login=shown(login))
        return _page(request, "login.html", 401, error="login_failed")
    _start_session(request, found.login)
    metrics.WEB_LOGINS.labels("web", "ok").inc()
    log.get_logger().info("web.login", address=address, login=found.login)
    return RedirectResponse("/", status_code=303)


def _start_session(request: Request, login: str) -> None:
    """A new session for ``login``: nothing of the one before survives, a fresh CSRF
    token, begun now (a session begun before a sign-out or a new password is void)."""
    request.session.clear()
    request.session.update({"login": login, "at": time.time()})
    guard.csrf_token(request.session)


def _banned(console: Console, address: str) -> float:
    """Seconds left of a ban the SFTP server holds against ``address`` (one ban list for
    every front door), 0 when there is none."""
    from ingestd.sources.sftp.bans import read_bans

    for ban in read_bans(console.config.paths.state_dir):
        if ban["ip"] == address:
            return float(ban["remaining"])
    return 0.0


def _report(console: Console, address: str) -> None:
    """A failed login, for the SFTP server's ban list (it absorbs these within seconds)."""
    from ingestd.sources.sftp.bans import report_failure

    try:
        report_failure(console.config.paths.state_dir, address)
    except (OSError, ValueError) as exc:  # never a reason to fail the page
        log.get_logger().warning("web.ban_report_failed", address=address, error=str(exc))


async def logout(request: Request) -> Response:
    form = await request.form()
    if not guard.csrf_ok(request.session, form.get("csrf")):
        raise HTTPException(403)
    login = request.session.get("login")
    if isinstance(login, str):  # every copy of this session's cookie ends with it
        with _console(request).db.transaction() as tx:
            accounts.sign_out(tx, login, time.time())
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


# -- pages ----------------------------------------------------------------------------------
def home(request: Request) -> Response:
    me = _required(request)
    if len(me.memberships) == 1 and not me.admin:
        (tenant,) = me.memberships
        return RedirectResponse(f"/t/{tenant}/", status_code=303)
    return _page(request, "home.html", me=me, memberships=sorted(me.memberships.items()))


def _day(value: str | None, field: str) -> datetime | None:
    """A YYYY-MM-DD filter as the start of that day (UTC); 400 for anything else."""
    if not value:
        return None
    try:
        return datetime.combine(date.fromisoformat(value[:10]), datetime.min.time(), UTC)
    except ValueError:
        raise HTTPException(400, detail=f"{field}: a date as YYYY-MM-DD") from None


def _like(text: str | None) -> str | None:
    if not text:
        return None
    escaped = text[:200].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def search_page(request: Request) -> Response:
    me, tenant, tenant_id = _scope(request, Action.search)
    p = request.query_params
    q = (p.get("q") or "").strip()
    since = _day(p.get("since"), "since")
    until_day = _day(p.get("until"), "until")
    until = until_day + timedelta(days=1) if until_day else None
    status = (p.get("status") or "") or None
    if status is not None and status not in STATUSES:
        raise HTTPException(400, detail=f"status: one of {', '.join(STATUSES)}")
    filters = {
        "name": _like(p.get("name")),
        "source": (p.get("source") or "")[:100] or None,
        "since": since,
        "until": until,
        "status": status,
        "tag": (p.get("tag") or "")[:100] or None,
        "correspondent": (p.get("correspondent") or "")[:200] or None,
        "doc_type": (p.get("type") or "")[:200] or None,
    }
    filtered = any(v is not None for v in filters.values())
    error = None
    rows: list[dict[str, Any]] = []
    facets: list[dict[str, Any]] = []
    db = _console(request).db
    try:
        with db.transaction() as tx:
            if q:
                hits = search(tx, tenant_id, q, MAX_FILTERED if filtered else PAGE_SIZE)
                if filtered:
                    keep = {
                        r["id"]
                        for r in tx.all(
                            "web_documents",
                            {
                                **filters,
                                "ids": [h["id"] for h in hits],
                                "tenant_id": tenant_id,
                                "limit": MAX_FILTERED,
                            },
                        )
                    }
                    hits = [h for h in hits if h["id"] in keep]
                rows = hits[:PAGE_SIZE]
            else:
                rows = tx.all(
                    "web_documents",
                    {**filters, "ids": None, "tenant_id": tenant_id, "limit": PAGE_SIZE},
                )
            facets = tx.all("web_facets", {"tenant_id": tenant_id})
    except limits.QueryRefused as exc:
        error = str(exc)
    except QueryCanceled:
        error = str(limits.SearchTooSlow())
    return _page(
        request,
        "search.html",
        me=me,
        tenant=tenant,
        role=me.set_in(tenant),
        rows=rows,
        query=q,
        params={k: (p.get(k) or "")[:200] for k in FILTERS},
        facets={
            kind: [f["name"] for f in facets if f["kind"] == kind]
            for kind in ("tag", "correspondent", "type")
        },
        statuses=STATUSES,
        searched=bool(q),
        error=error,
    )


def _web_actor(request: Request, me: Person) -> dict[str, object]:
    return {"login": me.login, "address": _address(request), "via": "web"}


def document_page(request: Request) -> Response:
    me, tenant, tenant_id = _scope(request, Action.view)
    doc_id = _doc_id(request)
    db = _console(request).db
    with db.transaction() as tx:
        doc = tx.one("document_show", {"id": doc_id, "tenant": tenant})
        if doc is None:
            raise HTTPException(404)
        lineage = tx.all("web_document_lineage", {"id": doc_id, "tenant_id": tenant_id})
        files = tx.one("web_content_files", {"id": doc_id, "tenant_id": tenant_id})
        history = tx.all("trace_audit", {"id": doc_id, "tenant": tenant})
        audit.append(
            tx,
            chain=tenant_id,
            tenant=tenant,
            kind=audit.AuditKind.viewed,
            document_id=doc_id,
            detail={"by": _web_actor(request, me)},
        )
    # The searchable PDF's pages; before analysis made one, a PDF original's first page.
    analysed = files["searchable_pdf"] if files is not None else None
    original_pdf = files is not None and files["mime_type"] == "application/pdf"
    count = int(files["page_count"] or 0) if files is not None and analysed else int(original_pdf)
    return _page(
        request,
        "document.html",
        me=me,
        tenant=tenant,
        role=me.set_in(tenant),
        doc=doc,
        parts=[r for r in lineage if r["parent_id"] == doc_id],
        batch=next((r for r in lineage if r["child_id"] == doc_id), None),
        history=history,
        pages=range(1, min(count, PREVIEW_PAGES) + 1),
        more_pages=max(0, count - PREVIEW_PAGES),
        from_original=analysed is None and original_pdf,
    )


def _doc_id(request: Request) -> int:
    raw = str(request.path_params["doc"])
    if not raw.isdigit() or len(raw) > 18:
        raise HTTPException(404)
    return int(raw)


def _download(request: Request, searchable: bool) -> Response:
    me, tenant, _ = _scope(request, Action.download)
    doc_id = _doc_id(request)
    console = _console(request)
    try:
        out = handout.stream_out(
            console.db,
            console.store,
            console.config.paths.derived_dir,
            doc_id,
            tenant=tenant,
            searchable=searchable,
            by=_web_actor(request, me),
            to="web",
        )
    except (handout.NoSuchDocument, handout.NoSearchablePdf):
        raise HTTPException(404) from None
    metrics.WEB_DOWNLOADS.labels("web").inc()
    metrics.WEB_DOWNLOAD_BYTES.labels("web").inc(out.size)
    log.get_logger().info(
        "web.download",
        tenant=tenant,
        document=doc_id,
        trace=out.trace,
        variant=out.variant,
        size=out.size,
        login=me.login,
        address=_address(request),
    )
    return StreamingResponse(
        out.chunks,
        media_type=out.media_type,
        headers={
            "content-length": str(out.size),
            "content-disposition": attachment(out.name),
            "cache-control": "private, no-store",
        },
    )


def thumbnail(request: Request) -> Response:
    """The page-1 preview analysis made (PNG), inline; 404 until there is one."""
    _, _, tenant_id = _scope(request, Action.view)
    doc_id = _doc_id(request)
    console = _console(request)
    with console.db.transaction() as tx:
        row = tx.one("web_content_files", {"id": doc_id, "tenant_id": tenant_id})
    stored = row["thumbnail"] if row is not None else None
    path = derived.inside(console.config.paths.derived_dir, stored)
    if path is None or not path.is_file():
        raise HTTPException(404)
    return Response(
        path.read_bytes(),
        media_type="image/png",
        headers={"cache-control": "private, max-age=3600"},
    )


def page_preview(request: Request) -> Response:
    """Page n of the searchable PDF as a PNG (previews.py draws it in a child process on
    first view and keeps it); 404 for a page that is not there or cannot be drawn."""
    _, _, tenant_id = _scope(request, Action.view)
    doc_id = _doc_id(request)
    raw = str(request.path_params["page"])
    if not raw.isdigit() or len(raw) > 5:
        raise HTTPException(404)
    console = _console(request)
    with console.db.transaction() as tx:
        row = tx.one("web_content_files", {"id": doc_id, "tenant_id": tenant_id})
    if row is None:
        raise HTTPException(404)
    derived = console.config.paths.derived_dir
    try:
        if row["searchable_pdf"]:
            png = previews.page_png(
                derived, row["searchable_pdf"], int(raw), int(row["page_count"] or 0)
            )
        elif row["mime_type"] == "application/pdf":  # not analysed (yet): the original
            png = previews.original_png(
                derived, console.store, str(row["archive_path"]), int(raw), PREVIEW_PAGES
            )
        else:
            raise previews.NoPreview("no PDF to draw")
    except previews.NoPreview:
        raise HTTPException(404) from None
    return Response(png, media_type="image/png", headers={"cache-control": "private, max-age=3600"})


def attachment(name: str) -> str:
    """Content-Disposition for ``name`` (already made safe): an ASCII stand-in and the
    exact name as RFC 5987 UTF-8 (every browser reads the latter)."""
    plain = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


def download_original(request: Request) -> Response:
    return _download(request, searchable=False)


def download_searchable(request: Request) -> Response:
    return _download(request, searchable=True)


# -- changes: each a POST with the session's CSRF token ------------------------------------
async def _form(request: Request) -> Any:
    form = await request.form(max_files=0, max_fields=20)
    if not guard.csrf_ok(request.session, form.get("csrf")):
        raise HTTPException(403)
    return form


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


async def edit_document(request: Request) -> Response:
    form = await _form(request)
    me, tenant, tenant_id = await run_in_threadpool(_scope, request, Action.edit)
    doc_id = _doc_id(request)
    title = " ".join(str(form.get("title") or "").split())
    if not 1 <= len(title) <= 500 or _CONTROL.search(title):
        raise HTTPException(400, detail="title: 1 to 500 characters")
    raw_date = str(form.get("issued_date") or "").strip()
    try:
        issued = date.fromisoformat(raw_date) if raw_date else None
    except ValueError:
        raise HTTPException(400, detail="date: YYYY-MM-DD") from None

    def change() -> None:
        with _console(request).db.transaction() as tx:
            row = tx.one(
                "web_document_edit",
                {"id": doc_id, "tenant_id": tenant_id, "title": title, "issued_date": issued},
            )
            if row is None:
                raise HTTPException(404)
            audit.append(
                tx,
                chain=tenant_id,
                tenant=tenant,
                kind=audit.AuditKind.edited,
                document_id=doc_id,
                detail={
                    "by": _web_actor(request, me),
                    "title": [row["was_title"], title],
                    "issued_date": [
                        row["was_date"].isoformat() if row["was_date"] else None,
                        issued.isoformat() if issued else None,
                    ],
                },
            )

    await run_in_threadpool(change)
    return RedirectResponse(f"/t/{tenant}/d/{doc_id}", status_code=303)


def _upload_name(raw: str | None) -> str:
    """The file's own name: whatever path a browser sent before it is dropped."""
    name = re.split(r"[/\\]", raw or "")[-1].strip()
    return name or "upload"


async def upload(request: Request) -> Response:
    """Files from the browser into the same intake as every source (source web:LOGIN):
    the same type and size checks, refusals said on the page."""
    console = _console(request)
    limit = int(console.config.intake.max_file_size)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > 20 * limit + 1_000_000:
        raise HTTPException(413)
    me, tenant, _ = await run_in_threadpool(_scope, request, Action.upload)
    form = await request.form(max_files=20, max_fields=5)
    if not guard.csrf_ok(request.session, form.get("csrf")):
        raise HTTPException(403)
    inbox = _inbox(console.config)
    inbox.mkdir(mode=0o700, parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    for part in form.getlist("file"):
        if isinstance(part, str):
            continue
        name = _upload_name(part.filename)
        fd, tmp_name = tempfile.mkstemp(prefix="up-", dir=inbox)
        tmp = Path(tmp_name)
        size = 0
        too_large = False
        with open(fd, "wb") as out:
            while chunk := await part.read(1 << 20):
                size += len(chunk)
                if size > limit:
                    too_large = True
                    break
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())  # ours, like the SFTP spool's: linked into the archive
        if too_large:
            tmp.unlink(missing_ok=True)
            results.append({"name": name, "outcome": "refused", "reason": "too_large"})
            continue
        results.append(await run_in_threadpool(_ingest_upload, console, tenant, me, tmp, name))
    if not results:
        raise HTTPException(400, detail="no file")
    log.get_logger().info(
        "web.upload", tenant=tenant, login=me.login, files=len(results),
        outcomes=[r["outcome"] for r in results],
    )  # fmt: skip
    role = me.set_in(tenant)
    return _page(request, "uploaded.html", me=me, tenant=tenant, role=role, results=results)


def _ingest_upload(
    console: Console, tenant: str, me: Person, tmp: Path, name: str
) -> dict[str, Any]:
    from ingestd.daemon.wiring import make_intake
    from ingestd.intake.items import IntakeItem

    try:
        res = make_intake(console.config, console.db).ingest(
            IntakeItem(path=tmp, tenant=tenant, source=f"web:{me.login}", filename=name, owned=True)
        )
    except IngestdError as exc:  # the tenant suspended meanwhile, the database gone
        return {"name": name, "outcome": "refused", "reason": str(exc), "document_id": None}
    finally:
        tmp.unlink(missing_ok=True)
    return {
        "name": name,
        "outcome": str(res.outcome),
        "document_id": res.document_id,
        "reason": str(res.reason) if res.reason else None,
    }


def arrivals_page(request: Request) -> Response:
    """The tenant's arrivals: archived, duplicates, refusals and quarantines with the
    reason ("what happened to my file"), newest first; ``name`` filters by file name."""
    from ingestd.arrivals import story

    me, tenant, _ = _scope(request, Action.arrivals)
    name = (request.query_params.get("name") or "")[:200]
    rows = story.find(
        _console(request).db,
        tenant=tenant,
        name_like=_like(name.lower()) if name else None,
        limit=200,
    )
    return _page(
        request, "arrivals.html", me=me, tenant=tenant, role=me.set_in(tenant), rows=rows,
        name=name,
    )  # fmt: skip


def members_page(request: Request) -> Response:
    me, tenant, _ = _scope(request, Action.members)
    with _console(request).db.transaction() as tx:
        rows = accounts.listing(tx, tenant)
    return _page(
        request, "members.html", me=me, tenant=tenant, role=me.set_in(tenant), rows=rows,
        sets=TENANT_SETS,
    )  # fmt: skip


def _member_login(request: Request) -> str:
    """The login a members URL names; 404 for what could be no login (never cut short:
    a cut login could name someone else)."""
    login = str(request.path_params["login"])
    if len(login) > 200:
        raise HTTPException(404)
    return login


async def member_change(request: Request) -> Response:
    """An owner changes a member's set or removes the membership (never their own: an
    owner cannot lock the tenant out of its last owner by accident)."""
    form = await _form(request)
    me, tenant, _ = await run_in_threadpool(_scope, request, Action.members)
    login = _member_login(request)
    action = str(form.get("action") or "")
    if login.lower() == me.login.lower():
        raise HTTPException(400, detail="your own membership: ask another owner or the admin")

    def change() -> None:
        with _console(request).db.transaction() as tx:
            found = accounts.person(tx, login)
            if found is None or found.set_in(tenant) is None:
                raise HTTPException(404)
            if action == "remove":
                accounts.remove(tx, found.login, tenant=tenant)
            elif action in TENANT_SETS:
                accounts.add_member(tx, found.login, tenant, action)
            else:
                raise HTTPException(400, detail="action: remove or a capability set")
        log.get_logger().info(
            "web.member_changed", tenant=tenant, login=found.login, action=action, by=me.login
        )

    await run_in_threadpool(change)
    return RedirectResponse(f"/t/{tenant}/members", status_code=303)


async def member_add(request: Request) -> Response:
    """An owner makes a login a member with a set: a new person (who gets a password
    through the link the owner is offered next), or an existing one who keeps theirs."""
    form = await _form(request)
    me, tenant, _ = await run_in_threadpool(_scope, request, Action.members)
    login = str(form.get("login") or "").strip()  # never cut: a login too long is refused
    capability_set = str(form.get("set") or "")
    try:
        accounts.check_login(login)
        accounts.check_set(capability_set)
    except UsageError as exc:
        log.get_logger().warning("web.member_refused", tenant=tenant, login=shown(login[:300]),
                                 by=me.login, reason=str(exc))  # fmt: skip
        raise HTTPException(400, detail=str(exc)) from None
    if login.lower() == me.login.lower():
        raise HTTPException(400, detail="your own membership: ask another owner or the admin")

    def add() -> accounts.Change:
        with _console(request).db.transaction() as tx:
            return accounts.add_member(
                tx, login, tenant, capability_set, by=_web_actor(request, me)
            )

    done = await run_in_threadpool(add)
    log.get_logger().info(
        "web.member_added", tenant=tenant, login=done.login, set=capability_set,
        new_person=done.new_person, by=me.login,
    )  # fmt: skip
    return RedirectResponse(f"/t/{tenant}/members", status_code=303)


async def first_password_link(request: Request) -> Response:
    """An owner asks for the link a new member sets their first password with; shown once
    on this page (never logged or stored), good for welcome.WELCOME_DAYS."""
    await _form(request)
    me, tenant, _ = await run_in_threadpool(_scope, request, Action.members)
    login = _member_login(request)
    console = _console(request)

    def check() -> str | None:
        with console.db.transaction() as tx:
            return accounts.first_password_refusal(tx, login, tenant)

    refusal = await run_in_threadpool(check)
    if refusal is not None:
        log.get_logger().warning("web.first_password_link_refused", tenant=tenant,
                                 login=shown(login), by=me.login, reason=refusal)  # fmt: skip
        raise HTTPException(400, detail=refusal)
    token = welcome.make(console.secret, login, tenant, me.login)
    log.get_logger().info("web.first_password_link", tenant=tenant, login=login, by=me.login)
    response = _page(
        request, "welcome_link.html", me=me, tenant=tenant, role=me.set_in(tenant),
        login=login, link=f"{str(request.base_url).rstrip('/')}/welcome/{token}",
        days=welcome.WELCOME_DAYS,
    )  # fmt: skip
    response.headers["cache-control"] = "no-store"
    return response


def _link(request: Request) -> welcome.Welcome:
    """What the link in the URL says if the console signed it in time; 404 otherwise.
    Whether it still holds (the person still without a password and a member of that
    archive alone) is the database's to say, see _link_holds."""
    found = welcome.read(_console(request).secret, str(request.path_params["token"]))
    if found is None:
        raise HTTPException(404)
    return found


def _link_holds(tx: Tx, found: welcome.Welcome) -> None:
    if accounts.first_password_refusal(tx, found.login, found.tenant) is not None:
        raise HTTPException(404)  # used, or the person reaches more now: void


def welcome_form(request: Request) -> Response:
    found = _link(request)
    with _console(request).db.transaction() as tx:
        _link_holds(tx, found)
    response = _page(request, "welcome.html", login=found.login, tenant=found.tenant)
    response.headers["cache-control"] = "no-store"
    return response


def _new_password(form: Any) -> str:
    """The new password of a form (typed twice), or 400 saying what is wrong with it."""
    new = str(form.get("new") or "")
    if new != str(form.get("again") or ""):
        raise HTTPException(400, detail="the two new passwords differ")
    problem = passwords.new_password_problem(new)
    if problem is not None:
        raise HTTPException(400, detail=problem)
    return new


async def welcome_post(request: Request) -> Response:
    form = await _form(request)
    found = _link(request)
    new = _new_password(form)
    hashed = await run_in_threadpool(passwords.hash_password, new)
    console = _console(request)

    def store() -> None:
        with console.db.transaction() as tx:  # checked where it is used: a link works once
            _link_holds(tx, found)
            accounts.set_password(
                tx, found.login, hashed,
                by={"login": found.login, "address": _address(request), "via": "web",
                    "link_from": found.by},
            )  # fmt: skip

    await run_in_threadpool(store)
    log.get_logger().info(
        "web.first_password_set", tenant=found.tenant, login=found.login, link_from=found.by
    )
    return RedirectResponse("/login?welcome=1", status_code=303)


def account_page(request: Request) -> Response:
    """The person's own page: their archives and sets, and a new password."""
    me = _required(request)
    return _page(
        request, "account.html", me=me, memberships=sorted(me.memberships.items()),
        local=me.local, changed=request.query_params.get("changed") == "1",
    )  # fmt: skip


async def account_password(request: Request) -> Response:
    """A new password for oneself: the current one first (its failures count as failed
    logins), then every other session of the person ends; this one goes on."""
    form = await _form(request)
    me = await run_in_threadpool(_required, request)
    console = _console(request)
    address = _address(request)
    if max(console.limiter.refused(address, me.login), _banned(console, address)) > 0:
        raise HTTPException(429, headers={"retry-after": "60"})
    current = str(form.get("current") or "")[:1024]
    checked = await run_in_threadpool(console.logins.check, me.login, current)
    if checked is None or checked.login != me.login:
        console.limiter.failed(address, me.login)
        _report(console, address)
        log.get_logger().warning("web.password_change_refused", login=me.login, address=address)
        raise HTTPException(403, detail="the current password is not right")
    new = _new_password(form)
    hashed = await run_in_threadpool(passwords.hash_password, new)

    def store() -> None:
        with console.db.transaction() as tx:
            accounts.set_password(tx, me.login, hashed, by=_web_actor(request, me))

    try:
        await run_in_threadpool(store)
    except UsageError as exc:  # a directory person: their password is the directory's
        raise HTTPException(400, detail=str(exc)) from None
    _start_session(request, me.login)  # the new password ended every earlier session
    log.get_logger().info("web.password_changed", login=me.login, address=address)
    return RedirectResponse("/account?changed=1", status_code=303)


def admin_page(request: Request) -> Response:
    """What `ingestd status` shows, for the appliance's admins."""
    from ingestd.ops.status_report import gather

    me = _required(request)
    if not (me.admin and may(ADMIN, Action.status)):
        raise HTTPException(404)
    console = _console(request)
    report = gather(console.config, console.db)
    return _page(request, "admin.html", me=me, role=ADMIN, report=report)


def _inbox(config: Config) -> Path:
    """Where a browser's upload is written before intake takes it: a folder of the spool
    (intake may take and remove its own files there, never from the state directory)."""
    return config.paths.spool / "web"


def _forget_unfinished(config: Config) -> None:
    """Uploads a stopped console left half-written: no browser was told they arrived."""
    inbox = _inbox(config)
    if inbox.is_dir():
        for stale in inbox.glob("up-*"):
            stale.unlink(missing_ok=True)


def attention_page(request: Request) -> Response:
    me, tenant, _ = _scope(request, Action.attention)
    with _console(request).db.transaction() as tx:
        rows = tx.all("documents_attention", {"tenant": tenant, "limit": 200})
    return _page(request, "attention.html", me=me, tenant=tenant, role=me.set_in(tenant), rows=rows)


async def requeue(request: Request) -> Response:
    await _form(request)
    me, tenant, tenant_id = await run_in_threadpool(_scope, request, Action.attention)
    doc_id = _doc_id(request)

    def run() -> None:
        from ingestd.queue.reanalyze import reanalyze

        with _console(request).db.transaction() as tx:
            done = reanalyze(tx, tenant_id, doc_id, force=True)
        if done.missing:
            raise HTTPException(404)
        log.get_logger().info(
            "web.requeued", tenant=tenant, document=doc_id, job=done.job_id, login=me.login
        )

    await run_in_threadpool(run)
    return RedirectResponse(f"/t/{tenant}/attention", status_code=303)


async def mark_done(request: Request) -> Response:
    await _form(request)
    me, tenant, tenant_id = await run_in_threadpool(_scope, request, Action.attention)
    doc_id = _doc_id(request)

    def run() -> None:
        with _console(request).db.transaction() as tx:
            row = tx.one("document_mark_done", {"id": doc_id, "tenant_id": tenant_id})
        if row is None:
            raise HTTPException(404)
        log.get_logger().info("web.marked_done", tenant=tenant, document=doc_id, login=me.login)

    await run_in_threadpool(run)
    return RedirectResponse(f"/t/{tenant}/attention", status_code=303)


# -- errors ---------------------------------------------------------------------------------
_ERROR_TEXT = {
    400: "bad_request",
    403: "forbidden",
    404: "not_found",
    413: "too_large",
    429: "too_many",
}


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code in (301, 302, 303, 307) and exc.headers:
        return RedirectResponse(exc.headers["location"], status_code=exc.status_code)
    key = _ERROR_TEXT.get(exc.status_code, "bad_request")
    response = _page(request, "error.html", exc.status_code, message=key, detail=exc.detail)
    if exc.headers and "retry-after" in exc.headers:
        response.headers["retry-after"] = exc.headers["retry-after"]
    return response


def webdav_probe(request: Request) -> Response:
    """``OPTIONS /``: Windows' WebDAV client asks the server's root before it maps
    ``/dav/<tenant>`` and gives up on a 405 ("the network name cannot be found"); the
    answer is the mount's (read-only WebDAV, class 1) and tells nothing else."""
    return Response(
        b"", headers={"DAV": "1", "MS-Author-Via": "DAV", "Allow": "OPTIONS, HEAD, GET, PROPFIND"}
    )


def _dav(console: Console) -> Any:
    """The read-only WebDAV mount (ingestd/web/dav.py), a WSGI app run in threads."""
    from a2wsgi import WSGIMiddleware

    from ingestd.web.dav import DavContext, make_dav_app, one_date_header

    ctx = DavContext(
        config=console.config,
        db=console.db,
        store=console.store,
        logins=console.logins,
        limiter=console.limiter,
        rate=console.rate,
    )
    return WSGIMiddleware(one_date_header(make_dav_app(ctx)), workers=8)


def make_app(config: Config, db: Database, store: ArchiveStore) -> Starlette:
    """The console as an ASGI app."""
    web = config.web
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.autoescape = True
    console = Console(
        config=config,
        db=db,
        store=store,
        logins=Logins(db, directory=Directory(web.ldap) if web.ldap is not None else None),
        limiter=guard.LoginLimiter(web.login_failures, web.login_window_seconds),
        rate=guard.PersonRate(web.requests_per_minute),
        templates=templates,
        secret=guard.session_key(config.paths.state_dir),
    )
    _forget_unfinished(config)
    routes = [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login_post, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", home, methods=["GET"]),
        Route("/", webdav_probe, methods=["OPTIONS"]),
        Route("/t/{tenant}/", search_page, methods=["GET"]),
        Route("/t/{tenant}/d/{doc}", document_page, methods=["GET"]),
        Route("/t/{tenant}/d/{doc}/original", download_original, methods=["GET"]),
        Route("/t/{tenant}/d/{doc}/searchable", download_searchable, methods=["GET"]),
        Route("/t/{tenant}/d/{doc}/edit", edit_document, methods=["POST"]),
        Route("/t/{tenant}/d/{doc}/preview.png", thumbnail, methods=["GET"]),
        Route("/t/{tenant}/d/{doc}/page/{page}.png", page_preview, methods=["GET"]),
        Route("/t/{tenant}/upload", upload, methods=["POST"]),
        Route("/t/{tenant}/attention", attention_page, methods=["GET"]),
        Route("/t/{tenant}/d/{doc}/requeue", requeue, methods=["POST"]),
        Route("/t/{tenant}/d/{doc}/done", mark_done, methods=["POST"]),
        Route("/t/{tenant}/arrivals", arrivals_page, methods=["GET"]),
        Route("/t/{tenant}/members", members_page, methods=["GET"]),
        Route("/t/{tenant}/members", member_add, methods=["POST"]),
        Route("/t/{tenant}/members/{login}", member_change, methods=["POST"]),
        Route("/t/{tenant}/members/{login}/welcome", first_password_link, methods=["POST"]),
        Route("/welcome/{token}", welcome_form, methods=["GET"]),
        Route("/welcome/{token}", welcome_post, methods=["POST"]),
        Route("/account", account_page, methods=["GET"]),
        Route("/account/password", account_password, methods=["POST"]),
        Route("/admin", admin_page, methods=["GET"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        Mount("/dav", app=_dav(console)),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(guard.RouteMetrics),
            Middleware(guard.SecurityHeaders, https=web.secure),
            Middleware(
                SessionMiddleware,
                secret_key=console.secret,
                session_cookie="ingestd_session",
                max_age=web.session_minutes * 60,
                same_site="strict",
                https_only=web.secure,
            ),
        ],
        exception_handlers={HTTPException: http_error},
    )
    app.state.console = console
    return app
