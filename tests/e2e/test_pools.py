"""Worker pools with real `ingestd worker` processes: a dedicated pool serves only its
tenants, weights give shares, a cap holds with eight workers, and the short lane starts a
provision-tenant job behind a thousand queued OCR jobs (issue 21)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import Env, run_cli, wait_until
from tests.e2e.test_worker import qdb, start, workers  # noqa: F401
from tests.fixtures.queue import WorkerProc, count, make_jobs
from tests.fixtures.scans import image_pdf

FAST = {"poll_interval": 0.2, "lease_seconds": 10, "retry_base": 0.1, "max_retries": 2}


def rows(db: Database, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(sql, params)


def set_limits(env: Env, tenant: str, *args: str) -> None:
    out = run_cli(env, "tenant", "limits", tenant, *args)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_dedicated_pool_serves_only_its_tenants(
    make_env: Any,
    qdb: Database,  # noqa: F811
    workers: list[WorkerProc],  # noqa: F811
) -> None:
    """Worker --pool acme runs every acme job and nothing else; the default pool's worker
    runs every other tenant's and none of acme's, short jobs included."""
    env = make_env(
        worker={
            **FAST,
            "concurrency": 2,
            "pools": [{"name": "acme", "tenants": ["acme"], "workers": 1}],
        }
    )
    record = {"file": str(env.root / "runs.txt")}
    acme = make_jobs(qdb, "acme", 30, kind="test-record", payload=record)
    others = make_jobs(qdb, "beta", 30, kind="test-record", payload=record)
    others += make_jobs(qdb, "gamma", 30, kind="test-record", payload=record)
    a = start(workers, env, "w-acme", "--pool", "acme")
    d = start(workers, env, "w-default")
    wait_until(
        lambda: not count(qdb, "SELECT count(*) AS n FROM processing_jobs WHERE status <> 'done'"),
        timeout=180,
    )
    served = {
        r["id"]: (r["worker_id"], r["pool"])
        for r in rows(qdb, "SELECT id, worker_id, pool FROM processing_jobs")
    }
    assert {served[i] for i in acme} == {("w-acme", "acme")}
    assert {served[i] for i in others} == {("w-default", "default")}
    # The pool's lanes say what they serve.
    ready = {e["lane"]: e["serves"] for e in a.events("worker.ready")}
    assert ready[1]["tenants"] == ["acme"] and ready[2]["short"] is True
    assert {e["serves"]["except"][0] for e in d.events("worker.ready")} == {"acme"}
    assert a.stop() == 0 and d.stop() == 0


def test_weights_give_shares_within_five_percent_over_1000_claims(
    make_env: Any,
    qdb: Database,  # noqa: F811
    workers: list[WorkerProc],  # noqa: F811
) -> None:
    """Tenants of weight 3, 2 and 1, all backlogged, two worker processes with two lanes
    each: the first 1,000 claims split 1/2, 1/3, 1/6, each within 5 % of its share."""
    env = make_env(worker={**FAST, "concurrency": 2, "short_lanes": 0})
    weights = {"heavy": 3, "mid": 2, "light": 1}
    for t in weights:
        make_jobs(qdb, t, 700, kind="test-noop")
    for t, w in weights.items():
        set_limits(env, t, "--weight", str(w))
    for i in range(2):
        start(workers, env, f"w{i}", ready=False)
    wait_until(
        lambda: (
            count(qdb, "SELECT count(*) AS n FROM processing_jobs WHERE started_at IS NOT NULL")
            >= 1000
        ),
        timeout=300,
    )
    # Claim order from started_at: stamped by the claim itself, under its lock.
    first = rows(
        qdb,
        "SELECT t.name FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id "
        "WHERE j.started_at IS NOT NULL ORDER BY j.started_at, j.id LIMIT 1000",
    )
    got = Counter(r["name"] for r in first)
    total = sum(weights.values())
    for t, w in weights.items():
        share = got[t] / 1000
        assert abs(share - w / total) <= 0.05 * (w / total), (t, got)
    for w in workers:
        assert w.stop() == 0


def test_a_cap_of_two_holds_with_eight_workers(
    make_env: Any,
    qdb: Database,  # noqa: F811
    workers: list[WorkerProc],  # noqa: F811
) -> None:
    """max_running 2 and eight worker lanes (four processes of two): sampled all along, at
    most two of the tenant's jobs ever run, while the other lanes serve the others."""
    env = make_env(worker={**FAST, "concurrency": 2, "short_lanes": 0})
    slow = {"seconds": 0.4}
    big = make_jobs(qdb, "big", 40, kind="test-record", payload=slow)
    for t in ("s1", "s2", "s3"):
        make_jobs(qdb, t, 12, kind="test-record", payload=slow)
    set_limits(env, "big", "--max-running", "2")
    samples: list[tuple[int, int]] = []
    done = threading.Event()

    def sample() -> None:
        sql = (
            "SELECT count(*) FILTER (WHERE t.name = 'big') AS big, count(*) AS n "
            "FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id "
            "WHERE j.status = 'processing'"
        )
        deadline = time.monotonic() + 600
        while not done.is_set() and time.monotonic() < deadline:
            (r,) = rows(qdb, sql)
            samples.append((int(r["big"]), int(r["n"])))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for i in range(4):
            start(workers, env, f"w{i}", ready=False)
        wait_until(
            lambda: (
                not count(qdb, "SELECT count(*) AS n FROM processing_jobs WHERE status <> 'done'")
            ),
            timeout=300,
        )
    finally:
        done.set()
        sampler.join(30)
    assert len(samples) > 50
    assert max(b for b, _ in samples) == 2, Counter(b for b, _ in samples)
    # The cap left the other lanes to the others: more than two jobs ran at once.
    assert max(n for _, n in samples) > 2
    assert all(
        r["status"] == "done"
        for r in rows(qdb, "SELECT status FROM processing_jobs WHERE id = ANY(%(i)s)", {"i": big})
    )
    for w in workers:
        assert w.stop() == 0


