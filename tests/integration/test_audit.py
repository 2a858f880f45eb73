"""The audit trail: every archive event an entry in its transaction, append-only in the
database, and every kind of tampering found by ``audit verify`` with its position."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from ingestd.archive import sealkey, seals
from ingestd.archive.audit import GENESIS, entry_hash
from ingestd.archive.audit_checker import Anchor, AuditReport
from ingestd.archive.audit_verify import verify_audit
from ingestd.archive.backends import make_archive
from ingestd.archive.export_check import read_public_key
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.errors import DatabaseError
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import Env, run_cli
from tests.fixtures.files import pdf_bytes, write


def _rows(db: Database, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(sql, params)


def _ingest(env: Env, db: Database, tenant: str, name: str, data: bytes) -> Outcome:
    src = write(env.root / "in" / name, data)
    return make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant)).outcome


def _chain(db: Database, tenant: str) -> list[dict[str, Any]]:
    return _rows(
        db,
        "SELECT e.* FROM audit_events e JOIN tenants t ON t.id = e.chain "
        "WHERE t.name = %(t)s ORDER BY seq",
        {"t": tenant},
    )


def _five(env: Env, db: Database, tenant: str) -> None:
    for i in range(5):
        assert _ingest(env, db, tenant, f"doc{i}.pdf", pdf_bytes(f"Brief {i}")) is Outcome.ingested


def _verify(env: Env, db: Database) -> AuditReport:
    return verify_audit(db, make_archive(env.config))


def _tamper(db: Database, sql: str | list[str], params: dict[str, Any] | None = None) -> None:
    """What root with psql can do: switch the triggers off for the session and write."""
    with db.transaction() as tx:
        tx.raw("SET LOCAL session_replication_role = replica")
        for statement in [sql] if isinstance(sql, str) else sql:
            tx.raw(statement, params)


def _pinned(env: Env) -> Anchor:
    """The appliance's public key as the verifier holds it (its .pub file)."""
    path = sealkey.public_path(env.config.paths.state_dir)
    return Anchor(path=str(path), key=read_public_key(path))


def _where(report: AuditReport) -> set[tuple[str, int | None]]:
    return {(str(p.kind), p.seq) for p in report.problems}


def test_every_intake_outcome_is_an_entry_of_the_tenants_chain(
    env: Env, db: Database, tenant: str
) -> None:
    """Archived, duplicate and refused each append one entry, linked by hash; the chain
    opens with an entry in the appliance's chain; verify finds it intact."""
    data = pdf_bytes("Rechnung")
    assert _ingest(env, db, tenant, "a.pdf", data) is Outcome.ingested
    assert _ingest(env, db, tenant, "b.pdf", data) is Outcome.duplicate
    assert _ingest(env, db, tenant, "c.pdf", b"") is Outcome.refused
    chain = _chain(db, tenant)
    assert [e["kind"] for e in chain] == [
        "document.archived",
        "document.duplicate",
        "document.refused",
    ]
    doc = _rows(db, "SELECT * FROM documents")[0]
    archived = json.loads(chain[0]["body"])
    assert archived["document"] == doc["id"] and archived["tenant"] == tenant
    assert archived["detail"]["sha256"] == doc["sha256"]
    assert archived["detail"]["path"] == doc["archive_path"]
    assert json.loads(chain[2]["body"])["detail"]["reason"] == "empty"
    prev = GENESIS
    for e in chain:
        assert e["prev_hash"] == prev and e["hash"] == entry_hash(prev, e["body"])
        prev = e["hash"]
    system = _rows(db, "SELECT * FROM audit_events WHERE chain = 0 ORDER BY seq")
    assert [e["kind"] for e in system] == ["chain.opened"]
    report = _verify(env, db)
    assert report.ok, report.problems
    assert (report.entries, report.documents, report.files) == (4, 1, 1)


def test_a_refusal_for_a_tenant_that_does_not_exist_goes_to_the_appliances_chain(
    env: Env, db: Database
) -> None:
    """A hot folder naming a tenant never created: its refusals are still recorded."""
    assert _ingest(env, db, "ghost", "x.pdf", b"") is Outcome.refused
    (e,) = _rows(db, "SELECT * FROM audit_events WHERE chain = 0")
    assert e["kind"] == "document.refused" and e["tenant"] == "ghost"


