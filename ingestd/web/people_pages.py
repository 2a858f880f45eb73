"""People in the console: an archive's members and their capability sets, a new member and
the link to set a first password, one's own account and password."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ingestd import log, passwords
from ingestd.db.database import Tx
from ingestd.errors import UsageError
from ingestd.people import accounts
from ingestd.people.capabilities import TENANT_SETS, Action
from ingestd.textsafe import shown
from ingestd.web import welcome
from ingestd.web.console import (
    address_of,
    checked_form,
    console_of,
    render,
    required,
    scope,
    web_actor,
)
from ingestd.web.login import ban_left, report_failed_login, start_session


def members_page(request: Request) -> Response:
    me, tenant, _ = scope(request, Action.members)
    with console_of(request).db.transaction() as tx:
        rows = accounts.listing(tx, tenant)
    return render(
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
    form = await checked_form(request)
    me, tenant, _ = await run_in_threadpool(scope, request, Action.members)
    login = _member_login(request)
    action = str(form.get("action") or "")
    if login.lower() == me.login.lower():
        raise HTTPException(400, detail="your own membership: ask another owner or the admin")

    def change() -> None:
        with console_of(request).db.transaction() as tx:
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
    form = await checked_form(request)
    me, tenant, _ = await run_in_threadpool(scope, request, Action.members)
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
        with console_of(request).db.transaction() as tx:
            return accounts.add_member(tx, login, tenant, capability_set, by=web_actor(request, me))

    done = await run_in_threadpool(add)
    log.get_logger().info(
        "web.member_added", tenant=tenant, login=done.login, set=capability_set,
        new_person=done.new_person, by=me.login,
    )  # fmt: skip
    return RedirectResponse(f"/t/{tenant}/members", status_code=303)


async def first_password_link(request: Request) -> Response:
    """An owner asks for the link a new member sets their first password with; shown once
    on this page (never logged or stored), good for welcome.WELCOME_DAYS."""
    await checked_form(request)
    me, tenant, _ = await run_in_threadpool(scope, request, Action.members)
    login = _member_login(request)
    console = console_of(request)

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
    response = render(
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
    found = welcome.read(console_of(request).secret, str(request.path_params["token"]))
    if found is None:
        raise HTTPException(404)
    return found


def _link_holds(tx: Tx, found: welcome.Welcome) -> None:
    if accounts.first_password_refusal(tx, found.login, found.tenant) is not None:
        raise HTTPException(404)  # used, or the person reaches more now: void


def welcome_form(request: Request) -> Response:
    found = _link(request)
    with console_of(request).db.transaction() as tx:
        _link_holds(tx, found)
    response = render(request, "welcome.html", login=found.login, tenant=found.tenant)
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
    form = await checked_form(request)
    found = _link(request)
    new = _new_password(form)
    hashed = await run_in_threadpool(passwords.hash_password, new)
    console = console_of(request)

    def store() -> None:
        with console.db.transaction() as tx:  # checked where it is used: a link works once
            _link_holds(tx, found)
            accounts.set_password(
                tx, found.login, hashed,
                by={"login": found.login, "address": address_of(request), "via": "web",
                    "link_from": found.by},
            )  # fmt: skip

    await run_in_threadpool(store)
    log.get_logger().info(
        "web.first_password_set", tenant=found.tenant, login=found.login, link_from=found.by
    )
    return RedirectResponse("/login?welcome=1", status_code=303)


def account_page(request: Request) -> Response:
    """The person's own page: their archives and sets, and a new password."""
    me = required(request)
    return render(
        request, "account.html", me=me, memberships=sorted(me.memberships.items()),
        local=me.local, changed=request.query_params.get("changed") == "1",
    )  # fmt: skip


async def account_password(request: Request) -> Response:
    """A new password for oneself: the current one first (its failures count as failed
    logins), then every other session of the person ends; this one goes on."""
    form = await checked_form(request)
    me = await run_in_threadpool(required, request)
    console = console_of(request)
    address = address_of(request)
    if max(console.limiter.refused(address, me.login), ban_left(console, address)) > 0:
        raise HTTPException(429, headers={"retry-after": "60"})
    current = str(form.get("current") or "")[:1024]
    checked = await run_in_threadpool(console.logins.check, me.login, current)
    if checked is None or checked.login != me.login:
        console.limiter.failed(address, me.login)
        report_failed_login(console, address)
        log.get_logger().warning("web.password_change_refused", login=me.login, address=address)
        raise HTTPException(403, detail="the current password is not right")
    new = _new_password(form)
    hashed = await run_in_threadpool(passwords.hash_password, new)

    def store() -> None:
        with console.db.transaction() as tx:
            accounts.set_password(tx, me.login, hashed, by=web_actor(request, me))

    try:
        await run_in_threadpool(store)
    except UsageError as exc:  # a directory person: their password is the directory's
        raise HTTPException(400, detail=str(exc)) from None
    start_session(request, me.login)  # the new password ended every earlier session
    log.get_logger().info("web.password_changed", login=me.login, address=address)
    return RedirectResponse("/account?changed=1", status_code=303)
