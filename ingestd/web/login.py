"""Logging in and out: the password check (local or directory), the throttle per address,
the session started afresh."""

from __future__ import annotations

import time

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ingestd import log
from ingestd.people import accounts
from ingestd.runtime import metrics
from ingestd.textsafe import shown
from ingestd.web import guard
from ingestd.web.console import Console, address_of, console_of, render, who_asks


# -- login ----------------------------------------------------------------------------------
def login_form(request: Request) -> Response:
    if who_asks(request) is not None:
        return RedirectResponse("/", status_code=303)
    notice = "first_password_set" if request.query_params.get("welcome") == "1" else None
    return render(request, "login.html", notice=notice)


async def login_post(request: Request) -> Response:
    form = await request.form()
    if not guard.csrf_ok(request.session, form.get("csrf")):
        raise HTTPException(403)
    login = str(form.get("login") or "")[:200]
    password = str(form.get("password") or "")[:1024]
    console = console_of(request)
    address = address_of(request)
    wait = max(console.limiter.refused(address, login), ban_left(console, address))
    if wait > 0:
        log.get_logger().warning(
            "web.login_throttled", address=address, login=shown(login), retry_after=int(wait)
        )
        metrics.WEB_LOGINS.labels("web", "throttled").inc()
        response = render(request, "login.html", 429, error="login_throttled")
        response.headers["retry-after"] = str(int(wait) + 1)
        return response
    found = await run_in_threadpool(console.logins.check, login, password)
    if found is None:
        console.limiter.failed(address, login)
        report_failed_login(console, address)
        metrics.WEB_LOGINS.labels("web", "failed").inc()
        log.get_logger().warning("web.login_failed", address=address, login=shown(login))
        return render(request, "login.html", 401, error="login_failed")
    start_session(request, found.login)
    metrics.WEB_LOGINS.labels("web", "ok").inc()
    log.get_logger().info("web.login", address=address, login=found.login)
    return RedirectResponse("/", status_code=303)


def start_session(request: Request, login: str) -> None:
    """A new session for ``login``: nothing of the one before survives, a fresh CSRF
    token, begun now (a session begun before a sign-out or a new password is void)."""
    request.session.clear()
    request.session.update({"login": login, "at": time.time()})
    guard.csrf_token(request.session)


def ban_left(console: Console, address: str) -> float:
    """Seconds left of a ban the SFTP server holds against ``address`` (one ban list for
    every front door), 0 when there is none."""
    from ingestd.sources.sftp.bans import read_bans

    for ban in read_bans(console.config.paths.state_dir):
        if ban["ip"] == address:
            return float(ban["remaining"])
    return 0.0


def report_failed_login(console: Console, address: str) -> None:
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
        with console_of(request).db.transaction() as tx:
            accounts.sign_out(tx, login, time.time())
    request.session.clear()
    return RedirectResponse("/login", status_code=303)
