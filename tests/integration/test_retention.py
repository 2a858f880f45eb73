"""Retention by document class (to the end of the calendar year) and legal holds: purge
and tenant delete refuse with counts and the earliest expiry; an override is recorded."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from ingestd.archive.audit_verify import verify_audit
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import Env, run_cli
from tests.fixtures.drain import run_once
from tests.fixtures.files import pdf_bytes, write

WORKER = {"poll_interval": 0.1, "lease_seconds": 30, "retry_base": 0.05, "max_retries": 2}
RULES = [
    {"tenant": "acme", "match": "document_type", "name": "Beleg", "years": 8},
    {"tenant": "*", "match": "tag", "name": "korrespondenz", "years": 6},
]


def _rows(db: Database, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(sql, params)


@pytest.fixture
def kept(make_env: Any, db: Database, tenant: str) -> Env:
    env: Env = make_env(worker=WORKER, analysis={"jobs": 1}, retention={"rules": RULES})
    return env


def _ingest(env: Env, db: Database, name: str, tags: tuple[str, ...] = ()) -> int:
    src = write(env.root / "in" / name, pdf_bytes(name))
    res = make_intake(env.config, db).ingest(IntakeItem(path=src, tenant="acme", tags=tags))
    assert res.outcome is Outcome.ingested and res.document_id is not None
    return res.document_id


def _typed(db: Database, doc: int, type_name: str) -> None:
    with db.transaction() as tx:
        tx.raw(
            "INSERT INTO document_types (tenant_id, name) SELECT tenant_id, %(n)s FROM documents "
            "WHERE id = %(d)s ON CONFLICT DO NOTHING",
            {"n": type_name, "d": doc},
        )
        tx.raw(
            "UPDATE documents d SET document_type_id = y.id FROM document_types y "
            "WHERE d.id = %(d)s AND y.tenant_id = d.tenant_id AND y.name = %(n)s",
            {"n": type_name, "d": doc},
        )


def _age(db: Database, doc: int, years: int) -> None:
    """Pretend the document was ingested ``years`` ago."""
    with db.transaction() as tx:
        tx.raw(
            "UPDATE documents SET created_at = created_at - make_interval(years => %(y)s) "
            "WHERE id = %(d)s",
            {"y": years, "d": doc},
        )


def _purge(env: Env, db: Database, doc: int) -> dict[str, Any]:
    run_cli(env, "document", "trash", "--tenant", "acme", str(doc), check=True)
    run_cli(env, "document", "purge", "--tenant", "acme", str(doc), check=True)
    run_once(env, db, "w-retention")
    jobs = _rows(
        db,
        "SELECT * FROM processing_jobs WHERE kind = 'purge-document' AND document_id = %(d)s "
        "ORDER BY id DESC LIMIT 1",
        {"d": doc},
    )
    return jobs[0] if jobs else {}


def _entries(db: Database, kind: str) -> list[dict[str, Any]]:
    rows = _rows(
        db, "SELECT body FROM audit_events WHERE kind = %(k)s ORDER BY chain, seq", {"k": kind}
    )
    return [json.loads(r["body"]) for r in rows]


def test_each_document_is_kept_by_its_class_to_the_end_of_the_year(kept: Env, db: Database) -> None:
    """Default 10 years, a tag rule 6, a type rule 8; both matching: the longer (8);
    every period runs to 31 December of the year that many years after ingest."""
    plain = _ingest(kept, db, "plain.pdf")
    letter = _ingest(kept, db, "letter.pdf", ("Korrespondenz",))
    voucher = _ingest(kept, db, "voucher.pdf")
    _typed(db, voucher, "Beleg")
    both = _ingest(kept, db, "both.pdf", ("korrespondenz",))
    _typed(db, both, "beleg")
    shown = run_cli(kept, "retention", "show", "--tenant", "acme", "--json")
    assert shown.returncode == 0, shown.stderr
    docs = {d["id"]: d for d in json.loads(shown.stdout)["documents"]}
    year = datetime.now(UTC).year
    expected = {plain: 10, letter: 6, voucher: 8, both: 8}
    for doc, years in expected.items():
        assert docs[doc]["years"] == years, docs[doc]
        assert docs[doc]["retain_until"] == f"{year + years}-12-31"
        assert docs[doc]["held"] is False


def test_purge_waits_for_the_class_retention_and_for_a_released_hold(
    kept: Env, db: Database
) -> None:
    """A 6-year letter ingested 5 years ago is refused naming the date; at 7 years it is
    held and refused for the hold; released, it is purged; each step an audit entry."""
    letter = _ingest(kept, db, "letter.pdf", ("Korrespondenz",))
    _age(db, letter, 5)
    job = _purge(kept, db, letter)
    created = _rows(db, "SELECT created_at FROM documents WHERE id = %(d)s", {"d": letter})[0]
    assert job["status"] == "failed"
    assert f"under retention until {created['created_at'].year + 6}-12-31" in job["error_message"]
    assert "6 years after the year of its ingest" in job["error_message"]
    _age(db, letter, 2)
    held = run_cli(
        kept,
        "hold",
        "set",
        "--tenant",
        "acme",
        "--document",
        str(letter),
        "--reason",
        "Az 4 O 12/26",
    )
    assert held.returncode == 0, held.stderr
    job = _purge(kept, db, letter)
    assert "legal hold" in job["error_message"]
    assert (
        _rows(db, "SELECT count(*) AS n FROM documents WHERE id = %(d)s", {"d": letter})[0]["n"]
        == 1
    )
    listed = json.loads(run_cli(kept, "hold", "list", "--json").stdout)
    assert [(h["document_id"], h["reason"]) for h in listed] == [(letter, "Az 4 O 12/26")]
    released = run_cli(kept, "hold", "release", "--tenant", "acme", "--document", str(letter))
    assert released.returncode == 0, released.stderr
    assert _purge(kept, db, letter) == {}  # done: the purge job and its rows are gone
    assert (
        _rows(db, "SELECT count(*) AS n FROM documents WHERE id = %(d)s", {"d": letter})[0]["n"]
        == 0
    )
    assert [e["document"] for e in _entries(db, "hold.set")] == [letter]
    assert [e["document"] for e in _entries(db, "hold.released")] == [letter]
    (purged,) = _entries(db, "document.purged")
    assert purged["document"] == letter and purged["detail"]["original"] == "removed"
    assert verify_audit(db, None).ok


def test_tenant_delete_refuses_within_retention_and_records_an_override(
    kept: Env, db: Database
) -> None:
    """Refused naming how many documents and the earliest expiry; with
    --override-retention the deletion runs and its entry carries the reason and count."""
    for i in range(3):
        _ingest(kept, db, f"doc{i}.pdf", ("Korrespondenz",) if i == 0 else ())
    refused = run_cli(kept, "tenant", "delete", "acme", "--confirm", "acme")
    assert refused.returncode == 1
    year = datetime.now(UTC).year
    assert "3 document(s) are within retention" in refused.stderr
    assert f"the earliest expires after {year + 6}-12-31" in refused.stderr
    assert "--override-retention" in refused.stderr and "nothing was deleted" in refused.stderr
    assert _rows(db, "SELECT status FROM tenants WHERE name = 'acme'") == [{"status": "active"}]
    done = run_cli(
        kept, "tenant", "delete", "acme", "--confirm", "acme",
        "--override-retention", "Mandat beendet, Übergabe an Nachfolger",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_once(kept, db, "w-retention")
    assert _rows(db, "SELECT count(*) AS n FROM tenants WHERE name = 'acme'") == [{"n": 0}]
    (deleted,) = _entries(db, "tenant.deleted")
    assert deleted["detail"]["override_retention"] == "Mandat beendet, Übergabe an Nachfolger"
    assert deleted["detail"]["retained"] == 3 and deleted["detail"]["documents"] == 3
    report = verify_audit(db, None)
    assert report.ok, report.problems


def test_a_tenant_hold_blocks_delete_even_with_an_override(kept: Env, db: Database) -> None:
    """A hold on the whole tenant: delete and reset are refused, override or not."""
    _ingest(kept, db, "doc.pdf")
    assert (
        run_cli(kept, "hold", "set", "--tenant", "acme", "--reason", "Betriebsprüfung").returncode
        == 0
    )
    for cmd in ("delete", "reset"):
        proc = run_cli(
            kept, "tenant", cmd, "acme", "--confirm", "acme", "--override-retention", "x"
        )
        assert proc.returncode == 1
        assert "the tenant is under a legal hold" in proc.stderr
        assert "release the hold first" in proc.stderr
    assert _rows(db, "SELECT status FROM tenants WHERE name = 'acme'") == [{"status": "active"}]


def test_a_changed_policy_is_recorded_once(make_env: Any, kept: Env, db: Database) -> None:
    """The first decision records the policy; the same again records nothing; a changed
    config records the new one with the previous fingerprint."""
    _ingest(kept, db, "doc.pdf")
    run_cli(kept, "retention", "show", "--tenant", "acme", check=True)
    run_cli(kept, "retention", "show", "--tenant", "acme", check=True)
    assert len(_entries(db, "retention.changed")) == 1
    changed: Env = make_env(retention={"years": 12, "rules": RULES})
    run_cli(changed, "retention", "show", "--tenant", "acme", check=True)
    first, second = _entries(db, "retention.changed")
    assert (first["detail"]["default_years"], second["detail"]["default_years"]) == (10, 12)
    assert second["detail"]["previous"] is not None
    assert {"kind": "tag", "name": "korrespondenz", "years": 6} in second["detail"]["rules"]
