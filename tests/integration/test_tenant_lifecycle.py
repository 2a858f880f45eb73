"""Tenant lifecycle and purge (seed 004) on a real Postgres with real files: provision,
signed delete/reset with every refusal, purge with retention. The worker loop runs here
with its real job child; admin actions go through the real `ingestd` CLI."""

from __future__ import annotations

import datetime
import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from ingestd.archive.store import LocalArchive, StagedFile
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.errors import TenantNotActive, TenantNotFound
from ingestd.filenames.titles import TitleRules
from ingestd.intake.ingest import Intake
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.jobkinds import JobKind
from ingestd.queue.enqueue import enqueue
from ingestd.tenants import signing
from tests.conftest import Env, run_cli
from tests.fixtures.drain import run_once
from tests.fixtures.files import pdf_bytes, write

WORKER = {"poll_interval": 0.1, "lease_seconds": 30, "retry_base": 0.05, "max_retries": 2}
ANALYSIS = {"jobs": 1}
# Tables holding tenant rows (by tenant_id), and those holding document rows.
TENANT_TABLES = [
    "documents",
    "processing_jobs",
    "tags",
    "document_tags",
    "correspondents",
    "document_types",
    "document_content",
    "document_workflow_runs",
    "capability_sets",
    "tenant_members",
    "tenant_search",
    "queue_tenants",
]


def _rows(db: Database, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(sql, params)


def _drain(env: Env, db: Database) -> None:
    run_once(env, db, "w-life")


def _cli_ok(env: Env, *args: str) -> str:
    proc = run_cli(env, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return str(proc.stdout)


def _tenant_id(db: Database, name: str) -> int | None:
    rows = _rows(db, "SELECT id FROM tenants WHERE name = %(n)s", {"n": name})
    return int(rows[0]["id"]) if rows else None


def _ingest(env: Env, db: Database, tenant: str, seed: int) -> int:
    src = write(
        env.root / "in" / tenant / f"Rechnung {seed}.pdf",
        pdf_bytes(f"Rechnung {tenant} Nummer {seed}", seed=seed),
    )
    res = make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant))
    assert res.outcome is Outcome.ingested and res.document_id is not None
    return res.document_id


def _created(env: Env, db: Database, name: str, *members: str) -> int:
    args = [a for m in members for a in ("--member", m)]
    _cli_ok(env, "tenant", "create", name, *args)
    _drain(env, db)
    tid = _tenant_id(db, name)
    assert tid is not None
    return tid


