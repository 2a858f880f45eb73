"""The schema against the catalog: seed 000 exactly, plus our additions; migrate is idempotent."""

from __future__ import annotations

import subprocess
import sys

from ingestd.db.database import Database, sql
from ingestd.db.schema import migrate

# Seed 000, column by column: (type, nullable, default).
SEED_COLUMNS = {
    "id": ("bigint", "NO", "nextval('processing_jobs_id_seq'::regclass)"),
    "tenant_id": ("bigint", "NO", None),
    # Seed 000 says NOT NULL; 0006 moved that into a CHECK for the document kinds, so that
    # tenant jobs (provision/delete, seed 004) have none (test below).
    "document_id": ("bigint", "YES", None),
    "status": ("text", "NO", "'queued'::text"),
    "retry_count": ("integer", "NO", "0"),
    "derive_title": ("boolean", "NO", "false"),
    "error_message": ("text", "YES", None),
    "next_attempt_at": ("timestamp with time zone", "NO", "now()"),
    "started_at": ("timestamp with time zone", "YES", None),
    "created_at": ("timestamp with time zone", "NO", "now()"),
    "updated_at": ("timestamp with time zone", "NO", "now()"),
}
SEED_INDEXES = {
    "idx_processing_jobs_dispatch": "(tenant_id, status, next_attempt_at, created_at)",
    "idx_processing_jobs_document": "(document_id)",
    "idx_processing_jobs_status": "(status)",
}


def _columns(db: Database, table: str) -> dict[str, tuple[str, str, str | None]]:
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_name = %(t)s",
            {"t": table},
        )
    return {r["column_name"]: (r["data_type"], r["is_nullable"], r["column_default"]) for r in rows}


def test_processing_jobs_has_every_seed_column_and_default(db: Database) -> None:
    """Every column of seed 000 exists with its type, nullability and default."""
    cols = _columns(db, "processing_jobs")
    for name, expected in SEED_COLUMNS.items():
        assert cols.get(name) == expected, name


def test_processing_jobs_has_every_seed_index(db: Database) -> None:
    """The three indexes of seed 000 exist on exactly the seed's columns."""
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'processing_jobs'"
        )
    defs = {r["indexname"]: r["indexdef"] for r in rows}
    for name, cols in SEED_INDEXES.items():
        assert name in defs, name
        assert defs[name].endswith(f"USING btree {cols}"), defs[name]


def test_document_fk_cascades_as_in_the_seed(db: Database) -> None:
    """processing_jobs.document_id references documents(id) ON DELETE CASCADE."""
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT confdeltype, confrelid::regclass::text AS ref, "
            "  (SELECT attname FROM pg_attribute"
            "   WHERE attrelid = conrelid AND attnum = conkey[1]) AS col "
            "FROM pg_constraint WHERE conrelid = 'processing_jobs'::regclass AND contype = 'f'"
        )
    fks = {r["col"]: (r["ref"], r["confdeltype"]) for r in rows}
    assert fks["document_id"] == ("documents", "c")


def test_documents_processing_status_defaults_to_done(db: Database) -> None:
    """documents.processing_status is NOT NULL DEFAULT 'done' exactly as seed 000 explains."""
    cols = _columns(db, "documents")
    assert cols["processing_status"] == ("text", "NO", "'done'::text")


def test_dispatch_columns_exist(db: Database) -> None:
    """Dispatch additions (kind, payload, lease) sit beside the seed columns."""
    cols = _columns(db, "processing_jobs")
    assert cols["kind"] == ("text", "NO", "'analyze-document'::text")
    assert cols["payload"] == ("jsonb", "NO", "'{}'::jsonb")
    assert "lease_expires_at" in cols and "worker_id" in cols


def test_documents_and_tenants_columns(db: Database) -> None:
    """documents and tenants carry the columns intake and the lifecycle need."""
    doc = _columns(db, "documents")
    for col in (
        "tenant_id",
        "sha256",
        "size_bytes",
        "mime_type",
        "extension",
        "original_filename",
        "source",
        "archive_path",
        "title",
        "issued_date",
        "created_at",
    ):
        assert col in doc, col
    ten = _columns(db, "tenants")
    assert ten["status"][2] == "'creating'::text"


def _catalog_snapshot(db: Database) -> list[tuple[str, ...]]:
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT table_name, column_name, data_type, is_nullable,"
            " coalesce(column_default, '') AS d "
            "FROM information_schema.columns WHERE table_schema = 'public' "
            "UNION ALL SELECT tablename, indexname, indexdef, '', '' FROM pg_indexes "
            "WHERE schemaname = 'public' ORDER BY 1, 2"
        )
    return [tuple(str(v) for v in r.values()) for r in rows]


def test_migrate_twice_is_a_noop(db: Database) -> None:
    """Re-running migrations applies nothing and leaves the catalog unchanged."""
    before = _catalog_snapshot(db)
    report = migrate(db)
    assert report.applied == []
    assert report.current_version >= 1
    assert _catalog_snapshot(db) == before


def test_cli_migrate_twice(env: object, db: Database) -> None:
    """`ingestd migrate` on a fresh database applies, a second run says up to date."""
    from tests.conftest import Env

    assert isinstance(env, Env)
    with db.transaction() as tx:
        tx.raw("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    cmd = [sys.executable, "-m", "ingestd.cli", "--config", str(env.config_path), "migrate"]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True)
    names = [f"{m.version:04d}_{m.name}" for m in sql.migrations()]
    assert names[:3] == ["0001_initial", "0002_tags", "0003_queue"]
    assert "applied " + ", ".join(names) in first.stdout
    snapshot = _catalog_snapshot(db)
    second = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "up to date" in second.stdout
    assert _catalog_snapshot(db) == snapshot
    with db.transaction() as tx:
        versions = tx.raw("SELECT version FROM schema_migrations")
    assert [r["version"] for r in versions] == [m.version for m in sql.migrations()]


def test_documents_leave_room_for_hot_status_updates(db: Database) -> None:
    """documents has a fillfactor below 100, so processing_status changes stay HOT."""
    with db.transaction() as tx:
        row = tx.raw("SELECT reloptions FROM pg_class WHERE relname = 'documents'")[0]
    options = dict(o.split("=", 1) for o in row["reloptions"] or [])
    assert int(options.get("fillfactor", 100)) < 100


def test_document_jobs_still_need_a_document(db: Database) -> None:
    """Only tenant jobs may lack a document: an analyze job without one is refused."""
    import pytest

    from ingestd.errors import DatabaseError

    with db.transaction() as tx:
        tid = tx.one("tenant_insert", {"name": "acme", "status": "active"})["id"]  # type: ignore[index]
        tx.raw(
            "INSERT INTO processing_jobs (tenant_id, kind) VALUES (%(t)s, 'provision-tenant')",
            {"t": tid},
        )
    with (
        pytest.raises(DatabaseError, match="processing_jobs_document_required"),
        db.transaction() as tx,
    ):
        tx.raw(
            "INSERT INTO processing_jobs (tenant_id, kind) VALUES (%(t)s, 'analyze-document')",
            {"t": tid},
        )
