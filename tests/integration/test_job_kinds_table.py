"""job_kinds (migration 0023) holds exactly the facts of ingestd/jobkinds.py.

migrate writes them (query job_kinds_sync), so the SQL that needs a kind's facts (which
jobs move their document's status, the event of a failure) reads what Python declares
instead of repeating a list: a row changed or added by hand is set right by the next
migrate, and an unchanged table is not written.
"""

from __future__ import annotations

from typing import Any

from ingestd import jobkinds
from ingestd.db.database import Database
from ingestd.db.schema import migrate


def _table(db: Database) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT kind, short, tracks_document, failed_event FROM job_kinds ORDER BY kind"
        )
    return [dict(r) for r in rows]


def _declared() -> list[dict[str, Any]]:
    return sorted(jobkinds.table_rows(), key=lambda r: str(r["kind"]))


def test_the_table_says_what_kinds_py_says(db: Database) -> None:
    """Every JobKind has its row, with its short, tracks_document and failed_event."""
    assert _table(db) == _declared()
    by_kind = {r["kind"]: r for r in _table(db)}
    assert by_kind["deliver-webhook"]["failed_event"] == "delivery.failed"
    assert by_kind["notify"]["failed_event"] is None
    assert not by_kind["purge-document"]["tracks_document"]
    assert {k for k, r in by_kind.items() if r["short"]} == {str(k) for k in jobkinds.SHORT_KINDS}


def test_migrate_sets_a_changed_table_right(db: Database) -> None:
    """A row edited, one added and one removed by hand: migrate restores the declaration."""
    with db.transaction() as tx:
        tx.raw("UPDATE job_kinds SET failed_event = 'x.y', short = NOT short WHERE kind = 'notify'")
        tx.raw("DELETE FROM job_kinds WHERE kind = 'split-batch'")
        tx.raw("INSERT INTO job_kinds VALUES ('gone-kind', true, true, NULL)")
    migrate(db)
    assert _table(db) == _declared()


def test_an_unchanged_table_is_not_written(db: Database) -> None:
    """Every process migrates at start: with nothing to change, no row gets a new version."""
    with db.transaction() as tx:
        before = [r["xmin"] for r in tx.raw("SELECT xmin::text FROM job_kinds ORDER BY kind")]
    migrate(db)
    with db.transaction() as tx:
        after = [r["xmin"] for r in tx.raw("SELECT xmin::text FROM job_kinds ORDER BY kind")]
    assert after == before


def test_tracks_document_reads_the_table(db: Database) -> None:
    """ingestd_tracks_document answers from job_kinds; a kind without a row tracks."""
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT k, ingestd_tracks_document(k) AS t FROM unnest(%(k)s::text[]) AS k",
            {"k": [*(str(k) for k in jobkinds.JobKind), "plugin-kind"]},
        )
    got = {r["k"]: r["t"] for r in rows}
    want = {str(k): v for k, v in jobkinds.TRACKS_DOCUMENT.items()} | {"plugin-kind": True}
    assert got == want
