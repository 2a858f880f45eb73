"""analyze-document end to end: real files, real ocrmypdf/tesseract, real Postgres, the
worker loop in this process with its real job child; a real hot folder and a real HTTP
server for the workflow's webhook."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.queue.enqueue import enqueue
from ingestd.sources.hotfolders import HotFolders
from tests.conftest import Env, run_cli, wait_until
from tests.fixtures.drain import drain
from tests.fixtures.scans import encrypted_pdf, image_pdf, text_pdf, truncated_pdf
from worker.webhooks import verify_signature

WORKER = {"poll_interval": 0.1, "lease_seconds": 30, "retry_base": 0.05, "max_retries": 3}
# Each OCR here is a few small pages: one tesseract per page is plenty.
ANALYSIS = {"jobs": 1, "thumbnail_width": 200}

LETTER = [
    [
        "Telekom Deutschland GmbH",
        "Bonn, den 03.11.2026",
        "Betreff: Kündigung Mobilfunkvertrag",
        "Sehr geehrte Damen und Herren",
    ],
    ["Ihre Vertragsnummer lautet 4711", "Die Kündigung wird bestätigt"],
    ["Die Rufnummernmitnahme beantragen Sie bitte", "Mit freundlichen Grüßen"],
]

TAXONOMY = [
    {
        "tenant": "acme",
        "kind": "tag",
        "name": "Telefon",
        "match": "mobilfunkvertrag rufnummer",
        "algorithm": "any",
    },
    {
        "tenant": "acme",
        "kind": "correspondent",
        "name": "Telekom",
        "match": "Telekom Deutschland",
        "algorithm": "exact",
    },
    {
        "tenant": "acme",
        "kind": "document_type",
        "name": "Kündigung",
        "match": "kuendigung",
        "algorithm": "any",
    },
    {"tenant": "other", "kind": "tag", "name": "Fremd", "match": "telekom"},
]


def _one(db: Database, sql: str, params: dict[str, Any] | None = None) -> Any:
    with db.transaction() as tx:
        rows = tx.raw(sql, params)
    return rows[0] if rows else None


def _rows(db: Database, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    with db.transaction() as tx:
        return tx.raw(sql, params)


def _drain(env: Env, db: Database) -> None:
    drain(env, db, "w-analyze")


def _ingest(env: Env, db: Database, path: Path, tenant: str = "acme", **kw: Any) -> int:
    res = make_intake(env.config, db).ingest(IntakeItem(path=path, tenant=tenant, **kw))
    assert res.outcome is Outcome.ingested and res.document_id is not None
    return res.document_id


def _doc(db: Database, doc_id: int) -> dict[str, Any]:
    row = _one(
        db,
        """
        SELECT d.*, c.page_count, c.pages, c.searchable_pdf, c.thumbnail, c.languages,
               j.status AS job_status, j.retry_count, j.error_message,
               (SELECT name FROM correspondents WHERE id = d.correspondent_id) AS correspondent,
               (SELECT name FROM document_types WHERE id = d.document_type_id) AS doctype,
               coalesce((SELECT array_agg(g.name || ':' || dt.origin ORDER BY g.name)
                         FROM document_tags dt JOIN tags g ON g.id = dt.tag_id
                         WHERE dt.document_id = d.id), '{}') AS tags
        FROM documents d
        LEFT JOIN document_content c ON c.document_id = d.id
        JOIN LATERAL (SELECT * FROM processing_jobs
                      WHERE document_id = d.id AND kind = 'analyze-document'
                      ORDER BY id DESC LIMIT 1) j ON true
        WHERE d.id = %(id)s""",
        {"id": doc_id},
    )
    assert row is not None
    return dict(row)


@pytest.fixture
def analysis_env(make_env: Any, db: Database, tenant: str) -> Env:
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": "other", "status": "active"})
    env: Env = make_env(worker=WORKER, analysis=ANALYSIS, taxonomy=TAXONOMY)
    return env


def test_scanned_letter_gets_text_title_date_taxonomy_and_search(
    analysis_env: Env, db: Database
) -> None:
    """A 3-page image-only scan named Scan_0001.pdf: text per page, derivatives, the
    subject as title, the letter's date, taxonomy; original unchanged; search by tenant."""
    env = analysis_env
    src = image_pdf(env.root / "in" / "Scan_0001.pdf", LETTER)
    original_sha = hashlib.sha256(src.read_bytes()).hexdigest()
    doc_id = _ingest(env, db, src)
    _drain(env, db)

    doc = _doc(db, doc_id)
    assert (doc["job_status"], doc["processing_status"]) == ("done", "done"), doc["error_message"]
    assert doc["page_count"] == 3 and len(doc["pages"]) == 3
    assert "Betreff" in doc["pages"][0] and "Vertragsnummer" in doc["pages"][1]
    assert "Rufnummernmitnahme" in doc["pages"][2]
    assert doc["title"] == "Kündigung Mobilfunkvertrag"
    assert str(doc["issued_date"]) == "2026-11-03"
    assert doc["correspondent"] == "Telekom" and doc["doctype"] == "Kündigung"
    assert doc["tags"] == ["Telefon:taxonomy"]
    assert doc["languages"] == "deu+eng"
    derived = env.config.paths.derived_dir
    pdf, thumb = derived / doc["searchable_pdf"], derived / doc["thumbnail"]
    assert pdf.read_bytes()[:5] == b"%PDF-" and thumb.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    archived = env.config.paths.archive_dir / doc["archive_path"]
    assert hashlib.sha256(archived.read_bytes()).hexdigest() == original_sha == doc["sha256"]
    assert sorted(p.name for p in archived.parent.iterdir()) == [archived.name]
    assert derived not in archived.parents and archived.parent != pdf.parent

    hit = run_cli(env, "search", "--tenant", "acme", "--json", "Rufnummernmitnahme")
    assert hit.returncode == 0, hit.stderr
    assert [r["id"] for r in json.loads(hit.stdout)] == [doc_id]
    # German stemming: the plural finds the singular.
    stem = run_cli(env, "search", "--tenant", "acme", "--json", "Kündigungen")
    assert [r["id"] for r in json.loads(stem.stdout)] == [doc_id]
    other = run_cli(env, "search", "--tenant", "other", "--json", "Rufnummernmitnahme")
    assert other.returncode == 0 and json.loads(other.stdout) == []
    text = run_cli(env, "search", "--tenant", "acme", "Rufnummernmitnahme")
    assert "Kündigung Mobilfunkvertrag" in text.stdout and "«" in text.stdout