LETTER = ["Stadtwerke Musterstadt GmbH", "Rechnung Nr. 2026-0042", "Wasser und Abwasser"]


def test_a_short_job_starts_within_seconds_behind_1000_queued_ocr_jobs(
    make_env: Any,
    db: Database,
    workers: list[WorkerProc],  # noqa: F811
) -> None:
    """Both job lanes busy with OCR and 1,000 OCR jobs queued: `tenant create` gets its
    provision-tenant job started by the short lane within 5 s, while the OCR lanes are
    still on their jobs."""
    env: Env = make_env(
        worker={**FAST, "lease_seconds": 60, "concurrency": 2},
        analysis={"thumbnail_width": 200, "engine": "tesseract"},
    )
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": "acme", "status": "active"})
    intake = make_intake(env.config, db)
    docs = []
    for i in range(4):
        pdf = image_pdf(env.root / "in" / f"scan{i}.pdf", [[*LETTER, f"Kunde {i}"]] * 6)
        res = intake.ingest(IntakeItem(path=pdf, tenant="acme"))
        assert res.outcome is Outcome.ingested and res.document_id is not None
        docs.append(res.document_id)
    with db.transaction() as tx:  # 996 more OCR jobs of the same scans: 1,000 queued
        tx.raw(
            "INSERT INTO processing_jobs (tenant_id, document_id, kind) "
            "SELECT d.tenant_id, d.id, 'analyze-document' FROM documents d, "
            "generate_series(1, 249) WHERE d.id = ANY(%(ids)s)",
            {"ids": docs},
        )
    assert count(db, "SELECT count(*) AS n FROM processing_jobs WHERE status = 'queued'") == 1000
    start(workers, env, "w1")
    running = "SELECT count(*) AS n FROM processing_jobs WHERE status = 'processing'"
    wait_until(lambda: count(db, running) == 2, timeout=120)
    out = run_cli(env, "tenant", "create", "newco", "--wait", "60")
    assert out.returncode == 0, out.stdout + out.stderr
    (job,) = rows(
        db,
        "SELECT j.created_at, j.started_at, j.pool, extract(epoch FROM j.started_at - "
        "j.created_at) AS waited FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id "
        "WHERE t.name = 'newco' AND j.kind = 'provision-tenant'",
    )
    assert job["waited"] < 5, job
    # It did not wait for an OCR lane: both OCR jobs that ran when it started were still
    # running then.
    busy = count(
        db,
        "SELECT count(*) AS n FROM processing_jobs WHERE kind = 'analyze-document' "
        "AND started_at < %(s)s AND (finished_at IS NULL OR finished_at > %(s)s)",
        {"s": job["started_at"]},
    )
    assert busy == 2
    assert count(db, "SELECT count(*) AS n FROM processing_jobs WHERE status = 'queued'") > 900
    for w in workers:
        assert w.stop(timeout=120) == 0


def test_a_reload_moves_a_tenant_into_its_new_pool(
    make_env: Any,
    qdb: Database,  # noqa: F811
    workers: list[WorkerProc],  # noqa: F811
) -> None:
    """A running default worker, then acme dedicated to a pool and SIGHUP: each lane
    re-reads its scope, and acme's new jobs wait for the pool's worker."""
    import signal

    env = make_env(worker={**FAST, "concurrency": 1})
    d = start(workers, env, "w-default")
    (first,) = make_jobs(qdb, "acme", 1, kind="test-noop")
    done = "SELECT count(*) AS n FROM processing_jobs WHERE id = %(i)s AND status = 'done'"
    wait_until(lambda: count(qdb, done, {"i": first}) == 1, timeout=60)
    make_env(worker={**FAST, "concurrency": 1, "pools": [{"name": "acme", "tenants": ["acme"]}]})
    d.signal(signal.SIGHUP)
    wait_until(lambda: len(d.events("worker.reloaded")) == 2, timeout=60)
    assert {tuple(e["serves"]["except"]) for e in d.events("worker.reloaded")} == {("acme",)}
    later = make_jobs(qdb, "acme", 3, kind="test-noop")
    (beta,) = make_jobs(qdb, "beta", 1, kind="test-noop")
    wait_until(lambda: count(qdb, done, {"i": beta}) == 1, timeout=60)
    queued = "SELECT count(*) AS n FROM processing_jobs WHERE id = ANY(%(i)s) AND status = 'queued'"
    assert count(qdb, queued, {"i": later}) == 3
    a = start(workers, env, "w-acme", "--pool", "acme")
    wait_until(lambda: count(qdb, queued, {"i": later}) == 0, timeout=60)
    assert d.stop() == 0 and a.stop() == 0