def test_the_trail_refuses_update_delete_and_truncate(env: Env, db: Database, tenant: str) -> None:
    """The trigger refuses every change, superuser included; the privileges are gone even
    for the owner."""
    _five(env, db, tenant)
    for statement in (
        "UPDATE audit_events SET kind = 'x' WHERE seq = 1",
        "DELETE FROM audit_events WHERE seq = 1",
        "TRUNCATE audit_events",
        "UPDATE audit_seals SET body = 'x'",
        "TRUNCATE audit_seals",
    ):
        with pytest.raises(DatabaseError, match="append-only"), db.transaction() as tx:
            tx.raw(statement)
    (row,) = _rows(
        db,
        "SELECT bool_or(has_table_privilege(r.rolname, 'audit_events', p)) AS any "
        "FROM pg_roles r, unnest(ARRAY['UPDATE', 'DELETE', 'TRUNCATE']) p "
        "WHERE r.rolname IN (SELECT tableowner FROM pg_tables WHERE tablename = 'audit_events') "
        "AND NOT r.rolsuper",
    )
    owner = _rows(db, "SELECT tableowner FROM pg_tables WHERE tablename = 'audit_events'")[0]
    acl = _rows(db, "SELECT relacl::text AS acl FROM pg_class WHERE relname = 'audit_events'")[0]
    # The owner's own entry keeps SELECT and INSERT only (arwdDxt -> ar...): no w, d, D.
    entry = next(a for a in acl["acl"].strip("{}").split(",") if a.startswith(owner["tableowner"]))
    rights = entry.split("=")[1].split("/")[0]
    assert not {"w", "d", "D"} & set(rights), entry
    assert row["any"] in (None, False)
    assert len(_chain(db, tenant)) == 5


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        pytest.param(
            "UPDATE audit_events SET body = replace(body, 'doc2', 'docX') "
            "WHERE chain = %(c)s AND seq = 3",
            {("edited", 3)},
            id="edited-entry",
        ),
        pytest.param(
            "UPDATE audit_events SET kind = 'document.duplicate' WHERE chain = %(c)s AND seq = 2",
            {("edited", 2)},
            id="edited-column",
        ),
        pytest.param(
            "DELETE FROM audit_events WHERE chain = %(c)s AND seq = 3",
            {("missing", 3), ("document", None)},
            id="deleted-entry",
        ),
        pytest.param(
            "DELETE FROM audit_events WHERE chain = %(c)s AND seq = 5",
            {("missing", 5), ("document", None)},
            id="deleted-last-entry",
        ),
        pytest.param(
            [
                "UPDATE audit_events SET seq = 1002 WHERE chain = %(c)s AND seq = 2",
                "UPDATE audit_events SET seq = 2 WHERE chain = %(c)s AND seq = 3",
                "UPDATE audit_events SET seq = 3 WHERE chain = %(c)s AND seq = 1002",
            ],
            {("moved", 2), ("moved", 3), ("unlinked", 2), ("unlinked", 3), ("unlinked", 4)},
            id="reordered-entries",
        ),
        pytest.param(
            "UPDATE audit_heads SET seq = 4, hash = (SELECT hash FROM audit_events "
            "WHERE chain = %(c)s AND seq = 4) WHERE chain = %(c)s",
            {("head", 4)},
            id="head-moved-back",
        ),
    ],
)
def test_tampering_with_the_chain_is_found_with_its_position(
    env: Env,
    db: Database,
    tenant: str,
    tamper: str | list[str],
    expected: set[tuple[str, int | None]],
) -> None:
    """Each class of change to the table is reported with the position it concerns."""
    _five(env, db, tenant)
    chain = int(_rows(db, "SELECT id FROM tenants WHERE name = %(t)s", {"t": tenant})[0]["id"])
    assert _verify(env, db).ok
    _tamper(db, tamper, {"c": chain})
    report = _verify(env, db)
    assert _where(report) >= expected, report.problems
    assert {k for k, _ in _where(report)} <= {k for k, _ in expected} | {"document"}