def test_meaningful_filename_keeps_its_title_and_date(analysis_env: Env, db: Database) -> None:
    """`2026-11-03 Rechnung Telekom.pdf` keeps its title and date whatever the text says."""
    env = analysis_env
    pages = [["Betreff: Mahnung zur Zahlung", "Datum: 15.01.2025"]]
    doc_id = _ingest(env, db, image_pdf(env.root / "in" / "2026-11-03 Rechnung Telekom.pdf", pages))
    _drain(env, db)
    doc = _doc(db, doc_id)
    assert doc["job_status"] == "done", doc["error_message"]
    assert "Mahnung" in doc["pages"][0]
    assert doc["title"] == "Rechnung Telekom"
    assert str(doc["issued_date"]) == "2026-11-03"
    # Re-analyzed on request (seed 004's re-analyze): same outcome, saved text reused.
    proc = run_cli(env, "documents", "analyze", "--tenant", "acme", str(doc_id), "999999")
    assert proc.returncode == 7 and "999999" in proc.stderr
    assert f"document {doc_id}: analyze-document job" in proc.stdout
    _drain(env, db)
    again = _doc(db, doc_id)
    assert again["job_status"] == "done" and again["title"] == "Rechnung Telekom"


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (None, ["2026-11-03", "2026-11-24", "2026-11-05"]),
        ("filename-first", ["2026-11-03", "2026-11-24", "2026-11-05"]),
        ("text-first", ["2025-01-15", "2026-11-03", "2026-11-05"]),
    ],
)
def test_the_sources_date_source_decides_file_name_or_text(
    make_env: Any,
    db: Database,
    tenant: str,
    tmp_path: Path,
    setting: str | None,
    expected: list[str],
) -> None:
    """A hot folder's date_source reaches analysis: filename-first (the default) keeps the
    date of `2026-11-03 Rechnung.pdf` (and a scanner's `Scan_20261124_...`) over the one in
    the text, text-first takes the text's; the file name's stays when the text has none.
    The setting and the file name's date are recorded with the document as it arrives
    (0024): a re-analysis after the folder's setting changed dates it as before."""
    folder = tmp_path / "hot"
    folder.mkdir()
    watch = {"path": str(folder), "tenant": tenant, "date_source": setting}
    env: Env = make_env(
        worker=WORKER,
        analysis=ANALYSIS,
        watch=[watch],
        hotfolders={"stable_seconds": 0.5, "poll_interval": 0.3, "retry_max_delay": 2},
    )
    files = {
        "2026-11-03 Rechnung Telekom.pdf": ["Telekom Deutschland GmbH", "Datum: 15.01.2025"],
        "Scan_20261124_101500.pdf": ["Telekom Deutschland GmbH", "Bonn, den 03.11.2026"],
        "2026-11-05 Notiz.pdf": ["Bitte zurückrufen", "Kundennummer 58"],
    }
    hot_db = Database(env.db_url, max_size=2).open()
    hot = HotFolders(env.config, make_intake(env.config, hot_db))
    hot.start()
    try:
        for name, lines in files.items():
            text_pdf(folder / name, [lines])
        wait_until(lambda: _one(db, "SELECT count(*) AS n FROM documents")["n"] == 3, 60)
    finally:
        hot.stop()
        hot_db.close()
    by_name = {
        r["original_filename"]: r["id"]
        for r in _rows(db, "SELECT id, original_filename FROM documents")
    }
    ids = [by_name[name] for name in files]
    _drain(env, db)
    docs = [_doc(db, doc_id) for doc_id in ids]
    assert all(d["job_status"] == "done" for d in docs), [d["error_message"] for d in docs]
    assert [str(d["issued_date"]) for d in docs] == expected
    assert [d["date_policy"] for d in docs] == [setting or "filename-first"] * 3
    assert [str(d["name_date"]) for d in docs] == ["2026-11-03", "2026-11-24", "2026-11-05"]

    # The folder's setting turned around: documents already archived keep theirs.
    flipped = "filename-first" if setting == "text-first" else "text-first"
    again: Env = make_env(
        worker=WORKER, analysis=ANALYSIS, watch=[{**watch, "date_source": flipped}]
    )
    for doc_id in ids:
        proc = run_cli(again, "documents", "analyze", "--tenant", tenant, str(doc_id))
        assert proc.returncode == 0, proc.stderr
    _drain(again, db)
    docs = [_doc(db, doc_id) for doc_id in ids]
    assert all(d["job_status"] == "done" for d in docs), [d["error_message"] for d in docs]
    assert [str(d["issued_date"]) for d in docs] == expected


