"""E-invoices end to end (issue 33): XRechnung/UBL and CII XML and a Factur-X PDF go
through real intake, a real Postgres and the worker loop with its real job child; the
original is kept byte for byte, the invoice's fields, title, date, seller and validation
are recorded, workflows see the fields, and `ingestd invoices` exports them."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import Env, run_cli
from tests.fixtures.drain import drain
from tests.fixtures.einvoices import cii_xml, facturx_pdf, ubl_xml
from tests.integration.test_analyze import _workflow, webhook  # noqa: F401
from worker.analysis.einvoice.embedded import embedded_invoice_xml

WORKER = {"poll_interval": 0.1, "lease_seconds": 30, "retry_base": 0.05, "max_retries": 3}
ANALYSIS = {"jobs": 1, "thumbnail_width": 200}
SELLER = "Stadtwerke Musterstadt GmbH"


def _one(db: Database, sql: str, params: dict[str, Any] | None = None) -> Any:
    with db.transaction() as tx:
        rows = tx.raw(sql, params)
    return rows[0] if rows else None


def _ingest(env: Env, db: Database, path: Path, **kw: Any) -> int:
    res = make_intake(env.config, db).ingest(IntakeItem(path=path, tenant="acme", **kw))
    assert res.outcome is Outcome.ingested and res.document_id is not None, res
    return res.document_id


def _doc(db: Database, doc_id: int) -> dict[str, Any]:
    row = _one(
        db,
        """
        SELECT d.*, c.pages, c.searchable_pdf, c.thumbnail, c.engine,
               j.status AS job_status, j.error_message,
               (SELECT name FROM correspondents WHERE id = d.correspondent_id) AS correspondent,
               (SELECT name FROM document_types WHERE id = d.document_type_id) AS doctype,
               to_jsonb(i.*) AS invoice
        FROM documents d
        LEFT JOIN document_content c ON c.document_id = d.id
        LEFT JOIN invoices i ON i.document_id = d.id
        JOIN LATERAL (SELECT * FROM processing_jobs
                      WHERE document_id = d.id AND kind = 'analyze-document'
                      ORDER BY id DESC LIMIT 1) j ON true
        WHERE d.id = %(id)s""",
        {"id": doc_id},
    )
    assert row is not None
    return dict(row)


@pytest.fixture
def env(make_env: Any, tenant: str) -> Env:
    made: Env = make_env(worker=WORKER, analysis=ANALYSIS)
    return made


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("syntax", "make"), [("ubl", ubl_xml), ("cii", cii_xml)])
def test_an_xrechnung_is_kept_as_received_and_read(
    env: Env, db: Database, syntax: str, make: Any
) -> None:
    """An XRechnung (UBL or CII) is archived byte for byte and read without OCR: its
    fields in the invoices row, the title "Rechnung <number> – <seller>", the issue date,
    the seller as correspondent, type Rechnung, a readable PDF and thumbnail derived,
    searchable by number, seller and Leitweg-ID."""
    data = make(profile="xrechnung")
    src = _write(env.root / "in" / "xrechnung_export_00017.xml", data)
    doc_id = _ingest(env, db, src)
    drain(env, db, "w-einvoice")
    doc = _doc(db, doc_id)
    assert doc["job_status"] == "done", doc["error_message"]
    assert doc["mime_type"] == "application/xml" and doc["extension"] == "xml"
    archived = env.config.paths.archive_dir / doc["archive_path"]
    assert archived.read_bytes() == data
    assert doc["sha256"] == hashlib.sha256(data).hexdigest()
    inv = doc["invoice"]
    assert inv["syntax"] == syntax and inv["source"] == "xml" and inv["kind"] == "invoice"
    assert inv["number"] == "RE-2026-4711" and inv["issue_date"] == "2026-11-20"
    assert inv["seller_name"] == SELLER and inv["seller_vat_id"] == "DE123456789"
    assert inv["buyer_reference"] == "04011000-12345-34"
    assert Decimal(str(inv["gross_total"])) == Decimal("119.00")
    assert Decimal(str(inv["net_total"])) == Decimal("100.00")
    assert Decimal(str(inv["tax_total"])) == Decimal("19.00")
    assert inv["line_count"] == 2 and inv["legal_status"] == "e-invoice"
    assert (inv["format_errors"], inv["rule_errors"]) == (0, 0), inv["report"]
    assert inv["fields"]["iban"] and "DE02120300000000202051" in json.dumps(inv["fields"])
    assert doc["title"] == f"Rechnung RE-2026-4711 – {SELLER}"
    assert str(doc["issued_date"]) == "2026-11-20"
    assert (doc["correspondent"], doc["doctype"]) == (SELLER, "Rechnung")
    derived = env.config.paths.derived_dir
    assert (derived / doc["searchable_pdf"]).read_bytes()[:5] == b"%PDF-"
    assert (derived / doc["thumbnail"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for query in ("RE-2026-4711", "Musterstadt", "04011000-12345-34"):
        hit = run_cli(env, "search", "--tenant", "acme", "--json", query)
        assert hit.returncode == 0, hit.stderr
        assert [r["id"] for r in json.loads(hit.stdout)] == [doc_id], query


def test_a_factur_x_pdf_is_read_from_its_xml_and_never_ocred(env: Env, db: Database) -> None:
    """A Factur-X PDF: the embedded XML is the truth, the PDF's own text the content, no
    OCR; the derived PDF still carries the XML; its visible total agrees (`ok`)."""
    src = facturx_pdf(env.root / "in" / "Rechnung Stadtwerke.pdf")
    original = src.read_bytes()
    doc_id = _ingest(env, db, src)
    drain(env, db, "w-einvoice")
    doc = _doc(db, doc_id)
    assert doc["job_status"] == "done", doc["error_message"]
    assert doc["mime_type"] == "application/pdf"
    archived = env.config.paths.archive_dir / doc["archive_path"]
    assert archived.read_bytes() == original
    inv = doc["invoice"]
    assert inv["source"] == "embedded" and inv["syntax"] == "cii"
    assert inv["pdf_check"] == "ok" and inv["number"] == "RE-2026-4711"
    assert "in PDF" in doc["engine"] and "Gesamtbetrag" in doc["pages"][0]
    derived = env.config.paths.derived_dir / doc["searchable_pdf"]
    found = embedded_invoice_xml(derived)
    assert found is not None and found[1] == embedded_invoice_xml(archived)[1]  # type: ignore[index]
    # A name given by the department is kept (invariant 5); date and seller from the XML.
    assert doc["title"] == "Rechnung Stadtwerke"
    assert str(doc["issued_date"]) == "2026-11-20" and doc["correspondent"] == SELLER


def test_a_pdf_showing_another_total_than_its_xml_is_flagged(env: Env, db: Database) -> None:
    """A hybrid PDF whose visible total differs from its XML's: archived and read from the
    XML, the difference shown in pdf_check, never hidden or corrected."""
    src = facturx_pdf(env.root / "in" / "Rechnung.pdf", visible_total="99,00")
    doc_id = _ingest(env, db, src)
    drain(env, db, "w-einvoice")
    doc = _doc(db, doc_id)
    assert doc["job_status"] == "done", doc["error_message"]
    check = doc["invoice"]["pdf_check"]
    assert check != "ok" and "119" in check, check


def test_wrong_invoices_are_kept_flagged_and_duplicates_marked(env: Env, db: Database) -> None:
    """Wrong arithmetic is a business-rule finding; a missing number a format error (an
    "other invoice"); the same seller and number again a possible duplicate: every one
    archived and analysed, none refused."""
    bad_sum = _write(env.root / "in" / "a.xml", ubl_xml(gross=Decimal("120.00")))
    no_number = _write(env.root / "in" / "b.xml", cii_xml(number=None))
    first = _write(env.root / "in" / "c.xml", cii_xml(number="RE-9"))
    again = _write(env.root / "in" / "d.xml", ubl_xml(number="RE-9"))
    ids = [_ingest(env, db, p) for p in (bad_sum, no_number, first, again)]
    drain(env, db, "w-einvoice")
    docs = [_doc(db, i) for i in ids]
    assert all(d["job_status"] == "done" for d in docs), [d["error_message"] for d in docs]
    wrong, unnumbered, one, two = (d["invoice"] for d in docs)
    codes = [f["code"] for f in wrong["report"]["findings"]]
    assert wrong["rule_errors"] >= 1 and "BR-CO-15" in codes, codes
    assert wrong["legal_status"] == "e-invoice"
    assert unnumbered["format_errors"] >= 1 and unnumbered["legal_status"] == "other invoice"
    assert one["duplicate_of"] is None and two["duplicate_of"] == ids[2]
    shown = run_cli(env, "invoices", "show", str(ids[0]), "--tenant", "acme")
    assert shown.returncode == 0 and "BR-CO-15" in shown.stdout, shown.stderr


def test_hostile_invoice_xml_is_archived_and_needs_attention(env: Env, db: Database) -> None:
    """An invoice root behind a DTD with an external entity (XXE): archived unchanged, in
    attention with the reason; the entity is never resolved (the file's content appears
    nowhere)."""
    secret = env.root / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT\n")
    xxe = (
        b'<?xml version="1.0"?>\n<!DOCTYPE Invoice [<!ENTITY x SYSTEM "file://'
        + str(secret).encode()
        + b'">]>\n<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2">'
        b'<cbc:ID xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">'
        b"&x;</cbc:ID></Invoice>"
    )
    doc_id = _ingest(env, db, _write(env.root / "in" / "evil.xml", xxe))
    drain(env, db, "w-einvoice")
    doc = _doc(db, doc_id)
    assert doc["processing_status"] == "attention", doc
    assert "DTD" in (doc["attention_reason"] or ""), doc["attention_reason"]
    assert doc["invoice"] is None
    dump = _one(
        db, "SELECT count(*) AS n FROM document_content WHERE content LIKE '%%TOP-SECRET%%'"
    )
    assert dump["n"] == 0
    archived = env.config.paths.archive_dir / doc["archive_path"]
    assert archived.read_bytes() == xxe


def test_invoices_list_exports_csv_and_json_safely(env: Env, db: Database) -> None:
    """`invoices list` by issue date, as CSV (a cell a spreadsheet would run as a formula
    is defused) and JSON; --since/--until by issue date."""
    evil = ubl_xml(seller='=HYPERLINK("http://evil.example","x")', number="RE-1")
    _ingest(env, db, _write(env.root / "in" / "evil.xml", evil))
    _ingest(env, db, _write(env.root / "in" / "ok.xml", cii_xml(number="RE-2")))
    drain(env, db, "w-einvoice")
    out = run_cli(env, "invoices", "list", "--tenant", "acme", "--format", "csv")
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert sorted(r["number"] for r in rows) == ["RE-1", "RE-2"]
    sellers = {r["number"]: r["seller_name"] for r in rows}
    assert sellers["RE-1"].startswith("'=") and sellers["RE-2"] == SELLER
    as_json = run_cli(env, "invoices", "list", "--tenant", "acme", "--format", "json")
    assert {r["number"] for r in json.loads(as_json.stdout)} == {"RE-1", "RE-2"}
    later = run_cli(env, "invoices", "list", "--tenant", "acme", "--since", "2026-11-21")
    assert later.returncode == 0 and "no invoices" in later.stdout
    table = run_cli(env, "invoices", "list", "--tenant", "acme", "--until", "2026-11-20")
    assert "RE-2" in table.stdout and "e-invoice" in table.stdout


def test_workflows_and_webhooks_see_the_invoice_fields(
    make_env: Any,
    db: Database,
    tenant: str,
    tmp_path: Path,
    webhook: Any,  # noqa: F811
) -> None:
    """A workflow on invoices of one seller above a total tags them and its webhook event
    carries the invoice's fields; a smaller invoice does not match."""
    url, calls, _handler = webhook
    flow = _workflow(
        tenant,
        url,
        tmp_path / "hook.secret",
        invoice=True,
        seller_vat_id="de 123 456 789",
        total_above="100",
    )
    env: Env = make_env(worker=WORKER, analysis=ANALYSIS, workflows=[flow])
    big = _ingest(env, db, _write(env.root / "in" / "big.xml", cii_xml(number="RE-100")))
    small = _ingest(
        env,
        db,
        _write(
            env.root / "in" / "small.xml",
            ubl_xml(
                number="RE-7", gross=Decimal("50.00"), net=Decimal("42.02"), tax=Decimal("7.98")
            ),
        ),
    )
    drain(env, db, "w-einvoice")
    assert _doc(db, big)["job_status"] == "done"
    assert _doc(db, small)["job_status"] == "done"
    from tests.conftest import wait_until

    drain(env, db, "w-einvoice")
    wait_until(lambda: len(calls) >= 1, 30)
    event = json.loads(calls[-1]["body"])
    assert event["document"]["id"] == big
    invoice = event["document"]["invoice"]
    assert invoice["number"] == "RE-100" and invoice["legal_status"] == "e-invoice"
    assert len(calls) == 1