def test_an_inserted_entry_is_found_where_it_was_put(env: Env, db: Database, tenant: str) -> None:
    """A forged entry slipped in at position 3 (later ones renumbered, its hash made to
    fit): the entry after it no longer follows, and says it was written elsewhere."""
    _five(env, db, tenant)
    chain = _chain(db, tenant)
    c = int(chain[0]["chain"])
    forged = chain[1]["body"].replace('"seq": 2', '"seq": 3').replace("doc1", "forged")
    with db.transaction() as tx:
        tx.raw("SET LOCAL session_replication_role = replica")
        tx.raw(
            "UPDATE audit_events SET seq = seq + 1000 WHERE chain = %(c)s AND seq >= 3", {"c": c}
        )
        tx.raw(
            "UPDATE audit_events SET seq = seq - 999 WHERE chain = %(c)s AND seq > 1000", {"c": c}
        )
        tx.raw(
            "INSERT INTO audit_events (chain, seq, at, kind, tenant, document_id, body, "
            "prev_hash, hash) VALUES (%(c)s, 3, now(), 'document.archived', %(t)s, NULL, "
            "%(b)s, %(p)s, %(h)s)",
            {
                "c": c,
                "t": tenant,
                "b": forged,
                "p": chain[1]["hash"],
                "h": entry_hash(chain[1]["hash"], forged),
            },
        )
    report = _verify(env, db)
    assert ("moved", 4) in _where(report) and ("unlinked", 4) in _where(report), report.problems
    assert not any(p.seq is not None and p.seq < 3 for p in report.problems)


def test_an_altered_or_removed_file_is_reported_with_its_archived_entry(
    env: Env, db: Database, tenant: str
) -> None:
    """The file behind entry 2 rewritten and the one behind entry 4 removed: both named
    with the position of the entry that archived them."""
    _five(env, db, tenant)
    chain = _chain(db, tenant)
    paths = [json.loads(e["body"])["detail"]["path"] for e in chain]
    root = env.config.paths.archive_dir
    altered = root / paths[1]
    os.chmod(altered, 0o640)
    altered.write_bytes(b"%PDF-1.4 forged")
    os.chmod(altered, 0o440)
    (root / paths[3]).unlink()
    report = _verify(env, db)
    assert _where(report) == {("file", 2), ("file", 4)}, report.problems
    details = " ".join(p.detail for p in report.problems)
    assert "altered" in details and "missing" in details


def test_rows_changed_behind_the_trails_back_are_documents_out_of_step(
    env: Env, db: Database, tenant: str
) -> None:
    """A document row deleted without a purge, and one whose hash was changed: both
    reported against their archived entry."""
    _five(env, db, tenant)
    docs = _rows(db, "SELECT id FROM documents ORDER BY id")
    _tamper(db, "DELETE FROM documents WHERE id = %(id)s", {"id": docs[0]["id"]})
    _tamper(
        db, "UPDATE documents SET sha256 = repeat('a', 64) WHERE id = %(id)s", {"id": docs[2]["id"]}
    )
    report = verify_audit(db, None)
    assert _where(report) == {("document", 1), ("document", 3)}, report.problems


def test_a_seal_no_longer_matches_a_rewritten_chain(env: Env, db: Database, tenant: str) -> None:
    """Entry 2 rewritten and every later hash recomputed (a consistent forgery, head
    updated): only the seals see it, at the sealed positions."""
    _five(env, db, tenant)
    made = seals.seal_all(db, env.config.paths.state_dir, env.config.audit)
    tenant_seal = next(m for m in made if m.tenant == tenant)
    assert tenant_seal.seq == 5
    key = sealkey.key_path(env.config.paths.state_dir)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    pub = _pinned(env)
    assert verify_audit(db, None, anchor=pub).ok
    # A second run seals nothing new: each chain ends with its seal.
    assert seals.seal_all(db, env.config.paths.state_dir, env.config.audit) == []
    chain = _chain(db, tenant)
    c, prev = int(chain[0]["chain"]), chain[0]["hash"]
    with db.transaction() as tx:
        tx.raw("SET LOCAL session_replication_role = replica")
        for e in chain[1:]:
            body = e["body"].replace("doc1", "docX") if e["seq"] == 2 else e["body"]
            h = entry_hash(prev, body)
            tx.raw(
                "UPDATE audit_events SET body = %(b)s, prev_hash = %(p)s, hash = %(h)s "
                "WHERE chain = %(c)s AND seq = %(s)s",
                {"b": body, "p": prev, "h": h, "c": c, "s": e["seq"]},
            )
            prev = h
        tx.raw("UPDATE audit_heads SET hash = %(h)s WHERE chain = %(c)s", {"h": prev, "c": c})
    report = verify_audit(db, None, anchor=pub)
    # The chain's own seal at 5, and the appliance's roster at 6 (its seal.made entry).
    assert _where(report) == {("seal", 5), ("seal", 6)}, report.problems
    assert "no longer matches" in report.problems[0].detail


