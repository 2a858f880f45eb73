"""The intake pipeline end to end on a real database and real files."""

from __future__ import annotations

import hashlib
import stat

import pytest

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.errors import TenantNotActive, TenantNotFound
from ingestd.intake.items import Disposal, IntakeItem, Outcome, Reason
from tests.conftest import Env
from tests.fixtures.files import pdf_bytes, png_bytes, write
from tests.fixtures.sql import DOCUMENT_TAG_NAMES


def _rows(db: Database, sql: str) -> list[dict[str, object]]:
    with db.transaction() as tx:
        return tx.raw(sql)


def test_ingest_archives_then_records_document_and_job(env: Env, db: Database, tenant: str) -> None:
    """One file: WORM copy (0440, seed path), one document + one queued analyze job, source gone."""
    data = pdf_bytes("Rechnung", pad_to=300_000)
    src = write(env.root / "in" / "2026-11-03 Rechnung Telekom.pdf", data)
    res = make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant))
    assert res.outcome is Outcome.ingested
    sha = hashlib.sha256(data).hexdigest()
    assert res.sha256 == sha
    assert not src.exists()
    doc = _rows(db, "SELECT * FROM documents")[0]
    assert doc["archive_path"] == f"acme/{doc['created_at']:%Y/%m}/{sha}.pdf"  # type: ignore[str-format]
    assert doc["title"] == "Rechnung Telekom"
    assert str(doc["issued_date"]) == "2026-11-03"
    assert doc["processing_status"] == "queued"
    assert doc["mime_type"] == "application/pdf"
    path = env.config.paths.archive_dir / str(doc["archive_path"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o440
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    job = _rows(db, "SELECT * FROM processing_jobs")[0]
    assert (job["document_id"], job["kind"], job["status"]) == (
        doc["id"],
        "analyze-document",
        "queued",
    )
    assert job["derive_title"] is False
    assert doc["trace_id"]  # the correlation id, also in every job of the document
    assert job["payload"] == {"document_id": doc["id"], "force": False, "trace": doc["trace_id"]}


def test_placeholder_name_sets_derive_title(env: Env, db: Database, tenant: str) -> None:
    """A scanner auto-name gives a placeholder title and derive_title = true."""
    src = write(env.root / "in" / "Scan_0001.pdf", pdf_bytes())
    make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant))
    job = _rows(db, "SELECT derive_title FROM processing_jobs")[0]
    assert job["derive_title"] is True


def test_extension_comes_from_content_not_name(env: Env, db: Database, tenant: str) -> None:
    """A PNG named .pdf is archived as .png with image/png."""
    src = write(env.root / "in" / "photo.pdf", png_bytes())
    res = make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant))
    assert res.archive_path is not None and res.archive_path.endswith(".png")
    assert _rows(db, "SELECT mime_type FROM documents")[0]["mime_type"] == "image/png"


def test_same_bytes_again_is_skipped_with_a_counter(env: Env, db: Database, tenant: str) -> None:
    """Default policy: a second copy is a duplicate, no second document, source removed."""
    from ingestd.runtime import metrics

    intake = make_intake(env.config, db)
    data = pdf_bytes(seed=7)
    first = intake.ingest(IntakeItem(path=write(env.root / "a.pdf", data), tenant=tenant))
    before = metrics.INTAKE_FILES.labels(tenant, "cli", "duplicate")._value.get()
    second_src = write(env.root / "b.pdf", data)
    second = intake.ingest(IntakeItem(path=second_src, tenant=tenant))
    assert second.outcome is Outcome.duplicate
    assert second.document_id == first.document_id
    assert not second_src.exists()
    assert metrics.INTAKE_FILES.labels(tenant, "cli", "duplicate")._value.get() == before + 1
    assert _rows(db, "SELECT count(*) AS n FROM documents")[0]["n"] == 1


def test_duplicate_policy_refuse(make_env: object, db: Database, tenant: str) -> None:
    """With duplicates = "refuse" the second copy is refused and left in place."""
    env = make_env(intake={"duplicates": "refuse"})  # type: ignore[operator]
    intake = make_intake(env.config, db)
    data = pdf_bytes(seed=8)
    intake.ingest(IntakeItem(path=write(env.root / "a.pdf", data), tenant=tenant))
    src = write(env.root / "b.pdf", data)
    res = intake.ingest(IntakeItem(path=src, tenant=tenant))
    assert res.outcome is Outcome.refused and res.reason is Reason.duplicate
    assert src.exists()


def test_same_bytes_for_two_tenants_are_two_documents(env: Env, db: Database, tenant: str) -> None:
    """Deduplication is per tenant: another tenant's identical scan is its own document."""
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": "globex", "status": "active"})
    intake = make_intake(env.config, db)
    data = pdf_bytes(seed=9)
    a = intake.ingest(IntakeItem(path=write(env.root / "a.pdf", data), tenant=tenant))
    b = intake.ingest(IntakeItem(path=write(env.root / "b.pdf", data), tenant="globex"))
    assert a.outcome is b.outcome is Outcome.ingested
    assert a.archive_path != b.archive_path


def test_suspended_tenant_leaves_the_file_in_place(env: Env, db: Database, tenant: str) -> None:
    """A tenant that is not active raises TenantNotActive; nothing archived, source kept."""
    with db.transaction() as tx:
        tx.one(
            "tenant_set_status",
            {"name": tenant, "status": "suspended", "from_statuses": ["active"]},
        )
    src = write(env.root / "x.pdf", pdf_bytes())
    with pytest.raises(TenantNotActive):
        make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant))
    assert src.exists()
    assert not env.config.paths.archive_dir.exists() or not any(
        env.config.paths.archive_dir.rglob("*.*")
    )


def test_unknown_tenant(env: Env, db: Database) -> None:
    """An unknown tenant raises TenantNotFound and keeps the file."""
    src = write(env.root / "x.pdf", pdf_bytes())
    with pytest.raises(TenantNotFound):
        make_intake(env.config, db).ingest(IntakeItem(path=src, tenant="nobody"))
    assert src.exists()


def test_keep_disposal_leaves_source(env: Env, db: Database, tenant: str) -> None:
    """Disposal.keep records the document but leaves the source for the caller."""
    src = write(env.root / "x.pdf", pdf_bytes())
    res = make_intake(env.config, db).ingest(
        IntakeItem(path=src, tenant=tenant), disposal=Disposal.keep
    )
    assert res.outcome is Outcome.ingested and src.exists()


def test_nfd_filename_is_stored_nfc(env: Env, db: Database, tenant: str) -> None:
    """macOS NFD names become NFC titles."""
    src = write(env.root / "Ku\u0308ndigung Vertrag.pdf", pdf_bytes())
    make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant))
    assert _rows(db, "SELECT title FROM documents")[0]["title"] == "K\u00fcndigung Vertrag"


def test_concurrent_intakes_creating_the_same_tag_both_get_it(
    env: Env, db: Database, tenant: str
) -> None:
    """Two threads ingesting with the same new tag: each document carries the tag."""
    from concurrent.futures import ThreadPoolExecutor

    intake = make_intake(env.config, db)
    items = [
        IntakeItem(
            path=write(env.root / f"t{i}.pdf", pdf_bytes(seed=900 + i)),
            tenant=tenant,
            tags=(f"tag{i // 8}", "Eingang"),
        )
        for i in range(32)
    ]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(intake.ingest, items))
    for res in results:
        with db.transaction() as tx:
            names = [
                r["name"] for r in tx.raw(DOCUMENT_TAG_NAMES, {"document_id": res.document_id})
            ]
        assert "Eingang" in names and len(names) == 2, names
