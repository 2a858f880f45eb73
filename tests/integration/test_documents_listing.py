"""What the helpdesk reads in `documents list`, `documents show` and `documents attention`:
the original name and arrival time, filters by name, source and time, the trace id in the
plain output, and a header row on every listing. Real intake, real PostgreSQL, the CLI as
a real process."""

from __future__ import annotations

import datetime
import json
from typing import Any

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import Env, run_cli
from tests.fixtures.files import pdf_bytes, write


def _ingest(env: Env, db: Database, name: str, seed: int, source: str = "cli") -> int:
    src = write(env.root / "in" / f"f{seed}.pdf", pdf_bytes(name, seed=seed))
    res = make_intake(env.config, db).ingest(
        IntakeItem(path=src, tenant="acme", filename=name, source=source)
    )
    assert res.outcome is Outcome.ingested and res.document_id is not None, res
    return res.document_id


def _arrived(db: Database, doc: int, when: datetime.datetime) -> None:
    """Move a document's arrival time (created_at) to ``when``."""
    with db.transaction() as tx:
        tx.raw(
            "UPDATE documents SET created_at = %(w)s WHERE id = %(id)s RETURNING id",
            {"w": when, "id": doc},
        )


def _ids(env: Env, *args: str) -> list[int]:
    proc = run_cli(env, "documents", "list", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return [r["id"] for r in json.loads(proc.stdout)]


def test_list_filters_by_name_source_and_arrival_and_shows_name_and_time(
    env: Env, db: Database, tenant: str
) -> None:
    """--name GLOB (any case), --source (whole, kind or account), --since/--until (a date
    covers its whole day) select the documents; the plain listing has ARRIVED and FILE
    columns with the original name and the arrival time."""
    scan = _ingest(env, db, "Scan_0815.pdf", 1, source="sftp:scanner1")
    other_scan = _ingest(env, db, "SCAN_0816.pdf", 2, source="sftp:scanner2")
    folder = _ingest(env, db, "Rechnung Telekom.pdf", 3, source="watch:buchhaltung")
    old = datetime.datetime(2026, 3, 2, 9, 30).astimezone()
    _arrived(db, folder, old)

    assert _ids(env, "--name", "scan_0815*") == [scan]
    assert _ids(env, "--name", "scan_08??.pdf") == [other_scan, scan]
    assert _ids(env, "--name", "*Telekom*") == [folder]
    assert _ids(env, "--name", "Scan_%") == []  # % is a literal character, not a wildcard
    assert _ids(env, "--source", "sftp:scanner1") == [scan]
    assert _ids(env, "--source", "sftp") == [other_scan, scan]
    assert _ids(env, "--source", "buchhaltung") == [folder]
    assert _ids(env, "--since", "2026-03-02", "--until", "2026-03-02") == [folder]
    assert _ids(env, "--until", "2026-03-01") == []
    assert _ids(env, "--since", "1d") == [other_scan, scan]
    assert _ids(env, "--since", "2h", "--source", "scanner2") == [other_scan]

    proc = run_cli(env, "documents", "list", "--name", "*Telekom*")
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.splitlines()
    assert header.split()[:4] == ["ID", "TENANT", "ARRIVED", "SOURCE"] and "FILE" in header
    assert row[header.index("ARRIVED") :].startswith("2026-03-02 09:30:00")
    assert row[header.index("FILE") :].startswith("Rechnung Telekom.pdf")
    bad = run_cli(env, "documents", "list", "--since", "last tuesday")
    assert bad.returncode == 2 and "not a time" in bad.stderr


def test_show_prints_arrival_name_source_and_trace_in_plain_output(
    env: Env, db: Database, tenant: str
) -> None:
    """`documents show` without --json prints the arrival time, the original name, the
    source with its account, and the trace id."""
    doc = _ingest(env, db, "Scan_0815.pdf", 4, source="sftp:scanner1")
    with db.transaction() as tx:
        row: dict[str, Any] = tx.raw(
            "SELECT trace_id, created_at FROM documents WHERE id = %(id)s", {"id": doc}
        )[0]
    proc = run_cli(env, "documents", "show", str(doc))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    when = row["created_at"].astimezone().strftime("%Y-%m-%d %H:%M:%S")
    assert f"{'arrived:':<15}{when}" in lines
    assert f"{'original name:':<15}Scan_0815.pdf" in lines
    assert f"{'source:':<15}sftp" in lines and f"{'account:':<15}scanner1" in lines
    assert f"{'trace id:':<15}{row['trace_id']}" in lines


def test_attention_listing_has_a_header_row(env: Env, db: Database, tenant: str) -> None:
    """`documents attention` prints a header row (ID, TENANT, ARRIVED, FILE, REASON) over
    one aligned row per document."""
    doc = _ingest(env, db, "geschützt.pdf", 5)
    with db.transaction() as tx:
        tx.raw(
            "UPDATE documents SET processing_status = 'attention', attention_reason = "
            "'encrypted PDF: a password is needed' WHERE id = %(id)s RETURNING id",
            {"id": doc},
        )
    proc = run_cli(env, "documents", "attention")
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.splitlines()[:2]
    assert header.split() == ["ID", "TENANT", "ARRIVED", "FILE", "REASON"]
    assert row.split()[0] == str(doc)
    assert row[header.index("FILE") :].startswith("geschützt.pdf")
    assert row[header.index("REASON") :] == "encrypted PDF: a password is needed"