def test_forced_reanalysis_replaces_its_own_title_and_date_not_a_persons(
    analysis_env: Env, db: Database
) -> None:
    """`document analyze --force` derives title and date again where analysis set them
    (an older release's worse guess is replaced); a person's edits are kept."""
    env = analysis_env
    page = [["Bonn, den 03.11.2026", "Betreff: Kündigung Mobilfunkvertrag"]]
    doc_id = _ingest(env, db, image_pdf(env.root / "in" / "Scan_0002.pdf", page))
    _drain(env, db)
    doc = _doc(db, doc_id)
    assert (doc["title"], str(doc["issued_date"])) == ("Kündigung Mobilfunkvertrag", "2026-11-03")

    def force() -> dict[str, Any]:
        proc = run_cli(env, "documents", "analyze", "--tenant", "acme", "--force", str(doc_id))
        assert proc.returncode == 0, proc.stderr
        _drain(env, db)
        again = _doc(db, doc_id)
        assert again["job_status"] == "done", again["error_message"]
        return again

    # What an older release might have derived, recorded as analysis's own.
    with db.transaction() as tx:
        tx.raw(
            "UPDATE documents SET title = 'Bonn den', issued_date = '2020-01-01' WHERE id = %(id)s",
            {"id": doc_id},
        )
        tx.raw(
            "UPDATE document_content SET derived_title = 'Bonn den', "
            "derived_issued_date = '2020-01-01' WHERE document_id = %(id)s",
            {"id": doc_id},
        )
    doc = force()
    assert (doc["title"], str(doc["issued_date"])) == ("Kündigung Mobilfunkvertrag", "2026-11-03")
    hit = run_cli(env, "search", "--tenant", "acme", "--json", "Mobilfunkvertrag")
    assert [r["id"] for r in json.loads(hit.stdout)] == [doc_id]

    with db.transaction() as tx:
        tx.raw(
            "UPDATE documents SET title = 'Mein Vertrag', issued_date = '2026-12-01' "
            "WHERE id = %(id)s",
            {"id": doc_id},
        )
    doc = force()
    assert (doc["title"], str(doc["issued_date"])) == ("Mein Vertrag", "2026-12-01")


