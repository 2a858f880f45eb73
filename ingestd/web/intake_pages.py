"""Files in and what became of them: uploads into the intake, the arrivals of a tenant,
documents in attention (analyse again, accept as is), and the admin's status page."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ingestd import log
from ingestd.config.settings import Config
from ingestd.errors import IngestdError
from ingestd.people.accounts import Person
from ingestd.people.capabilities import ADMIN, Action, may
from ingestd.web import guard
from ingestd.web.console import (
    Console,
    checked_form,
    console_of,
    doc_id_of,
    render,
    required,
    scope,
)
from ingestd.web.documents import like_pattern


def _upload_name(raw: str | None) -> str:
    """The file's own name: whatever path a browser sent before it is dropped."""
    name = re.split(r"[/\\]", raw or "")[-1].strip()
    return name or "upload"


async def upload(request: Request) -> Response:
    """Files from the browser into the same intake as every source (source web:LOGIN):
    the same type and size checks, refusals said on the page."""
    console = console_of(request)
    limit = int(console.config.intake.max_file_size)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > 20 * limit + 1_000_000:
        raise HTTPException(413)
    me, tenant, _ = await run_in_threadpool(scope, request, Action.upload)
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
    return render(request, "uploaded.html", me=me, tenant=tenant, role=role, results=results)


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

    me, tenant, _ = scope(request, Action.arrivals)
    name = (request.query_params.get("name") or "")[:200]
    rows = story.find(
        console_of(request).db,
        tenant=tenant,
        name_like=like_pattern(name.lower()) if name else None,
        limit=200,
    )
    return render(
        request, "arrivals.html", me=me, tenant=tenant, role=me.set_in(tenant), rows=rows,
        name=name,
    )  # fmt: skip


def admin_page(request: Request) -> Response:
    """What `ingestd status` shows, for the appliance's admins."""
    from ingestd.ops.status_report import gather

    me = required(request)
    if not (me.admin and may(ADMIN, Action.status)):
        raise HTTPException(404)
    console = console_of(request)
    report = gather(console.config, console.db)
    return render(request, "admin.html", me=me, role=ADMIN, report=report)


def _inbox(config: Config) -> Path:
    """Where a browser's upload is written before intake takes it: a folder of the spool
    (intake may take and remove its own files there, never from the state directory)."""
    return config.paths.spool / "web"


def forget_unfinished(config: Config) -> None:
    """Uploads a stopped console left half-written: no browser was told they arrived."""
    inbox = _inbox(config)
    if inbox.is_dir():
        for stale in inbox.glob("up-*"):
            stale.unlink(missing_ok=True)


def attention_page(request: Request) -> Response:
    me, tenant, _ = scope(request, Action.attention)
    with console_of(request).db.transaction() as tx:
        rows = tx.all("documents_attention", {"tenant": tenant, "limit": 200})
    return render(
        request, "attention.html", me=me, tenant=tenant, role=me.set_in(tenant), rows=rows
    )


async def requeue(request: Request) -> Response:
    await checked_form(request)
    me, tenant, tenant_id = await run_in_threadpool(scope, request, Action.attention)
    doc_id = doc_id_of(request)

    def run() -> None:
        from ingestd.queue.reanalyze import reanalyze

        with console_of(request).db.transaction() as tx:
            done = reanalyze(tx, tenant_id, doc_id, force=True)
        if done.missing:
            raise HTTPException(404)
        log.get_logger().info(
            "web.requeued", tenant=tenant, document=doc_id, job=done.job_id, login=me.login
        )

    await run_in_threadpool(run)
    return RedirectResponse(f"/t/{tenant}/attention", status_code=303)


async def mark_done(request: Request) -> Response:
    await checked_form(request)
    me, tenant, tenant_id = await run_in_threadpool(scope, request, Action.attention)
    doc_id = doc_id_of(request)

    def run() -> None:
        with console_of(request).db.transaction() as tx:
            row = tx.one("document_mark_done", {"id": doc_id, "tenant_id": tenant_id})
        if row is None:
            raise HTTPException(404)
        log.get_logger().info("web.marked_done", tenant=tenant, document=doc_id, login=me.login)

    await run_in_threadpool(run)
    return RedirectResponse(f"/t/{tenant}/attention", status_code=303)
