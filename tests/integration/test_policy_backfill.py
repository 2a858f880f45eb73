"""Documents recorded before the date policy was frozen at intake (migration 0024) get it
from the config once, at the next ``ingestd migrate`` (or start): their source's
``date_source`` and the date their file name gave (ingestd/intake/policy_backfill.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import Env, run_cli
from tests.fixtures.files import pdf_bytes, write


def _rows(db: Database) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(
            "SELECT original_filename, date_policy, name_date::text FROM documents ORDER BY id"
        )


def test_documents_from_before_0024_get_their_policy_once(
    make_env: Any, db: Database, tenant: str, tmp_path: Path
) -> None:
    """A text-first hot folder's document, a CLI document and one from a folder no longer
    configured: each gets what analysis used to look up, and a document that has its
    policy (recorded at intake) is left as it is."""
    folder = tmp_path / "hot"
    folder.mkdir()
    env: Env = make_env(
        watch=[{"path": str(folder), "tenant": tenant, "date_source": "text-first"}]
    )
    intake = make_intake(env.config, db)
    sources = {
        "2026-11-03 Rechnung.pdf": f"watch:{folder}",
        "Scan_20261124_101500.pdf": "cli",
        "Notiz.pdf": "watch:/srv/gone",
        "2026-11-05 Brief.pdf": "sftp:scan1",
    }
    for n, (name, source) in enumerate(sources.items()):
        path = write(tmp_path / "in" / name, pdf_bytes(f"doc {n}"))
        res = intake.ingest(IntakeItem(path=path, tenant=tenant, source=source))
        assert res.outcome is Outcome.ingested
    # As an earlier version left them: no policy, no name date (the last one keeps its own).
    with db.transaction() as tx:
        tx.raw(
            "UPDATE documents SET date_policy = NULL, name_date = NULL "
            "WHERE original_filename <> '2026-11-05 Brief.pdf'"
        )
        tx.raw("UPDATE documents SET date_policy = 'text-first' WHERE source = 'sftp:scan1'")

    proc = run_cli(env, "migrate")
    assert proc.returncode == 0, proc.stderr
    assert _rows(db) == [
        {"original_filename": "2026-11-03 Rechnung.pdf", "date_policy": "text-first",
         "name_date": "2026-11-03"},
        {"original_filename": "Scan_20261124_101500.pdf", "date_policy": "filename-first",
         "name_date": "2026-11-24"},
        {"original_filename": "Notiz.pdf", "date_policy": "filename-first", "name_date": None},
        {"original_filename": "2026-11-05 Brief.pdf", "date_policy": "text-first",
         "name_date": "2026-11-05"},
    ]  # fmt: skip
    with db.transaction() as tx:
        [left] = tx.raw("SELECT count(*) AS n FROM documents WHERE date_policy IS NULL")
    assert left["n"] == 0
