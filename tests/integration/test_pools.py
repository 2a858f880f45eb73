"""The claim within a pool's scope: dedicated tenants, kinds, weighted shares, per-tenant
caps and the short lane (migration 0014), on a real PostgreSQL, claim by claim."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from ingestd.config.settings import WorkerConfig
from ingestd.db.database import Database
from ingestd.jobkinds import SHORT_KINDS, JobKind
from ingestd.queue import pools
from ingestd.queue.claims import Job, Queue
from tests.conftest import run_cli
from tests.fixtures.queue import make_jobs

POOLS = WorkerConfig(
    concurrency=2,
    pools=[
        {"name": "acme", "tenants": ["acme"], "workers": 1},
        {"name": "ocr", "kinds": ["analyze-document"]},
    ],
)


def limits(db: Database, tenant: str, weight: int | None = None, cap: int | None = None) -> None:
    with db.transaction() as tx:
        tx.one(
            "tenant_limits_set",
            {"name": tenant, "weight": weight, "max_running": cap, "uncap": False},
        )


def tenant_job(db: Database, tenant: str, kind: JobKind) -> int:
    """A job of a tenant without a document (provision-tenant, notify)."""
    with db.transaction() as tx:
        tx.raw(
            "INSERT INTO tenants (name, status) VALUES (%(t)s, 'active') ON CONFLICT DO NOTHING",
            {"t": tenant},
        )
        row = tx.raw(
            "INSERT INTO processing_jobs (tenant_id, kind) "
            "SELECT id, %(k)s FROM tenants WHERE name = %(t)s RETURNING id",
            {"t": tenant, "k": str(kind)},
        )
    return int(row[0]["id"])


def drain(q: Queue, n: int) -> list[Job]:
    """Claim and finish up to n jobs, one at a time."""
    out = []
    for _ in range(n):
        job = q.claim()
        if job is None:
            break
        out.append(job)
        q.done(job)
    return out


def test_the_database_keeps_no_list_of_short_kinds(db: Database) -> None:
    """Which kinds are short is declared in Python only (migration 0016 dropped 0014's
    second list in SQL, ingestd_short_kind): the claim takes them as a parameter."""
    with db.transaction() as tx:
        rows = tx.raw("SELECT to_regprocedure('ingestd_short_kind(text)') AS fn")
    assert rows[0]["fn"] is None
    assert "split-batch" not in {str(k) for k in SHORT_KINDS}


def test_the_short_lane_never_claims_a_split_batch(db: Database) -> None:
    """A queued split-batch (minutes for a big batch) is left to the job lanes: the short
    lane claims the notification queued after it, and nothing else."""
    (batch,) = make_jobs(db, "acme", 1, kind=str(JobKind.split_batch))
    note = tenant_job(db, "acme", JobKind.notify)
    short_scope = pools.resolve(WorkerConfig()).short_scope
    assert short_scope is not None
    lane = Queue(db, WorkerConfig(), "s", scope=short_scope)
    job = lane.claim()
    assert job is not None and job.id == note
    assert lane.claim() is None
    long = Queue(db, WorkerConfig(), "w", scope=pools.resolve(WorkerConfig()).scope)
    job = long.claim()
    assert job is not None and job.id == batch


def test_at_its_cap_a_tenant_s_split_batch_waits(db: Database) -> None:
    """A tenant's cap counts its batches being split and holds back the next one (a long
    kind), while its provisioning still starts."""
    first, second = make_jobs(db, "big", 2, kind=str(JobKind.split_batch))
    limits(db, "big", cap=1)
    q = Queue(db, WorkerConfig(), "w1")
    job = q.claim()
    assert job is not None and job.id == first
    provision = tenant_job(db, "big", JobKind.provision_tenant)
    job = q.claim()
    assert job is not None and job.id == provision
    assert q.claim() is None  # capped: the second batch waits for the first
    with db.transaction() as tx:
        (row,) = tx.raw("SELECT status FROM processing_jobs WHERE id = %(i)s", {"i": second})
    assert row["status"] == "queued"


def test_a_dedicated_pool_serves_only_its_tenants_and_the_default_pool_the_rest(
    db: Database,
) -> None:
    """acme's jobs go to pool acme only; the default pool never claims them."""
    make_jobs(db, "acme", 5)
    make_jobs(db, "beta", 5)
    default = Queue(db, POOLS, "d", scope=pools.resolve(POOLS).scope)
    acme = Queue(db, POOLS, "a", scope=pools.resolve(POOLS, "acme").scope)
    assert {j.tenant for j in drain(default, 20)} == {"beta"}
    got = drain(acme, 20)
    assert {j.tenant for j in got} == {"acme"} and len(got) == 5
    with db.transaction() as tx:
        rows = tx.raw("SELECT pool, count(*) AS n FROM processing_jobs GROUP BY pool")
    assert {r["pool"]: r["n"] for r in rows} == {"default": 5, "acme": 5}