def test_a_forged_seal_is_refused(env: Env, db: Database, tenant: str) -> None:
    """A seal whose body was changed does not verify; one signed by another key is named."""
    _five(env, db, tenant)
    seals.seal_all(db, env.config.paths.state_dir, env.config.audit)
    pub = _pinned(env)
    _tamper(db, "UPDATE audit_seals SET body = replace(body, '\"seq\":5', '\"seq\":4')")
    report = verify_audit(db, None, anchor=pub)
    kinds = {str(p.kind) for p in report.problems}
    assert kinds == {"seal"}
    assert any("signature does not verify" in p.detail for p in report.problems)
    other = verify_audit(db, None, anchor=Anchor(path="other", key="00" * 32))
    assert any("the pinned key does not vouch for" in p.detail for p in other.problems)


def test_audit_verify_on_the_command_line(env: Env, db: Database, tenant: str) -> None:
    """Exit 0 and a summary when intact; exit 5 naming chain and position when not;
    every run recorded in the appliance's chain."""
    _five(env, db, tenant)
    ok = run_cli(env, "audit", "verify")
    assert ok.returncode == 0, ok.stderr
    assert "intact" in ok.stdout
    chain = int(_chain(db, tenant)[0]["chain"])
    _tamper(db, "DELETE FROM audit_events WHERE chain = %(c)s AND seq = 2", {"c": chain})
    bad = run_cli(env, "audit", "verify", "--json")
    assert bad.returncode == 5, bad.stderr
    out = json.loads(bad.stdout)
    assert not out["ok"]
    assert {"kind": "missing", "chain": chain, "tenant": tenant, "seq": 2} | {
        "detail": out["problems"][0]["detail"]
    } in out["problems"]
    runs = _rows(db, "SELECT body FROM audit_events WHERE chain = 0 AND kind = 'verify.run'")
    assert [json.loads(r["body"])["detail"]["ok"] for r in runs] == [True, False]