@pytest.mark.parametrize("make", [encrypted_pdf, truncated_pdf], ids=["encrypted", "truncated"])
def test_unreadable_pdf_fails_at_once_with_a_clear_message(
    analysis_env: Env, db: Database, make: Any
) -> None:
    """An encrypted or truncated PDF: archived, its job failed on the first attempt, the
    document 'attention' with the reason, and an operator event says so."""
    env = analysis_env
    doc_id = _ingest(env, db, make(env.root / "in" / "Scan_0002.pdf"))
    _drain(env, db)
    doc = _doc(db, doc_id)
    assert (doc["job_status"], doc["processing_status"], doc["retry_count"]) == (
        "failed",
        "attention",
        0,
    )
    word = "encrypted" if make is encrypted_pdf else "PDF"
    assert word in doc["error_message"], doc["error_message"]
    assert doc["attention_reason"] == doc["error_message"]
    assert doc["page_count"] is None
    events = _rows(
        db,
        "SELECT type, tenant, detail, trace_id FROM operator_events WHERE type LIKE 'document.%%'",
    )
    assert [(e["type"], e["tenant"]) for e in events] == [("document.needs_attention", "acme")]
    assert events[0]["detail"]["document_id"] == doc_id
    assert events[0]["trace_id"] == doc["trace_id"]