def test_a_pool_of_kinds_claims_only_those(db: Database) -> None:
    """Pool ocr (kinds analyze-document) leaves a tenant's other kinds to the others."""
    make_jobs(db, "beta", 3)
    notify = tenant_job(db, "beta", JobKind.notify)
    ocr = Queue(db, POOLS, "o", scope=pools.resolve(POOLS, "ocr").scope)
    assert [j.kind for j in drain(ocr, 10)] == ["analyze-document"] * 3
    default = Queue(db, POOLS, "d", scope=pools.resolve(POOLS).scope)
    job = default.claim()
    assert job is not None and job.id == notify


def test_weight_two_gets_twice_the_starts_interleaved(db: Database) -> None:
    """Weights 2:1:1 give shares of 1/2, 1/4, 1/4 over 1,000 claims, within one claim, and
    the weight-2 tenant is never served three times in a row."""
    for t in ("a", "b", "c"):
        make_jobs(db, t, 600)
    limits(db, "a", weight=2)
    q = Queue(db, WorkerConfig(), "w1")
    order = [j.tenant for j in drain(q, 1000)]
    counts = Counter(order)
    assert abs(counts["a"] - 500) <= 1 and abs(counts["b"] - 250) <= 1
    assert abs(counts["c"] - 250) <= 1
    assert "aaa" not in "".join(order)


def test_weight_one_stays_one_job_per_tenant_per_round(db: Database) -> None:
    """With every weight 1, each round serves each waiting tenant once."""
    for t in ("a", "b", "c", "d"):
        make_jobs(db, t, 10)
    q = Queue(db, WorkerConfig(), "w1")
    order = [j.tenant for j in drain(q, 40)]
    for r in range(10):
        assert sorted(order[4 * r : 4 * r + 4]) == ["a", "b", "c", "d"]


def test_a_newcomer_starts_within_one_round_and_banks_no_credit(db: Database) -> None:
    """A tenant that waited idle (or is new) is served within one round and then takes
    turns: no burst for the time it had nothing queued."""
    make_jobs(db, "a", 200)
    make_jobs(db, "b", 200)
    limits(db, "a", weight=3)
    q = Queue(db, WorkerConfig(), "w1")
    drain(q, 100)
    make_jobs(db, "new", 50)
    after = [j.tenant for j in drain(q, 20)]
    # a round of weights 3+1+1 is five claims
    assert "new" in after[:5]
    assert after.count("new") <= 5  # its share (1/5) of 20, plus the one it starts with


def test_the_cap_is_enforced_by_the_claim_across_workers(db: Database) -> None:
    """max_running 2: eight claimers (any worker names) get two of the tenant's jobs and
    then the other tenants' jobs; a finished job frees a place."""
    make_jobs(db, "big", 50)
    for t in ("s1", "s2", "s3"):
        make_jobs(db, t, 5)
    limits(db, "big", cap=2)
    got = [Queue(db, WorkerConfig(), f"w{i}").claim() for i in range(8)]
    jobs = [j for j in got if j is not None]
    assert len(jobs) == 8
    assert Counter(j.tenant for j in jobs)["big"] == 2
    big = next(j for j in jobs if j.tenant == "big")
    assert Queue(db, WorkerConfig(), "w9").done(big)
    more = drain(Queue(db, WorkerConfig(), "w9"), 1)
    assert [j.tenant for j in more] in (["big"], ["s1"], ["s2"], ["s3"])


def test_at_its_cap_a_tenant_still_gets_its_short_jobs(db: Database) -> None:
    """A capped tenant's OCR waits, its webhook delivery and notification do not."""
    make_jobs(db, "big", 10)
    limits(db, "big", cap=1)
    q = Queue(db, WorkerConfig(), "w1")
    first = q.claim()
    assert first is not None and first.kind == "analyze-document"
    assert q.claim() is None  # capped: nothing else of big's long kinds
    short = tenant_job(db, "big", JobKind.provision_tenant)
    job = q.claim()
    assert job is not None and job.id == short


