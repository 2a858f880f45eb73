"""The pages over documents: the archives a person has, search with filters, one
document (record, lineage, history, previews), its downloads, and editing its title and
date."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from ingestd import log
from ingestd.archive import audit, derived, handout
from ingestd.errors import QueryCanceled
from ingestd.people.capabilities import Action
from ingestd.runtime import metrics
from ingestd.search import limits
from ingestd.search.query import search
from ingestd.web import previews
from ingestd.web.console import (
    CONTROL,
    FILTERS,
    MAX_FILTERED,
    PAGE_SIZE,
    PREVIEW_PAGES,
    STATUSES,
    address_of,
    attachment,
    checked_form,
    console_of,
    doc_id_of,
    render,
    required,
    scope,
    web_actor,
)


# -- pages ----------------------------------------------------------------------------------
def home(request: Request) -> Response:
    me = required(request)
    if len(me.memberships) == 1 and not me.admin:
        (tenant,) = me.memberships
        return RedirectResponse(f"/t/{tenant}/", status_code=303)
    return render(request, "home.html", me=me, memberships=sorted(me.memberships.items()))


def _day(value: str | None, field: str) -> datetime | None:
    """A YYYY-MM-DD filter as the start of that day (UTC); 400 for anything else."""
    if not value:
        return None
    try:
        return datetime.combine(date.fromisoformat(value[:10]), datetime.min.time(), UTC)
    except ValueError:
        raise HTTPException(400, detail=f"{field}: a date as YYYY-MM-DD") from None


def like_pattern(text: str | None) -> str | None:
    if not text:
        return None
    escaped = text[:200].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def search_page(request: Request) -> Response:
    me, tenant, tenant_id = scope(request, Action.search)
    p = request.query_params
    q = (p.get("q") or "").strip()
    since = _day(p.get("since"), "since")
    until_day = _day(p.get("until"), "until")
    until = until_day + timedelta(days=1) if until_day else None
    status = (p.get("status") or "") or None
    if status is not None and status not in STATUSES:
        raise HTTPException(400, detail=f"status: one of {', '.join(STATUSES)}")
    filters = {
        "name": like_pattern(p.get("name")),
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
    db = console_of(request).db
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
    return render(
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


def document_page(request: Request) -> Response:
    me, tenant, tenant_id = scope(request, Action.view)
    doc_id = doc_id_of(request)
    db = console_of(request).db
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
            detail={"by": web_actor(request, me)},
        )
    # The searchable PDF's pages; before analysis made one, a PDF original's first page.
    analysed = files["searchable_pdf"] if files is not None else None
    original_pdf = files is not None and files["mime_type"] == "application/pdf"
    count = int(files["page_count"] or 0) if files is not None and analysed else int(original_pdf)
    return render(
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


def _download(request: Request, searchable: bool) -> Response:
    me, tenant, _ = scope(request, Action.download)
    doc_id = doc_id_of(request)
    console = console_of(request)
    try:
        out = handout.stream_out(
            console.db,
            console.store,
            console.config.paths.derived_dir,
            doc_id,
            tenant=tenant,
            searchable=searchable,
            by=web_actor(request, me),
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
        address=address_of(request),
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
    _, _, tenant_id = scope(request, Action.view)
    doc_id = doc_id_of(request)
    console = console_of(request)
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
    _, _, tenant_id = scope(request, Action.view)
    doc_id = doc_id_of(request)
    raw = str(request.path_params["page"])
    if not raw.isdigit() or len(raw) > 5:
        raise HTTPException(404)
    console = console_of(request)
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


def download_original(request: Request) -> Response:
    return _download(request, searchable=False)


def download_searchable(request: Request) -> Response:
    return _download(request, searchable=True)


async def edit_document(request: Request) -> Response:
    form = await checked_form(request)
    me, tenant, tenant_id = await run_in_threadpool(scope, request, Action.edit)
    doc_id = doc_id_of(request)
    title = " ".join(str(form.get("title") or "").split())
    if not 1 <= len(title) <= 500 or CONTROL.search(title):
        raise HTTPException(400, detail="title: 1 to 500 characters")
    raw_date = str(form.get("issued_date") or "").strip()
    try:
        issued = date.fromisoformat(raw_date) if raw_date else None
    except ValueError:
        raise HTTPException(400, detail="date: YYYY-MM-DD") from None

    def change() -> None:
        with console_of(request).db.transaction() as tx:
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
                    "by": web_actor(request, me),
                    "title": [row["was_title"], title],
                    "issued_date": [
                        row["was_date"].isoformat() if row["was_date"] else None,
                        issued.isoformat() if issued else None,
                    ],
                },
            )

    await run_in_threadpool(change)
    return RedirectResponse(f"/t/{tenant}/d/{doc_id}", status_code=303)