class _Hook(http.server.BaseHTTPRequestHandler):
    calls: list[dict[str, Any]]
    fail_first: int

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.calls.append({"headers": dict(self.headers), "body": body})
        failing = len(self.calls) <= self.fail_first
        self.send_response(500 if failing else 204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]], type[_Hook]]]:
    handler = type("Hook", (_Hook,), {"calls": [], "fail_first": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler.calls, handler
    finally:
        server.shutdown()
        server.server_close()


def _deliveries(db: Database, doc_id: int) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(
            "SELECT status, retry_count, error_message, payload FROM processing_jobs "
            "WHERE document_id = %(d)s AND kind = 'deliver-webhook' ORDER BY id",
            {"d": doc_id},
        )


def _workflow(tenant: str, url: str, secret: Path, **when: Any) -> dict[str, Any]:
    secret.write_text("s3cret-for-test\n")
    secret.chmod(0o600)
    return {
        "tenant": tenant,
        "name": "buchhaltung",
        "when": when,
        "then": {
            "add_tags": ["Buchhaltung"],
            "webhook": {"url": url, "secret_file": str(secret), "timeout": 5},
        },
    }


def test_hot_folder_workflow_tags_and_calls_webhook_once(
    make_env: Any, db: Database, tenant: str, tmp_path: Path, webhook: Any
) -> None:
    """A document dropped into Buchhaltung/ of a hot folder gets the workflow's tag and
    its webhook is delivered once with a valid signature through a deliver-webhook job:
    a failing first POST retries that job, not the analysis; a forced re-analysis sends
    nothing again."""
    url, calls, handler = webhook
    handler.fail_first = 1  # the first POST fails: the delivery job is retried
    flow = _workflow(
        tenant, url, tmp_path / "hook.secret", sources=["watch:*"], subfolder="Buchhaltung"
    )
    folder = tmp_path / "hot"
    (folder / "Buchhaltung").mkdir(parents=True)
    env: Env = make_env(
        worker=WORKER,
        analysis=ANALYSIS,
        workflows=[flow],
        deliveries={"retry_base": 0.05, "retry_jitter": 0},
        watch=[{"path": str(folder), "tenant": tenant, "failed": str(tmp_path / "failed")}],
        hotfolders={"stable_seconds": 0.5, "poll_interval": 0.3, "retry_max_delay": 2},
    )
    hot_db = Database(env.db_url, max_size=2).open()
    hot = HotFolders(env.config, make_intake(env.config, hot_db))
    hot.start()
    try:
        image_pdf(folder / "Buchhaltung" / "Beleg 17.pdf", [["Quittung Nr. 17"]])
        wait_until(lambda: _one(db, "SELECT count(*) AS n FROM documents")["n"] == 1, 30)
    finally:
        hot.stop()
        hot_db.close()
    doc_id = _one(db, "SELECT id FROM documents")["id"]
    _drain(env, db)

    doc = _doc(db, doc_id)
    assert (doc["job_status"], doc["retry_count"]) == ("done", 0), doc["error_message"]
    assert "Buchhaltung:workflow" in doc["tags"]
    [delivery] = _deliveries(db, doc_id)
    assert (delivery["status"], delivery["retry_count"]) == ("done", 1)
    assert delivery["payload"]["trace"] == doc["trace_id"]
    assert len(calls) == 2  # one failed POST (retried with its job), one delivered
    call = calls[-1]
    headers = {k.lower(): v for k, v in call["headers"].items()}
    assert verify_signature(
        b"s3cret-for-test",
        headers["x-ingestd-timestamp"],
        call["body"],
        headers["x-ingestd-signature"],
    )
    event = json.loads(call["body"])
    assert event["workflow"] == "buchhaltung" and event["document"]["id"] == doc_id
    assert "Buchhaltung" in event["document"]["tags"]
    assert headers["x-ingestd-event-id"].endswith(f":{doc_id}:buchhaltung")
    run = _one(db, "SELECT webhook_delivered_at FROM document_workflow_runs")
    assert run["webhook_delivered_at"] is not None

    # Analyzed again: derived data replaced in place, the workflow does not run twice.
    with db.transaction() as tx:
        enqueue(
            tx,
            tenant_id=doc["tenant_id"],
            document_id=doc_id,
            kind="analyze-document",
            payload={"document_id": doc_id, "force": True},
        )
    _drain(env, db)
    again = _doc(db, doc_id)
    assert again["job_status"] == "done", again["error_message"]
    assert len(calls) == 2 and len(_deliveries(db, doc_id)) == 1
    assert again["tags"] == doc["tags"]
    assert _one(db, "SELECT count(*) AS n FROM document_content")["n"] == 1


def test_receiver_down_does_not_fail_the_analysis(
    make_env: Any, db: Database, tenant: str, tmp_path: Path, webhook: Any
) -> None:
    """With the webhook receiver refusing every POST the document is still done and
    searchable; the delivery fails for good on its own ladder and says so as an operator
    event; re-analysis sends nothing, --redeliver sends it once more."""
    url, calls, handler = webhook
    handler.fail_first = 10**6
    flow = _workflow(tenant, url, tmp_path / "hook.secret")
    env: Env = make_env(
        worker=WORKER,
        analysis=ANALYSIS,
        workflows=[flow],
        deliveries={"retry_base": 0.05, "retry_jitter": 0, "max_retries": 2},
    )
    doc_id = _ingest(env, db, image_pdf(env.root / "in" / "Scan_0001.pdf", LETTER), tenant)
    _drain(env, db)

    doc = _doc(db, doc_id)
    assert (doc["job_status"], doc["processing_status"]) == ("done", "done")
    found = run_cli(env, "search", "--tenant", tenant, "--json", "Mobilfunkvertrag")
    assert found.returncode == 0 and [r["id"] for r in json.loads(found.stdout)] == [doc_id]
    [delivery] = _deliveries(db, doc_id)
    assert (delivery["status"], delivery["retry_count"]) == ("failed", 3)
    assert "HTTP 500" in delivery["error_message"]
    assert len(calls) == 3  # the first try and max_retries = 2 retries
    events = _rows(db, "SELECT type, detail FROM operator_events WHERE type = 'delivery.failed'")
    assert len(events) == 1 and events[0]["detail"]["kind"] == "deliver-webhook"

    handler.fail_first = 0
    assert run_cli(env, "documents", "analyze", "--tenant", tenant, str(doc_id)).returncode == 0
    _drain(env, db)
    assert len(calls) == 3 and len(_deliveries(db, doc_id)) == 1  # a re-analysis sends none
    proc = run_cli(env, "documents", "analyze", "--tenant", tenant, "--redeliver", str(doc_id))
    assert proc.returncode == 0, proc.stderr
    _drain(env, db)
    assert len(calls) == 4
    assert [d["status"] for d in _deliveries(db, doc_id)] == ["failed", "done"]


def test_attention_is_listed_requeued_and_marked_done(analysis_env: Env, db: Database) -> None:
    """`documents attention` lists what cannot be analysed with its reason; `documents
    analyze` re-queues it (and it comes back); `documents mark-done` accepts it as done."""
    env = analysis_env
    bad = _ingest(env, db, encrypted_pdf(env.root / "in" / "Vertrag.pdf"))
    good = _ingest(env, db, image_pdf(env.root / "in" / "Brief.pdf", [["Hallo Welt"]]))
    _drain(env, db)
    proc = run_cli(env, "documents", "attention", "--tenant", "acme", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert [r["id"] for r in listed] == [bad]
    assert "encrypted" in listed[0]["attention_reason"]
    assert _doc(db, good)["processing_status"] == "done"

    assert run_cli(env, "documents", "analyze", "--tenant", "acme", str(bad)).returncode == 0
    assert _doc(db, bad)["processing_status"] == "attention"  # queued job, not yet run
    _drain(env, db)
    assert _doc(db, bad)["processing_status"] == "attention"

    proc = run_cli(env, "documents", "mark-done", "--tenant", "acme", str(bad), str(good))
    assert proc.returncode == 7  # `good` never needed attention: named, not changed
    assert f"document {good}: not a document of tenant acme that needs attention" in proc.stderr
    doc = _doc(db, bad)
    assert doc["processing_status"] == "done" and doc["page_count"] is None
    assert doc["attention_reason"].startswith("marked done without text by an operator: ")
    proc = run_cli(env, "documents", "attention", "--json")
    assert json.loads(proc.stdout) == []


def _huge_page_pdf(path: Path, inches: int = 200) -> Path:
    """A 600-byte PDF with one page of inches x inches: 3,600 megapixels at 300 dpi."""
    import pikepdf

    pdf = pikepdf.new()
    page = pdf.add_blank_page(page_size=(72 * inches, 72 * inches))
    page.contents_add(pdf.make_stream(b"0 0 1 rg 100 100 5000 5000 re f"))
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.save(path)
    return path


def _blank_pages_pdf(path: Path, pages: int) -> Path:
    import pikepdf

    pdf = pikepdf.new()
    for _ in range(pages):
        pdf.add_blank_page(page_size=(595, 842))
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.save(path)
    return path


def test_a_giant_page_needs_attention_before_any_ocr(analysis_env: Env, db: Database) -> None:
    """A 200 x 200 inch page is refused by the pixel limit before it is rasterised: the
    document needs attention naming the limit, not retried, and the next job runs."""
    env = analysis_env
    giant = _ingest(env, db, _huge_page_pdf(env.root / "in" / "Plan.pdf"))
    after = _ingest(env, db, image_pdf(env.root / "in" / "Brief.pdf", [["Hallo Welt"]]))
    _drain(env, db)
    doc = _doc(db, giant)
    assert (doc["job_status"], doc["processing_status"], doc["retry_count"]) == (
        "failed",
        "attention",
        0,
    )
    assert "page 1 is 200.0 x 200.0 inches, 3,600 megapixels at 300 dpi" in doc["attention_reason"]
    assert "analysis.max_page_megapixels (300 megapixels)" in doc["attention_reason"]
    assert _doc(db, after)["processing_status"] == "done"


def test_the_memory_limit_stops_a_page_that_does_not_fit(
    make_env: Any, db: Database, tenant: str
) -> None:
    """With the pixel limit lifted, the giant page fails inside the OCR run under its
    address-space limit (MemoryError, not the OOM killer) and needs attention naming
    analysis.memory_limit; it is not retried."""
    env: Env = make_env(
        worker=WORKER,
        analysis={**ANALYSIS, "max_page_megapixels": 100_000, "memory_limit": "1 GiB"},
    )
    doc_id = _ingest(env, db, _huge_page_pdf(env.root / "in" / "Plan.pdf"), tenant)
    _drain(env, db)
    doc = _doc(db, doc_id)
    assert (doc["processing_status"], doc["retry_count"]) == ("attention", 0)
    assert "ran out of memory under analysis.memory_limit (1.0 GiB)" in doc["attention_reason"]


def test_too_many_pages_need_attention_not_hours_of_timeouts(
    analysis_env: Env, db: Database
) -> None:
    """A PDF of 5,000 blank pages is over analysis.max_pages: attention at once, no OCR,
    instead of timing out attempt after attempt."""
    env = analysis_env
    doc_id = _ingest(env, db, _blank_pages_pdf(env.root / "in" / "Stapel.pdf", 5000))
    _drain(env, db)
    doc = _doc(db, doc_id)
    assert (doc["processing_status"], doc["retry_count"]) == ("attention", 0)
    assert "the file has 5000 pages, more than analysis.max_pages (2000)" in doc["attention_reason"]


def test_an_ocr_timeout_is_retried_once_then_needs_attention(
    make_env: Any, db: Database, tenant: str
) -> None:
    """OCR that runs past analysis.ocr_timeout is retried once (a busy machine), and the
    second time the document needs attention naming the limit: not max_retries times."""
    env: Env = make_env(
        worker={**WORKER, "max_retries": 5}, analysis={**ANALYSIS, "ocr_timeout": 0.2}
    )
    doc_id = _ingest(env, db, image_pdf(env.root / "in" / "Scan_0001.pdf", LETTER), tenant)
    _drain(env, db)
    doc = _doc(db, doc_id)
    assert (doc["processing_status"], doc["retry_count"]) == ("attention", 1)
    assert "timed out again after a retry" in doc["attention_reason"]
    assert "analysis.ocr_timeout (0.2 s)" in doc["attention_reason"]