def test_the_short_lane_starts_a_short_job_behind_1000_ocr_jobs(db: Database) -> None:
    """Behind 1,000 queued OCR jobs of many tenants, the short lane's next claim is the
    provision-tenant job, and a short lane never takes an OCR job."""
    for i in range(10):
        make_jobs(db, f"t{i}", 100)
    short_scope = pools.resolve(WorkerConfig()).short_scope
    assert short_scope is not None
    lane = Queue(db, WorkerConfig(), "s", scope=short_scope)
    assert lane.claim() is None
    provision = tenant_job(db, "newco", JobKind.provision_tenant)
    job = lane.claim()
    assert job is not None and job.id == provision and job.kind == "provision-tenant"
    assert lane.claim() is None


def test_short_lanes_keep_their_own_serving_order(db: Database) -> None:
    """Short jobs served in the short lane do not use up a tenant's share of the OCR
    lanes: after the short lane served tenant a ten times, a and b still alternate."""
    make_jobs(db, "a", 10)
    make_jobs(db, "b", 10)
    for _ in range(10):
        tenant_job(db, "a", JobKind.notify)
    short_scope = pools.resolve(WorkerConfig()).short_scope
    assert short_scope is not None
    assert len(drain(Queue(db, WorkerConfig(), "s", scope=short_scope), 10)) == 10
    long = Queue(db, WorkerConfig(), "w", scope=pools.resolve(WorkerConfig()).scope)
    order = [j.tenant for j in drain(long, 6)]
    assert sorted(order[:2]) == ["a", "b"] and sorted(order[2:4]) == ["a", "b"]


def test_pool_lanes_from_the_config() -> None:
    """A pool's lanes: its workers for its kinds, then short lanes for its short kinds
    (none when it has no short kinds, or only short ones)."""
    default = pools.resolve(POOLS)
    assert [s.short for s in default.lane_scopes()] == [False, False, True]
    assert default.scope.exclude == ("acme",)
    acme = pools.resolve(POOLS, "acme")
    assert acme.scope.tenants == ("acme",) and acme.workers == 1
    assert pools.resolve(POOLS, "ocr").lane_scopes() == [pools.resolve(POOLS, "ocr").scope] * 2
    only_short = WorkerConfig(pools=[{"name": "fast", "kinds": ["notify"], "workers": 1}])
    assert len(pools.resolve(only_short, "fast").lane_scopes()) == 1


def test_instance_names_map_to_pools_and_metrics_ports() -> None:
    """ingestd-worker@N is the default pool; @NAME and @NAME-N a pool, each on a port of
    its own; an unknown name is a config error that names the pools."""
    assert pools.instance(POOLS, "2") == pools.Instance("default", 2, 2)
    assert pools.instance(POOLS, "acme") == pools.Instance("acme", 1, 10)
    assert pools.instance(POOLS, "acme-3") == pools.Instance("acme", 3, 12)
    assert pools.instance(POOLS, "ocr") == pools.Instance("ocr", 1, 20)
    from ingestd.errors import ConfigError

    with pytest.raises(ConfigError, match="acme, default, ocr"):
        pools.instance(POOLS, "acne")


def test_tenant_limits_on_the_command_line(make_env: Any, db: Database) -> None:
    """`tenant limits` sets weight and cap, `--no-max-running` removes the cap, `tenant
    list` shows both; a weight out of range is refused with exit 2."""
    env = make_env()
    make_jobs(db, "acme", 1)
    out = run_cli(env, "tenant", "limits", "acme", "--weight", "3", "--max-running", "2")
    assert out.returncode == 0, out.stderr
    assert "weight 3, max running 2" in out.stdout
    listed = run_cli(env, "tenant", "list", "--json")
    row = next(r for r in json.loads(listed.stdout) if r["name"] == "acme")
    assert (row["weight"], row["max_running"]) == (3, 2)
    out = run_cli(env, "tenant", "limits", "acme", "--no-max-running")
    assert "weight 3, max running no cap" in out.stdout
    bad = run_cli(env, "tenant", "limits", "acme", "--weight", "0")
    assert bad.returncode == 2 and "from 1 to 100" in bad.stderr
    missing = run_cli(env, "tenant", "limits", "nope", "--weight", "2")
    assert missing.returncode != 0 and "nope" in (missing.stderr + missing.stdout)