def test_an_export_checks_on_its_own_and_shows_tampering(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """The export of a sealed chain is intact for the standalone checker (pinned key);
    an edited line in the file is found with its position."""
    import subprocess
    import sys

    import ingestd.archive.export_check as checker

    _five(env, db, tenant)
    run_cli(env, "audit", "seal", check=True)
    out = tmp_path / "acme.jsonl"
    done = run_cli(env, "audit", "export", "--tenant", tenant, "-o", str(out))
    assert done.returncode == 0, done.stderr
    before = out.read_bytes()
    again = run_cli(env, "audit", "export", "--tenant", tenant, "-o", str(out))
    assert again.returncode == 1, again.stderr  # an existing file is never overwritten
    assert f"{out} exists; it is not overwritten" in again.stderr
    assert out.read_bytes() == before
    lines = out.read_text().splitlines()
    assert json.loads(lines[0])["complete"] is True
    assert sum(1 for line in lines if '"entry"' in line[:10]) == 6  # 5 archived + the seal
    pub = str(sealkey.public_path(env.config.paths.state_dir))
    standalone = [sys.executable, "-I", checker.__file__, str(out), "--public-key", pub]
    intact = subprocess.run(standalone, capture_output=True, text=True, timeout=60)
    assert intact.returncode == 0, intact.stdout + intact.stderr
    lines[3] = lines[3].replace("doc2", "docX")
    out.write_text("\n".join(lines) + "\n")
    broken = subprocess.run(standalone, capture_output=True, text=True, timeout=60)
    assert broken.returncode == 5
    assert "entry 3: its content no longer matches its hash" in broken.stdout


def test_seals_carry_rfc3161_timestamps_from_a_real_tsa(
    make_env: Any, db: Database, tenant: str, tmp_path: Path
) -> None:
    """With a TSA configured every seal holds a token over its body that openssl verifies
    against the TSA's CA; a token moved to another seal no longer verifies."""
    import subprocess
    import sys

    import ingestd.archive.export_check as checker
    from tests.fixtures.tsa import local_tsa

    pki = tmp_path / "pki"
    pki.mkdir()
    with local_tsa(pki) as authority:
        env: Env = make_env(audit={"tsa_url": authority.url, "tsa_ca_file": str(authority.ca_file)})
        _five(env, db, tenant)
        made = seals.seal_all(db, env.config.paths.state_dir, env.config.audit)
        assert made and all(m.timestamped for m in made)
        assert len(authority.replies) == len(made)
        _ingest(env, db, tenant, "later.pdf", pdf_bytes("Nachtrag"))
        # The grown chain, then the appliance's, whose roster lists the new head.
        assert [
            m.tenant for m in seals.seal_all(db, env.config.paths.state_dir, env.config.audit)
        ] == [tenant, None]
    pub = _pinned(env)
    ca = env.config.audit.tsa_ca_file
    assert verify_audit(db, None, tsa_ca_file=ca, anchor=pub).ok
    out = tmp_path / "acme.jsonl"
    assert run_cli(env, "audit", "export", "--tenant", tenant, "-o", str(out)).returncode == 0
    standalone = [sys.executable, "-I", checker.__file__, str(out), "--tsa-ca", str(ca)]
    standalone += ["--public-key", pub.path]
    intact = subprocess.run(standalone, capture_output=True, text=True, timeout=120)
    assert intact.returncode == 0, intact.stdout + intact.stderr
    chain = int(_chain(db, tenant)[0]["chain"])
    _tamper(
        db,
        "UPDATE audit_seals SET tsa_reply = (SELECT tsa_reply FROM audit_seals WHERE chain = 0 "
        "ORDER BY id LIMIT 1) "
        "WHERE chain = %(c)s AND seq = 5",
        {"c": chain},
    )
    report = verify_audit(db, None, tsa_ca_file=ca, anchor=pub)
    assert _where(report) == {("seal", 5)}, report.problems
    assert "the timestamp does not verify" in report.problems[0].detail


def test_a_hostile_file_name_is_recorded_legibly(env: Env, db: Database, tenant: str) -> None:
    """A name of undecodable bytes is refused, and its refusal recorded with the bytes
    escaped (not a failed transaction that would leave the file waiting forever)."""
    name = os.fsdecode(b"Rechnung-\xff\xfe.pdf")
    assert _ingest(env, db, tenant, name, pdf_bytes("x")) is Outcome.refused
    (e,) = _chain(db, tenant)
    assert json.loads(e["body"])["detail"]["filename"] == "Rechnung-\\xff\\xfe.pdf"
    assert verify_audit(db, None).ok


def test_an_export_of_a_date_range_checks_on_its_own(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """--from/--to export the entries made on those days only, not marked complete; the
    checker holds them to their links; a range with nothing in it exports no entry."""
    import ingestd.archive.export_check as checker

    _five(env, db, tenant)
    today = _rows(db, "SELECT (now() AT TIME ZONE 'UTC')::date AS d")[0]["d"].isoformat()
    out = tmp_path / "today.jsonl"
    args = ("--tenant", tenant, "--from", today, "--to", today, "-o", str(out))
    assert run_cli(env, "audit", "export", *args).returncode == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["complete"] is False and lines[0]["from"] == today
    assert [e["entry"]["seq"] for e in lines if "entry" in e] == [1, 2, 3, 4, 5]
    assert checker.check(out, public_key="00" * 32)[0] == []
    later = tmp_path / "later.jsonl"
    args = ("--tenant", tenant, "--from", "2099-01-01", "-o", str(later))
    assert run_cli(env, "audit", "export", *args).returncode == 0
    assert not any("entry" in json.loads(line) for line in later.read_text().splitlines())
    missing = run_cli(env, "audit", "export", "--tenant", "nobody", "-o", str(tmp_path / "x"))
    assert missing.returncode == 7 and not (tmp_path / "x").exists()
