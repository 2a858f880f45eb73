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

Scope rule, enforced in ``console.scope``: a tenant the person is no member of, or a name that
could not be a tenant, is 404 (its existence is not told); a member whose set lacks the
action gets 403. Every query below names the tenant, so an id of another tenant is 404.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ingestd.archive.store import ArchiveStore
from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.people.accounts import Logins
from ingestd.people.directory import Directory
from ingestd.web import guard
from ingestd.web.console import HERE, Console, render
from ingestd.web.documents import (
    document_page,
    download_original,
    download_searchable,
    edit_document,
    home,
    page_preview,
    search_page,
    thumbnail,
)
from ingestd.web.intake_pages import (
    admin_page,
    arrivals_page,
    attention_page,
    forget_unfinished,
    mark_done,
    requeue,
    upload,
)
from ingestd.web.login import login_form, login_post, logout
from ingestd.web.people_pages import (
    account_page,
    account_password,
    first_password_link,
    member_add,
    member_change,
    members_page,
    welcome_form,
    welcome_post,
)

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
    response = render(request, "error.html", exc.status_code, message=key, detail=exc.detail)
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

    from ingestd.web.dav import make_dav_app, one_date_header
    from ingestd.web.dav_login import DavContext

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
    forget_unfinished(config)
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
