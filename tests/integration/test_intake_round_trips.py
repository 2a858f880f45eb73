"""What intake says to PostgreSQL per file, read off libpq's own protocol trace: one look
at the tenant, then one transaction in two round trips (the lock with the duplicate
check; every row in one ``intake_record`` call and the file's arrival row sent with its
COMMIT), and the races that one statement must still get right."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg import pq

from ingestd.archive.audit_verify import verify_audit
from ingestd.archive.backends import make_archive
from ingestd.archive.store import ArchivedFile, LocalArchive, StagedFile
from ingestd.daemon.wiring import make_intake
from ingestd.db import sql
from ingestd.db.database import Database
from ingestd.errors import DatabaseError, TenantNotActive
from ingestd.filenames.titles import TitleRules
from ingestd.intake.ingest import Intake
from ingestd.intake.items import IntakeItem, Outcome, Reason
from tests.conftest import Env
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.sql import DOCUMENT_TAG_NAMES

# One frontend message of the trace: "F\t<length>\t<type>\t<arguments>", the arguments of
# a Parse (the statement's text) running over several lines.
_MESSAGE = re.compile(r"^F\t\d+\t(\w+)(.*?)(?=^[FB]\t|\Z)", re.MULTILINE | re.DOTALL)
_PARSE = re.compile(r'\s*"[^"]*" "(.*)" \d+', re.DOTALL)
_QUERY = re.compile(r'\s*"(.*)"\s*$', re.DOTALL)


@dataclass(frozen=True)
class Said:
    statements: list[str]  # named queries by name, BEGIN and COMMIT, in the order sent
    round_trips: int  # times the client asked for an answer (Sync or Flush) and waited


def _named(text: str) -> str:
    """The name of the statement whose text (placeholders as $n) ``text`` is."""
    if text in ("BEGIN", "COMMIT", "ROLLBACK"):
        return text
    for name, query in sql.queries().items():
        pattern = re.sub(r"%\\\(\w+\\\)s", r"\\$\\d+", re.escape(query))
        if re.fullmatch(pattern, text):
            return name
    raise AssertionError(f"a statement that is no named query: {text!r}")


def _read(trace: str) -> Said:
    statements: list[str] = []
    round_trips, pending = 0, False
    for kind, args in _MESSAGE.findall(trace):
        if kind == "Parse":
            m = _PARSE.match(args)
            assert m is not None, args
            statements.append(_named(m.group(1)))
        elif kind == "Query":  # the simple protocol: a statement and its answer at once
            m = _QUERY.match(args)
            assert m is not None, args
            statements.append(_named(m.group(1)))
            round_trips += 1
        elif kind == "Execute":
            pending = True
        elif kind in ("Sync", "Flush") and pending:
            # A Flush right behind a Sync asks for nothing new: one wait, not two.
            round_trips, pending = round_trips + 1, False
    return Said(statements, round_trips)


@contextlib.contextmanager
def _traced(db_url: str, tmp_path: Path) -> Iterator[tuple[Database, list[Said]]]:
    """A Database of one connection whose protocol libpq traces; the list gets what it
    said once the block is done. Every statement is still parsed (never prepared: fewer
    than five runs), so the trace shows its text."""
    out = tmp_path / "libpq.trace"
    said: list[Said] = []
    with Database(db_url, min_size=1, max_size=1) as db, out.open("w") as fh:
        # The pool's one connection: every transaction below gets this one back.
        with db._pool.connection() as conn:
            conn.pgconn.trace(fh.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield db, said
        finally:
            with db._pool.connection() as conn:
                conn.pgconn.untrace()
    said.append(_read(out.read_text("utf-8", "replace")))


def _intake(env: Env, db: Database) -> Intake:
    return make_intake(env.config, db)


def test_a_new_document_is_one_transaction_of_two_round_trips(
    env: Env, db_url: str, tenant: str, tmp_path: Path
) -> None:
    """A new file: BEGIN + intake_lock, then intake_record + its arrival row + COMMIT (the
    first file of a tenant also looks it up before staging)."""
    files = [write(env.root / "in" / f"Rechnung {i}.pdf", pdf_bytes(seed=i)) for i in (1, 2)]
    with _traced(db_url, tmp_path) as (db, said):
        intake = _intake(env, db)
        results = [intake.ingest(IntakeItem(path=f, tenant=tenant)) for f in files]
    assert [r.outcome for r in results] == [Outcome.ingested] * 2
    (trace,) = said
    one = ["BEGIN", "intake_lock", "intake_record", "arrival_intake", "COMMIT"]
    assert trace.statements == ["tenant_by_name", *one, *one]
    assert trace.round_trips == 1 + 2 + 2


def test_a_tenant_refused_under_the_lock_is_looked_up_again(
    env: Env, db: Database, db_url: str, tenant: str, tmp_path: Path
) -> None:
    """Suspended after its last file: the next is staged, refused and dropped; the one
    after that is refused by the look before staging, never copied."""
    with _traced(db_url, tmp_path) as (traced, said):
        intake = _intake(env, traced)
        first = write(env.root / "in" / "a.pdf", pdf_bytes(seed=1))
        assert intake.ingest(IntakeItem(path=first, tenant=tenant)).outcome is Outcome.ingested
        with db.transaction() as tx:
            tx.one(
                "tenant_set_status",
                {"name": tenant, "status": "suspended", "from_statuses": ["active"]},
            )
        waiting = [write(env.root / "in" / f"{n}.pdf", pdf_bytes(seed=n)) for n in (2, 3)]
        for src in waiting:
            with pytest.raises(TenantNotActive):
                intake.ingest(IntakeItem(path=src, tenant=tenant))
    assert all(src.exists() for src in waiting)
    assert not list(env.config.paths.archive_dir.rglob(".tmp-*"))
    (trace,) = said
    one = ["BEGIN", "intake_lock", "intake_record", "arrival_intake", "COMMIT"]
    refused = ["BEGIN", "intake_lock", "ROLLBACK"]
    assert trace.statements == ["tenant_by_name", *one, *refused, "tenant_by_name"]


def test_a_duplicate_is_recorded_in_the_locked_transaction(
    env: Env, db: Database, db_url: str, tenant: str, tmp_path: Path
) -> None:
    """The same bytes again: found under the lock, its entry sent with the COMMIT."""
    data = pdf_bytes(seed=2)
    first = _intake(env, db).ingest(IntakeItem(path=write(env.root / "a.pdf", data), tenant=tenant))
    src = write(env.root / "b.pdf", data)
    with _traced(db_url, tmp_path) as (traced, said):
        res = _intake(env, traced).ingest(IntakeItem(path=src, tenant=tenant))
    assert (res.outcome, res.document_id) == (Outcome.duplicate, first.document_id)
    (trace,) = said
    assert trace.statements == [
        "tenant_by_name",
        "BEGIN",
        "intake_lock",
        "audit_append",
        "arrival_intake",  # its arrival row (issue 30), in the same round trip
        "COMMIT",
    ]
    assert trace.round_trips == 3


class _RivalBeforeLink(LocalArchive):
    """The real archive, with an intake of the same bytes run to its COMMIT just before
    this one links its file: the race intake_record resolves with ON CONFLICT."""

    def __init__(self, root: Path, rival: Any) -> None:
        super().__init__(root)
        self.rival = rival

    def commit(self, staged: StagedFile, extension: str) -> ArchivedFile:
        self.rival()
        return super().commit(staged, extension)


def _race(env: Env, db: Database, tenant: str) -> tuple[Any, Any]:
    data = pdf_bytes("Rechnung", seed=3)
    rival_src = write(env.root / "rival" / "a.pdf", data)
    rival: list[Any] = []

    def run_rival() -> None:
        rival.append(_intake(env, db).ingest(IntakeItem(path=rival_src, tenant=tenant)))

    intake = Intake(
        env.config.intake,
        db,
        _RivalBeforeLink(env.config.paths.archive_dir, run_rival),
        title_rules=TitleRules(env.config.titles.placeholder_patterns),
    )
    src = write(env.root / "in" / "b.pdf", data)
    return intake.ingest(IntakeItem(path=src, tenant=tenant)), rival[0]


def _kinds(db: Database, tenant: str) -> list[str]:
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT e.kind FROM audit_events e JOIN tenants t ON t.id = e.chain "
            "WHERE t.name = %(t)s ORDER BY e.seq",
            {"t": tenant},
        )
    return [str(r["kind"]) for r in rows]


def test_losing_the_race_to_the_same_bytes_is_a_duplicate(
    env: Env, db: Database, tenant: str
) -> None:
    """The winner's row stands; the loser is a recorded duplicate of it, the trail verifies."""
    res, won = _race(env, db, tenant)
    assert won.outcome is Outcome.ingested
    assert (res.outcome, res.document_id) == (Outcome.duplicate, won.document_id)
    assert not (env.root / "in" / "b.pdf").exists()
    with db.transaction() as tx:
        docs = tx.raw("SELECT id FROM documents")
        jobs = tx.raw("SELECT document_id FROM processing_jobs")
    assert docs == [{"id": won.document_id}] and jobs == [{"document_id": won.document_id}]
    assert _kinds(db, tenant) == ["document.archived", "document.duplicate"]
    report = verify_audit(db, make_archive(env.config))
    assert report.ok, report.problems


