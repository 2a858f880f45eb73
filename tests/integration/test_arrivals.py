"""Arrivals (issue 30 point 1): every file that reaches a source is a row with its
outcome, written in the intake transaction or through the event log's on-disk buffer
while the database is down, pruned after ``[arrivals] keep_days`` and exported with the
tenant; and ``documents find`` over them (point 2)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ingestd.archive.audit_export import write_export
from ingestd.arrivals.record import Arrival, ArrivalOutcome
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.log import get_logger
from tests.conftest import Env, run_cli
from tests.fixtures.files import pdf_bytes, write
from worker.housekeeping import prune_arrivals


def _arrivals(db: Database, tenant: str | None = None) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(
            "SELECT * FROM arrivals WHERE %(t)s::text IS NULL OR tenant = %(t)s ORDER BY id",
            {"t": tenant},
        )


def test_intake_writes_one_arrival_row_per_file_with_its_outcome(
    env: Env, db: Database, tenant: str
) -> None:
    """Archived, duplicate of document N and refused (with the reason) are rows written by
    intake itself; a second run of the same trace updates its row instead of adding one."""
    intake = make_intake(env.config, db)
    data = pdf_bytes("Rechnung", seed=11)
    first = intake.ingest(
        IntakeItem(path=write(env.root / "in" / "Scan_0815.pdf", data), tenant=tenant)
    )
    again = intake.ingest(
        IntakeItem(path=write(env.root / "in" / "Kopie.pdf", data), tenant=tenant, trace="t-copy")
    )
    empty = intake.ingest(IntakeItem(path=write(env.root / "in" / "leer.pdf", b""), tenant=tenant))
    assert (first.outcome, again.outcome, empty.outcome) == (
        Outcome.ingested,
        Outcome.duplicate,
        Outcome.refused,
    )
    rows = {r["original_name"]: r for r in _arrivals(db)}
    assert set(rows) == {"Scan_0815.pdf", "Kopie.pdf", "leer.pdf"}
    archived, dup, refused = rows["Scan_0815.pdf"], rows["Kopie.pdf"], rows["leer.pdf"]
    assert (archived["outcome"], archived["document_id"]) == ("archived", first.document_id)
    assert archived["sha256"] == hashlib.sha256(data).hexdigest()
    assert archived["size_bytes"] == len(data) and archived["source"] == "cli"
    assert archived["trace_id"] == _doc_trace(db, first.document_id)
    assert (dup["outcome"], dup["document_id"], dup["trace_id"]) == (
        "duplicate",
        first.document_id,
        "t-copy",
    )
    assert (refused["outcome"], refused["reason"]) == ("refused", "empty")
    assert refused["detail"] == "file is empty"
    # The same file handed over again under its trace: still one row.
    intake.ingest(
        IntakeItem(path=write(env.root / "in" / "Kopie.pdf", data), tenant=tenant, trace="t-copy")
    )
    assert len(_arrivals(db)) == 3


def _doc_trace(db: Database, document_id: int | None) -> str:
    with db.transaction() as tx:
        return str(
            tx.raw("SELECT trace_id FROM documents WHERE id = %(i)s", {"i": document_id})[0][
                "trace_id"
            ]
        )


def _note(db: Database, arrival: Arrival) -> None:
    with db.transaction() as tx:
        tx.one("arrival_note", arrival.params())


def test_a_waiting_hot_folder_file_keeps_one_row_across_a_daemon_restart(db: Database) -> None:
    """A waiting hot-folder file gets a new trace id after a restart: its decision takes
    over the old waiting row (and its arrival time) instead of leaving a second row."""
    early = datetime.now(UTC) - timedelta(hours=5)
    waiting = {"tenant": "acme", "source": "watch:/srv/hot/acme", "name": "wartet.pdf"}
    _note(
        db,
        Arrival(
            trace_id="before",
            outcome=ArrivalOutcome.waiting,
            arrived_at=early,
            reason="tenant_suspended",
            **waiting,
        ),
    )
    _note(
        db,
        Arrival(
            trace_id="after", outcome=ArrivalOutcome.waiting, reason="tenant_suspended", **waiting
        ),
    )
    _note(
        db,
        Arrival(
            trace_id="after",
            outcome=ArrivalOutcome.quarantined,
            reason="bad_type",
            location="/srv/failed/wartet.pdf",
            **waiting,
        ),
    )
    (row,) = _arrivals(db)
    assert (row["trace_id"], row["outcome"], row["arrived_at"]) == ("after", "quarantined", early)
    # Another file of that name, later, in another folder, or by SFTP, is a row of its own.
    _note(
        db,
        Arrival(
            trace_id="sftp",
            tenant="acme",
            source="sftp:scan1",
            name="wartet.pdf",
            outcome=ArrivalOutcome.waiting,
            reason="database_unavailable",
        ),
    )
    assert len(_arrivals(db)) == 2


def test_arrivals_older_than_keep_days_are_pruned_by_housekeeping(
    make_env: Any, db: Database
) -> None:
    """Housekeeping removes the rows older than [arrivals] keep_days, and only those."""
    env: Env = make_env(arrivals={"keep_days": 30})
    now = datetime.now(UTC)
    for i, age in enumerate((40, 31, 29, 0)):
        _note(
            db,
            Arrival(
                trace_id=f"t{i}",
                tenant="acme",
                source="sftp:scan1",
                name=f"age-{age}.pdf",
                outcome=ArrivalOutcome.refused,
                arrived_at=now - timedelta(days=age),
                decided_at=now - timedelta(days=age),
                reason="bad_type",
            ),
        )
    assert prune_arrivals(db, env.config, get_logger()) == 2
    assert [r["original_name"] for r in _arrivals(db)] == ["age-29.pdf", "age-0.pdf"]


def test_the_tenant_export_holds_its_arrivals_and_no_one_elses(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """`audit export --tenant` writes one `arrival` line per arrival of that tenant."""
    intake = make_intake(env.config, db)
    intake.ingest(
        IntakeItem(path=write(env.root / "in" / "Brief.pdf", pdf_bytes(seed=3)), tenant=tenant)
    )
    intake.ingest(IntakeItem(path=write(env.root / "in" / "leer.pdf", b""), tenant=tenant))
    _note(
        db,
        Arrival(
            trace_id="other",
            tenant="beta",
            source="cli",
            name="beta.pdf",
            outcome=ArrivalOutcome.refused,
            reason="empty",
        ),
    )
    out = tmp_path / "acme.jsonl"
    write_export(db, tenant, out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    arrivals = [line["arrival"] for line in lines if "arrival" in line]
    assert sorted((a["original_name"], a["outcome"]) for a in arrivals) == [
        ("Brief.pdf", "archived"),
        ("leer.pdf", "refused"),
    ]
    assert all(a["tenant"] == tenant and a["arrived_at"] for a in arrivals)


def test_documents_find_filters_by_name_source_time_and_status(
    env: Env, db: Database, tenant: str
) -> None:
    """`documents find`: a case-insensitive glob or part of the name, the source, times as
    ISO dates or "today"/"2h", the outcome; --json for scripts."""
    intake = make_intake(env.config, db)
    intake.ingest(
        IntakeItem(path=write(env.root / "in" / "Scan_0815.PDF", pdf_bytes(seed=21)), tenant=tenant)
    )
    intake.ingest(IntakeItem(path=write(env.root / "in" / "leer.pdf", b""), tenant=tenant))
    old = datetime.now(UTC) - timedelta(days=3)
    _note(
        db,
        Arrival(
            trace_id="old",
            tenant=tenant,
            source="sftp:scan1",
            name="scan_0815_alt.pdf",
            outcome=ArrivalOutcome.refused,
            arrived_at=old,
            decided_at=old,
            reason="bad_type",
        ),
    )

    def find(*args: str) -> list[dict[str, Any]]:
        proc = run_cli(env, "documents", "find", "--json", *args)
        assert proc.returncode == 0, proc.stderr
        return list(json.loads(proc.stdout))

    assert {r["original_name"] for r in find("--name", "scan_0815*")} == {
        "Scan_0815.PDF",
        "scan_0815_alt.pdf",
    }
    assert [r["original_name"] for r in find("--name", "0815", "--since", "today")] == [
        "Scan_0815.PDF"
    ]
    assert [r["original_name"] for r in find("--until", "2h", "--tenant", tenant)] == [
        "scan_0815_alt.pdf"
    ]
    assert [r["original_name"] for r in find("--source", "sftp:scan1")] == ["scan_0815_alt.pdf"]
    assert [r["original_name"] for r in find("--status", "refused", "--source", "cli")] == [
        "leer.pdf"
    ]
    # The document's own status too: the archived scan is queued for analysis.
    assert [r["original_name"] for r in find("--name", "*.pdf", "--status", "queued")] == [
        "Scan_0815.PDF"
    ]
    table = run_cli(env, "documents", "find", "--name", "0815")
    assert table.returncode == 0, table.stderr
    head, *lines = table.stdout.splitlines()
    assert head.split() == ["ARRIVED", "TENANT", "SOURCE", "NAME", "SIZE", "OUTCOME", "TRACE"]
    assert "archived #" in lines[0] and "refused (bad_type)" in lines[1]
    bad = run_cli(env, "documents", "find", "--since", "last tuesday")
    assert bad.returncode == 2 and "cannot read the time" in bad.stderr


def test_a_name_that_is_not_utf8_is_found_as_typed_on_the_command_line(
    env: Env, db: Database, tenant: str
) -> None:
    """A file whose name holds bytes that are not UTF-8 is refused (bad_filename) and
    recorded escaped (``\\xNN``); the same bytes typed as `documents find --name`,
    `documents list --name`, `trace` and a tenant name reach the database the same way:
    found, or a clear "nothing", never an internal error (exit 15)."""
    raw = "Eingang_\udce4\udcff.pdf"  # bytes e4 ff as the file system gives them
    intake = make_intake(env.config, db)
    intake.ingest(IntakeItem(path=write(env.root / "in" / raw, pdf_bytes(seed=23)), tenant=tenant))

    found = run_cli(env, "documents", "find", "--json", "--name", "eingang_\udce4*")
    assert found.returncode == 0, found.stderr
    [row] = json.loads(found.stdout)
    assert (row["original_name"], row["reason"]) == ("Eingang_\\xe4\\xff.pdf", "bad_filename")
    listed = run_cli(env, "documents", "list", "--json", "--name", "*\udcff.pdf")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []  # refused: no document
    traced = run_cli(env, "trace", raw)
    assert traced.returncode == 0, traced.stderr
    assert "Eingang_\\xe4\\xff.pdf" in traced.stdout and "refused" in traced.stdout
    nobody = run_cli(env, "documents", "find", "--tenant", "x\udcff")
    assert nobody.returncode == 0 and "no file arrived" in nobody.stdout, nobody.stderr