def _snapshot(db: Database, tid: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for table in ("capability_sets", "tenant_members", "tenant_search"):
        out[table] = _rows(
            db, f"SELECT * FROM {table} WHERE tenant_id = %(t)s ORDER BY 1, 2", {"t": tid}
        )
    out["tenant"] = _rows(db, "SELECT name, status FROM tenants WHERE id = %(t)s", {"t": tid})
    return out


@pytest.fixture
def life(make_env: Any) -> Env:
    # No retention: these tests delete tenants with documents (test_retention.py has the
    # refusals within retention and under a legal hold).
    env: Env = make_env(worker=WORKER, analysis=ANALYSIS, retention={"years": 0})
    return env


def test_create_provisions_and_activates_idempotently(life: Env, db: Database) -> None:
    """tenant create -> creating + provision job -> active with dirs, capability sets,
    members and search config; provisioning again changes nothing."""
    out = _cli_ok(life, "tenant", "create", "acme", "--member", "alice", "--member", "bob")
    assert "creating" in out and "provision-tenant job" in out
    tid = _tenant_id(db, "acme")
    assert tid is not None
    status = _rows(db, "SELECT status FROM tenants WHERE id = %(t)s", {"t": tid})[0]["status"]
    assert status == "creating"
    refused = run_cli(
        life, "ingest", "--tenant", "acme", str(write(life.root / "early.pdf", pdf_bytes(seed=1)))
    )
    assert refused.returncode == 6  # not active yet
    _drain(life, db)
    snap = _snapshot(db, tid)
    assert snap["tenant"] == [{"name": "acme", "status": "active"}]
    assert {r["name"] for r in snap["capability_sets"]} == {"owner", "user", "readonly", "webdav"}
    assert [(r["member"], r["capability_set"]) for r in snap["tenant_members"]] == [
        ("alice", "owner"),
        ("bob", "owner"),
    ]
    assert str(snap["tenant_search"][0]["config"]) == "german"
    paths = life.config.paths
    assert (paths.archive_dir / "acme").is_dir() and (paths.derived_dir / "acme").is_dir()

    with db.transaction() as tx:
        enqueue(
            tx, tenant_id=tid, kind=JobKind.provision_tenant, payload={"members": ["alice", "bob"]}
        )
    _drain(life, db)
    assert _snapshot(db, tid) == snap
    jobs = _rows(db, "SELECT status FROM processing_jobs WHERE kind = 'provision-tenant'")
    assert [j["status"] for j in jobs] == ["done", "done"]


def _tampered(base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each single field changed after signing, and a forged signature."""

    def with_(**kw: Any) -> dict[str, Any]:
        return {**base, **kw}

    return {
        "forged signature": with_(signature="ab" * 32),
        "tenant_name": with_(tenant_name="beta"),
        "action": with_(action="reset"),
        "remove_tenant": with_(remove_tenant=False),
        "nonce": with_(nonce="0" * 32),
        "issued_at": with_(
            issued_at=(
                datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=5)
            ).isoformat()
        ),
        "final_status": with_(final_status="active"),
    }


def test_delete_refusals_delete_nothing(life: Env, db: Database) -> None:
    """delete-tenant is refused with a clear message and nothing deleted for a forged
    signature, each field tampered, a stale request, a replayed nonce, another tenant's
    request, and a tenant that is not deleting."""
    acme = _created(life, db, "acme", "alice")
    beta = _created(life, db, "beta")
    doc = _ingest(life, db, "acme", 1)
    _drain(life, db)
    secret = signing.server_secret(life.config.paths.state_dir)
    path = _rows(db, "SELECT archive_path FROM documents WHERE id = %(d)s", {"d": doc})[0]
    archived = life.config.paths.archive_dir / path["archive_path"]
    with db.transaction() as tx:  # a tenant that is not deleting: beta stays active
        valid_beta = signing.delete_request(secret, beta, "beta", "delete")
        enqueue(tx, tenant_id=beta, kind=JobKind.delete_tenant, payload=valid_beta)
    _rows(db, "UPDATE tenants SET status = 'deleting' WHERE id = %(t)s RETURNING id", {"t": acme})
    base = signing.delete_request(secret, acme, "acme", "delete")
    cases = _tampered(base)
    six_min = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=6)
    cases["issued 6 minutes ago"] = signing.delete_request(
        secret, acme, "acme", "delete", now=six_min
    )
    replay = signing.delete_request(secret, acme, "acme", "delete")
    cases["replayed nonce"] = replay
    cases["another tenant's signed request"] = signing.delete_request(
        secret, beta, "beta", "delete"
    )
    cases["request naming another tenant"] = signing.delete_request(secret, acme, "beta", "delete")
    with db.transaction() as tx:
        tx.raw(
            "INSERT INTO tenant_delete_nonces (nonce, job_id, tenant_id, tenant_name, action)"
            " VALUES (%(n)s, 424242, %(t)s, 'acme', 'delete')",
            {"n": replay["nonce"], "t": acme},
        )
        ids = {
            name: enqueue(tx, tenant_id=acme, kind=JobKind.delete_tenant, payload=p)
            for name, p in cases.items()
        }
    _drain(life, db)

    jobs = {
        r["id"]: r for r in _rows(db, "SELECT * FROM processing_jobs WHERE kind = 'delete-tenant'")
    }
    expect = {
        "forged signature": "signature does not match",
        "tenant_name": "signature",
        "action": "signature",
        "remove_tenant": "remove_tenant=False does not go with",
        "nonce": "signature",
        "issued_at": "signature",
        "final_status": "signature",
        "issued 6 minutes ago": "s ago (at most 300 s)",
        "replayed nonce": "already used by job 424242",
        "another tenant's signed request": "signature does not match",
        "request naming another tenant": "names tenant 'beta', the job belongs to 'acme'",
    }
    for name, job_id in ids.items():
        job = jobs[job_id]
        assert (job["status"], job["retry_count"]) == ("failed", 0), name
        assert "refused" in job["error_message"] and "nothing was deleted" in job["error_message"]
        assert expect[name] in job["error_message"], (name, job["error_message"])
    beta_job = next(j for j in jobs.values() if j["tenant_id"] == beta)
    assert beta_job["status"] == "failed" and "beta" in beta_job["error_message"]
    assert "deleting" in beta_job["error_message"]
    # Nothing deleted: the archived file, the rows, the directories.
    assert archived.is_file()
    assert (
        _rows(db, "SELECT count(*) AS n FROM documents WHERE tenant_id = %(t)s", {"t": acme})[0][
            "n"
        ]
        == 1
    )
    assert _tenant_id(db, "acme") == acme and _tenant_id(db, "beta") == beta
    assert _rows(db, "SELECT count(*) AS n FROM tenant_delete_nonces")[0]["n"] == 1


def _archive_hashes(env: Env, db: Database, tenant: str) -> dict[str, str]:
    rows = _rows(
        db,
        "SELECT d.archive_path FROM documents d JOIN tenants t ON t.id = d.tenant_id"
        " WHERE t.name = %(n)s",
        {"n": tenant},
    )
    return {
        r["archive_path"]: hashlib.sha256(
            (env.config.paths.archive_dir / r["archive_path"]).read_bytes()
        ).hexdigest()
        for r in rows
    }


def test_valid_delete_removes_everything_of_the_tenant_only(life: Env, db: Database) -> None:
    """A signed delete while another tenant ingests and is processed: nothing of the
    deleted tenant is left (files, rows, jobs, search data, tenant row); the other
    tenant's archive re-hashes identical and `ingestd verify` passes."""
    acme = _created(life, db, "acme", "alice")
    _created(life, db, "beta")
    for seed in (1, 2, 3):
        _ingest(life, db, "acme", seed)
        _ingest(life, db, "beta", 10 + seed)
    _drain(life, db)
    assert _rows(db, "SELECT count(*) AS n FROM document_content")[0]["n"] == 6
    before = _archive_hashes(life, db, "beta")
    # A queued, not yet run job of acme, and a spool upload of acme: both must go too.
    _ingest(life, db, "acme", 4)
    spool_q = life.config.paths.spool / "queue"
    spool_q.mkdir(parents=True, exist_ok=True)
    (spool_q / "0001-acme.json").write_text(json.dumps({"tenant": "acme", "account": "s"}))
    (spool_q / "0001-acme.data").write_bytes(b"%PDF-1.4 pending upload")
    (spool_q / "0002-beta.json").write_text(json.dumps({"tenant": "beta", "account": "t"}))

    out = _cli_ok(life, "tenant", "delete", "acme", "--confirm", "acme")
    assert "deleting" in out and "signed delete-tenant job" in out
    refused = run_cli(life, "tenant", "delete", "beta", "--confirm", "acme")
    assert refused.returncode == 2  # the confirmation must repeat the name

    stop = threading.Event()

    def beta_keeps_ingesting() -> None:
        for seed in range(20, 26):
            if stop.is_set():
                return
            _ingest(life, db, "beta", seed)

    feeder = threading.Thread(target=beta_keeps_ingesting)
    feeder.start()
    _drain(life, db)
    feeder.join(60)
    stop.set()
    _drain(life, db)

    assert _tenant_id(db, "acme") is None
    for table in TENANT_TABLES:
        n = _rows(db, f"SELECT count(*) AS n FROM {table} WHERE tenant_id = %(t)s", {"t": acme})
        assert n[0]["n"] == 0, table
    # Its arrivals (issue 30) go with it, by name; the other tenant's stay.
    left = _rows(db, "SELECT tenant, count(*) AS n FROM arrivals GROUP BY tenant")
    assert {r["tenant"]: r["n"] for r in left} == {"beta": 9}
    paths = life.config.paths
    for root in (paths.archive_dir, paths.derived_dir, paths.state_dir / "failed"):
        assert not (root / "acme").exists()
    assert sorted(p.name for p in spool_q.iterdir()) == ["0002-beta.json"]
    nonce = _rows(db, "SELECT * FROM tenant_delete_nonces")[0]
    assert nonce["tenant_name"] == "acme" and nonce["finished_at"] is not None
    after = _archive_hashes(life, db, "beta")
    assert {k: v for k, v in after.items() if k in before} == before
    assert len(after) == len(before) + 6
    assert (
        _rows(db, "SELECT count(*) AS n FROM documents WHERE processing_status <> 'done'")[0]["n"]
        == 0
    )
    spool_q.joinpath("0002-beta.json").unlink()
    verify = run_cli(life, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


class _DeleteBeforeStaging(LocalArchive):
    """The real archive, with the tenant's delete run just before the file is staged: the
    interleaving of an intake that found the tenant active a moment before the delete."""

    def __init__(self, root: Path, delete: Any) -> None:
        super().__init__(root)
        self.delete = delete

    def stage(
        self, tenant: str, src_fd: int, *, max_bytes: int, when: datetime.datetime
    ) -> StagedFile:
        self.delete()
        return super().stage(tenant, src_fd, max_bytes=max_bytes, when=when)


@pytest.mark.parametrize("wiped", [True, False], ids=["delete-ran", "delete-queued"])
def test_intake_racing_a_delete_archives_nothing_for_the_tenant(
    life: Env, db: Database, wiped: bool
) -> None:
    """An intake that checked the tenant just before `tenant delete`: its file is not
    linked into the archive, no directory of the tenant is left behind the wipe, and the
    source stays where it was."""
    _created(life, db, "acme")
    _ingest(life, db, "acme", 1)
    _drain(life, db)

    def delete() -> None:
        _cli_ok(life, "tenant", "delete", "acme", "--confirm", "acme")
        if wiped:
            _drain(life, db)

    archive = _DeleteBeforeStaging(life.config.paths.archive_dir, delete)
    intake = Intake(
        life.config.intake,
        db,
        archive,
        title_rules=TitleRules(life.config.titles.placeholder_patterns),
    )
    src = write(life.root / "in" / "late.pdf", pdf_bytes("Rechnung late", seed=99))
    with pytest.raises(TenantNotFound if wiped else TenantNotActive):
        intake.ingest(IntakeItem(path=src, tenant="acme"))
    assert src.exists()
    if wiped:
        assert not (life.config.paths.archive_dir / "acme").exists()
    else:
        assert len(list((life.config.paths.archive_dir / "acme").rglob("*.pdf"))) == 1
        _drain(life, db)
        assert not (life.config.paths.archive_dir / "acme").exists()
    assert _tenant_id(db, "acme") is None
    verify = run_cli(life, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_reset_to_active_leaves_an_empty_tenant_that_ingests(life: Env, db: Database) -> None:
    """reset --final-status active: the tenant's documents and files are gone, the tenant
    row stays (active, capability sets kept) and ingests again."""
    acme = _created(life, db, "acme", "alice")
    _ingest(life, db, "acme", 1)
    _drain(life, db)
    _cli_ok(life, "tenant", "reset", "acme", "--confirm", "acme", "--final-status", "active")
    _drain(life, db)
    assert _rows(db, "SELECT status FROM tenants WHERE id = %(t)s", {"t": acme}) == [
        {"status": "active"}
    ]
    for table in ("documents", "document_content", "tags", "tenant_members"):
        n = _rows(db, f"SELECT count(*) AS n FROM {table} WHERE tenant_id = %(t)s", {"t": acme})
        assert n[0]["n"] == 0, table
    assert len(_snapshot(db, acme)["capability_sets"]) == 4
    assert not any((life.config.paths.archive_dir / "acme").rglob("*.pdf"))
    doc = _ingest(life, db, "acme", 1)  # the same file again: not a duplicate any more
    _drain(life, db)
    assert _rows(db, "SELECT processing_status FROM documents WHERE id = %(d)s", {"d": doc}) == [
        {"processing_status": "done"}
    ]


def _purge(env: Env, db: Database, doc: int) -> dict[str, Any]:
    """Trash + purge through the CLI, run the worker; the newest purge job left (a purge
    that succeeded took its own job row with the document: then {})."""
    _cli_ok(env, "document", "trash", "--tenant", "acme", str(doc))
    _cli_ok(env, "document", "purge", "--tenant", "acme", str(doc))
    _drain(env, db)
    jobs = _rows(
        db, "SELECT * FROM processing_jobs WHERE kind = 'purge-document' ORDER BY id DESC LIMIT 1"
    )
    return jobs[0] if jobs else {}


def test_purge_respects_retention_and_shared_originals(make_env: Any, db: Database) -> None:
    """Within retention: refused at once naming the date, nothing deleted. After it
    (years = 0): derived data and rows gone, the original too unless shared."""
    env: Env = make_env(worker=WORKER, analysis=ANALYSIS)
    _created(env, db, "acme")
    doc = _ingest(env, db, "acme", 1)
    _drain(env, db)
    row = _rows(db, "SELECT * FROM documents WHERE id = %(d)s", {"d": doc})[0]
    archived = env.config.paths.archive_dir / row["archive_path"]
    derived = env.config.paths.derived_dir / Path(row["archive_path"]).with_suffix("")
    assert derived.is_dir()
    not_trashed = run_cli(env, "document", "purge", "--tenant", "acme", str(doc))
    assert not_trashed.returncode == 7 and "not in the trash" in not_trashed.stderr

    job = _purge(env, db, doc)
    assert (job["status"], job["retry_count"]) == ("failed", 0)
    until = f"{row['created_at'].year + 10}-12-31"  # to the end of the 10th calendar year
    assert f"under retention until {until}" in job["error_message"]
    assert archived.is_file() and derived.is_dir()
    assert _rows(db, "SELECT count(*) AS n FROM document_content")[0]["n"] == 1

    env = make_env(worker=WORKER, analysis=ANALYSIS, retention={"years": 0})
    # A second document on the same archived file (as a copy restored from a backup
    # would be): purging the first keeps the original.
    with db.transaction() as tx:
        tx.raw(
            "INSERT INTO documents (tenant_id, sha256, size_bytes, mime_type, extension, "
            "original_filename, source, archive_path, title) SELECT tenant_id, "
            "repeat('e', 64), size_bytes, mime_type, extension, 'copy.pdf', 'cli', "
            "archive_path, 'copy' FROM documents WHERE id = %(d)s",
            {"d": doc},
        )
    assert _purge(env, db, doc) == {}
    assert _rows(db, "SELECT count(*) AS n FROM documents WHERE id = %(d)s", {"d": doc}) == [
        {"n": 0}
    ]
    assert archived.is_file() and not derived.exists()
    assert _rows(db, "SELECT count(*) AS n FROM document_content")[0]["n"] == 0

    copy = _rows(db, "SELECT id FROM documents")[0]["id"]
    _purge(env, db, copy)
    assert _rows(db, "SELECT count(*) AS n FROM documents") == [{"n": 0}]
    assert not archived.exists()