def test_losing_the_race_with_duplicates_refused_is_a_refusal(
    make_env: Any, db: Database, tenant: str
) -> None:
    """duplicates = "refuse": the loser is refused and recorded as such, its file stays."""
    env = make_env(intake={"duplicates": "refuse"})
    res, won = _race(env, db, tenant)
    assert won.outcome is Outcome.ingested
    assert (res.outcome, res.reason) == (Outcome.refused, Reason.duplicate)
    assert (env.root / "in" / "b.pdf").exists()
    assert _kinds(db, tenant) == ["document.archived", "document.refused"]


def test_the_archived_entry_says_what_it_said_before(env: Env, db: Database, tenant: str) -> None:
    """The document.archived detail built in SQL has the keys and values it always had."""
    src = write(env.root / "in" / "Brief.pdf", pdf_bytes(seed=4))
    res = _intake(env, db).ingest(IntakeItem(path=src, tenant=tenant, tags=("Post", "Eingang")))
    with db.transaction() as tx:
        (entry,) = tx.raw("SELECT body FROM audit_events WHERE kind = 'document.archived'")
        (doc,) = tx.raw("SELECT * FROM documents")
        tags = tx.raw(DOCUMENT_TAG_NAMES, {"document_id": res.document_id})
    body = json.loads(entry["body"])
    assert body["document"] == res.document_id
    assert body["detail"] == {
        "sha256": res.sha256,
        "size": doc["size_bytes"],
        "path": res.archive_path,
        "type": "pdf",
        "filename": "Brief.pdf",
        "source": doc["source"],
        "job": res.job_id,
    }
    assert [t["name"] for t in tags] == ["Eingang", "Post"]


def _written_then_refused_at_commit(db: Database) -> None:
    with db.pipelined() as tx:
        tx.one("tenant_insert", {"name": "lost", "status": "active"})
        tx.commit_with("tenant_insert", {"name": "bad", "status": "no such status"})


def test_a_pipelined_transaction_commits_only_with_its_last_statement(db: Database) -> None:
    """Committed.row is there after the block; a failing last statement commits nothing."""
    with db.pipelined() as tx:
        row = tx.one("tenant_by_name", {"name": "nobody"})
        done = tx.commit_with("tenant_insert", {"name": "pipelined", "status": "active"})
        with pytest.raises(RuntimeError):
            _ = done.row
    assert row is None and done.row is not None and done.row["name"] == "pipelined"
    with pytest.raises(DatabaseError, match="check"):
        _written_then_refused_at_commit(db)
    with db.pipelined() as tx:  # no commit_with: rolled back
        tx.one("tenant_insert", {"name": "rolled-back", "status": "active"})
    with db.transaction() as tx:
        names = {r["name"] for r in tx.raw("SELECT name FROM tenants")}
    assert "pipelined" in names and not names & {"lost", "bad", "rolled-back"}
