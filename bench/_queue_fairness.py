"""bench/queue.py's fairness scenarios: 3. fairness under saturation, 4. the newcomer's
wait, 5. weighted shares, 6. caps, 7. the short lane."""

from __future__ import annotations

import random
import time
from typing import Any

from bench._common import BenchError, median
from bench._queue_harness import (
    CAP,
    CAP_HOLD,
    CAP_TENANTS,
    CAP_WEIGHT,
    CAP_WORKERS,
    FIFO_INDEX,
    KIND,
    LANE_GAP,
    LANE_TENANTS,
    LONG_HOLD,
    LONG_KIND,
    POLL,
    RUN_TIMEOUT,
    WEIGHTS,
    WORKERS,
    Bench,
    Plan,
    add_job,
    jain,
    load,
    order,
    tenants,
)
from bench._queue_workers import Procs, processes, worker_argvs
from ingestd.db.database import Database
from ingestd.jobkinds import JobKind
from ingestd.queue.enqueue import enqueue

# -- 3. fairness ------------------------------------------------------------------------
FAIR_TENANTS = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
PER_TENANT = """
SELECT t.name, count(*) FILTER (WHERE j.status <> 'queued') AS claimed,
       count(*) FILTER (WHERE j.status = 'queued') AS queued
FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id GROUP BY t.name ORDER BY t.name
"""


def fairness(bench: Bench, plan: Plan, rnd: int) -> dict[str, dict[str, Any]]:
    a, b, rest = plan.fair
    spec = [("a", a), ("b", b), *((t, rest) for t in FAIR_TENANTS[2:])]
    names = {"ingestd": f"fair_ingestd_{rnd}", "fifo": f"fair_fifo_{rnd}"}
    dbs = {"ingestd": bench.fresh(names["ingestd"])}
    load(dbs["ingestd"], spec, "shuffled")
    dbs["fifo"] = bench.copy(names["ingestd"], names["fifo"])
    bench.one(dbs["fifo"], FIFO_INDEX)
    quota = plan.fair_claims // WORKERS
    out = {}
    for mode in order(["ingestd", "fifo"], rnd):
        tag = f"fair_{mode}_{rnd}"
        with processes(worker_argvs(dbs[mode], mode, quota, tag), bench.work, tag) as procs:
            procs.go()
            procs.results()
        with Database(dbs[mode]) as db, db.transaction() as tx:
            rows = tx.raw(PER_TENANT)
        claimed = [int(r["claimed"]) for r in rows]
        out[mode] = {
            "jain": jain(claimed),
            "claimed": claimed,
            "min_queued": min(int(r["queued"]) for r in rows),
        }
    for name in names.values():
        bench.drop(name)
    return out


# -- 4. newcomer ------------------------------------------------------------------------
def newcomer(bench: Bench, plan: Plan, rnd: int) -> dict[str, dict[str, Any]]:
    names = {"ingestd": f"new_ingestd_{rnd}", "fifo": f"new_fifo_{rnd}"}
    dbs = {"ingestd": bench.fresh(names["ingestd"])}
    load(dbs["ingestd"], [("a", plan.newcomer_backlog)], "sequential")
    with Database(dbs["ingestd"]) as db, db.transaction() as tx:
        tx.raw("INSERT INTO tenants (name, status) VALUES ('k', 'active')")
    dbs["fifo"] = bench.copy(names["ingestd"], names["fifo"])
    bench.one(dbs["fifo"], FIFO_INDEX)
    out = {}
    for mode in order(["ingestd", "fifo"], rnd):
        tag = f"new_{mode}_{rnd}"
        argvs = worker_argvs(dbs[mode], mode, None, tag, log=True)
        with Database(dbs[mode], max_size=1) as db, processes(argvs, bench.work, tag) as procs:
            out[mode] = newcomer_run(db, plan, procs)
    for name in names.values():
        bench.drop(name)
    return out


def newcomer_run(db: Database, plan: Plan, procs: Procs) -> dict[str, Any]:
    def claimed() -> int:
        with db.transaction() as tx:
            q = "SELECT count(*) AS n FROM processing_jobs WHERE status <> 'queued'"
            return int(tx.raw(q)[0]["n"])

    procs.go()
    deadline = time.monotonic() + RUN_TIMEOUT
    while claimed() < plan.newcomer_after:
        if time.monotonic() > deadline:
            raise BenchError("newcomer: workers too slow")
        time.sleep(POLL)
    # Claim times come from the workers (when each claim returned): the claim's started_at
    # is its transaction's start, which can precede the job's COMMIT when the claim waited
    # for its turn (ingestd_claim's advisory lock).
    before_commit = time.time()
    with db.transaction() as tx:
        job_id = add_job(tx, "k", "newcomer")
    committed = time.time()
    started = None
    while started is None and time.monotonic() < deadline:
        with db.transaction() as tx:
            started = tx.raw(
                "SELECT started_at FROM processing_jobs WHERE id = %(id)s", {"id": job_id}
            )[0]["started_at"]
        if started is None:
            time.sleep(POLL)
    procs.stop()
    results = procs.results()
    if started is None:
        raise BenchError(f"newcomer: K's job not started after {RUN_TIMEOUT:.0f} s")
    log = sorted((t, j) for r in results for t, j in r["log"])
    at = next((t for t, j in log if j == job_id), None)
    if at is None:
        raise BenchError("newcomer: K's job started, but no worker logged its claim")
    before = sum(1 for t, j in log if committed <= t < at and j != job_id)
    return {
        "claims": before,
        "ms": (at - before_commit) * 1000,
        "empty": sum(r["empty"] for r in results),
    }


# -- 5. weighted shares -----------------------------------------------------------------
# Each tenant's claims among the first n (the claims' started_at order).
FIRST_CLAIMS = """
SELECT t.name, j.tenant_id FROM (
    SELECT tenant_id, started_at, id FROM processing_jobs WHERE started_at IS NOT NULL
    ORDER BY started_at, id LIMIT %(n)s) AS j
JOIN tenants t ON t.id = j.tenant_id ORDER BY j.started_at, j.id
"""


def set_limits(conninfo: str, name: str, weight: int | None, max_running: int | None) -> None:
    """A tenant's weight and cap, as `ingestd tenant limits` sets them (tenant_limits_set)."""
    with Database(conninfo, max_size=1) as db, db.transaction() as tx:
        row = tx.one(
            "tenant_limits_set",
            {
                "name": name,
                "weight": weight,
                "max_running": max_running,
                "uncap": max_running is None,
            },
        )
    if row is None:
        raise BenchError(f"no tenant {name!r} to set limits for")


def weights(bench: Bench, plan: Plan, rnd: int) -> dict[str, dict[str, Any]]:
    """A weight 2, B and C weight 1, all backlogged; ingestd and FIFO on the same data."""
    n = plan.weight_claims
    names = {"ingestd": f"w_ingestd_{rnd}", "fifo": f"w_fifo_{rnd}"}
    dbs = {"ingestd": bench.fresh(names["ingestd"])}
    # Each tenant could take every claim: all stay backlogged whatever the shares.
    load(dbs["ingestd"], [(t, n) for t in WEIGHTS], "interleaved")
    for tenant, weight in WEIGHTS.items():
        set_limits(dbs["ingestd"], tenant, weight, None)
    dbs["fifo"] = bench.copy(names["ingestd"], names["fifo"])
    bench.one(dbs["fifo"], FIFO_INDEX)
    out: dict[str, dict[str, Any]] = {}
    for mode in order(["ingestd", "fifo"], rnd):
        tag = f"w_{mode}_{rnd}"
        with processes(worker_argvs(dbs[mode], mode, n // WORKERS, tag), bench.work, tag) as p:
            p.go()
            p.results()
        with Database(dbs[mode], max_size=1) as db, db.transaction() as tx:
            claims = [r["name"] for r in tx.raw(FIRST_CLAIMS, {"n": n})]
        if len(claims) != n:
            raise BenchError(f"weights {mode}: {len(claims)} of {n} claims")
        out[mode] = {
            "share": {t: claims.count(t) / n for t in WEIGHTS},
            "first": "".join(claims[:24]),
        }
    for name in names.values():
        bench.drop(name)
    total = sum(WEIGHTS.values())
    for res in out.values():
        res["error"] = max(
            abs(res["share"][t] - w / total) / (w / total) for t, w in WEIGHTS.items()
        )
    return out


# -- 6. caps ----------------------------------------------------------------------------
CAP_SAMPLE = """
SELECT count(*) FILTER (WHERE tenant_id = %(a)s) AS a, count(*) AS n,
       (SELECT count(*) FROM processing_jobs WHERE status = 'done') AS done
FROM processing_jobs WHERE status = 'processing'
"""


def caps(bench: Bench, plan: Plan, rnd: int) -> dict[str, dict[str, Any]]:
    """A capped at CAP (weight CAP_WEIGHT) among B..D; baseline: the same without the cap."""
    a, rest = plan.cap_backlogs
    names = {"capped": f"cap_on_{rnd}", "uncapped": f"cap_off_{rnd}"}
    dbs = {"capped": bench.fresh(names["capped"])}
    load(dbs["capped"], [("a", a), *((t, rest) for t in CAP_TENANTS[1:])], "shuffled")
    set_limits(dbs["capped"], "a", CAP_WEIGHT, None)
    dbs["uncapped"] = bench.copy(names["capped"], names["uncapped"])
    set_limits(dbs["capped"], "a", CAP_WEIGHT, CAP)
    quota = plan.cap_claims // CAP_WORKERS
    out: dict[str, dict[str, Any]] = {}
    for mode in order(["capped", "uncapped"], rnd):
        tag = f"cap_{mode}_{rnd}"
        argvs = worker_argvs(
            dbs[mode], "ingestd", quota, tag, n=CAP_WORKERS, hold={KIND: [CAP_HOLD, CAP_HOLD]}
        )
        with Database(dbs[mode], max_size=1) as db, processes(argvs, bench.work, tag) as procs:
            out[mode] = caps_run(db, procs, quota * CAP_WORKERS)
        with Database(dbs[mode], max_size=1) as db, db.transaction() as tx:
            rows = tx.raw(PER_TENANT)
        out[mode]["claimed"] = [int(r["claimed"]) for r in rows]
        out[mode]["min_queued"] = min(int(r["queued"]) for r in rows)
    for name in names.values():
        bench.drop(name)
    return out


def caps_run(db: Database, procs: Procs, total: int) -> dict[str, Any]:
    """Samples (A running, all running) every POLL until ``total`` jobs are done."""
    with db.transaction() as tx:
        a_id = tx.raw("SELECT id FROM tenants WHERE name = 'a'")[0]["id"]
    samples: list[tuple[int, int, int]] = []  # (A running, all running, done)
    procs.go()
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        with db.autocommit() as tx:
            r = tx.raw(CAP_SAMPLE, {"a": a_id})[0]
        samples.append((int(r["a"]), int(r["n"]), int(r["done"])))
        if r["done"] >= total:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"caps: {r['done']} of {total} jobs done after {RUN_TIMEOUT:.0f} s")
        time.sleep(POLL)
    results = procs.results()
    # Means over the steady part: after the first 5 % and before the last 10 % of the jobs
    # (the workers start one by one and end as their quotas run out).
    steady = [s for s in samples if 0.05 * total <= s[2] < 0.9 * total] or samples
    return {
        "max_a": max(s[0] for s in samples),
        "mean_a": sum(s[0] for s in steady) / len(steady),
        "mean_all": sum(s[1] for s in steady) / len(steady),
        "max_all": max(s[1] for s in samples),
        "samples": len(samples),
        "empty": sum(res["empty"] for res in results),
    }


# -- 7. lanes ---------------------------------------------------------------------------
LONG_BUSY = """
SELECT count(*) AS n FROM processing_jobs WHERE status = 'processing' AND kind = %(kind)s
"""
PROBE_STARTED = "SELECT started_at, worker_id FROM processing_jobs WHERE id = %(id)s"


def lanes(bench: Bench, plan: Plan, rnd: int) -> dict[str, dict[str, Any]]:
    """Long jobs on WORKERS long lanes, with and without a short lane beside them."""
    names = {"short": f"lanes_short_{rnd}", "none": f"lanes_none_{rnd}"}
    dbs = {"short": bench.fresh(names["short"])}
    n = plan.lane_jobs
    per = [n // LANE_TENANTS + (i < n % LANE_TENANTS) for i in range(LANE_TENANTS)]
    load(
        dbs["short"],
        list(zip(tenants(LANE_TENANTS, "l"), per, strict=True)),
        "shuffled",
        kind=LONG_KIND,
    )
    dbs["none"] = bench.copy(names["short"], names["none"])
    out: dict[str, dict[str, Any]] = {}
    for mode in order(["short", "none"], rnd):
        tag = f"lanes_{mode}_{rnd}"
        argvs = worker_argvs(dbs[mode], "ingestd", None, tag, hold={LONG_KIND: list(LONG_HOLD)})
        if mode == "short":
            argvs += worker_argvs(
                dbs[mode],
                "ingestd",
                None,
                f"{tag}-short",
                n=1,
                lane="short",
                idle=0.25,
                listen=True,
            )
        with Database(dbs[mode], max_size=1) as db, processes(argvs, bench.work, tag) as procs:
            out[mode] = lanes_run(db, plan, procs, random.Random(rnd))
        with Database(dbs[mode], max_size=1) as db, db.transaction() as tx:
            left = tx.raw(
                "SELECT count(*) AS n FROM processing_jobs WHERE status = 'queued' "
                "AND kind = %(kind)s",
                {"kind": LONG_KIND},
            )[0]["n"]
        out[mode]["long_queued"] = int(left)
    for name in names.values():
        bench.drop(name)
    return out


def lanes_run(db: Database, plan: Plan, procs: Procs, rng: random.Random) -> dict[str, Any]:
    """Probes: a new tenant's provision-tenant job whenever every long lane is busy."""
    procs.go()
    deadline = time.monotonic() + RUN_TIMEOUT
    # The lanes start their first long jobs together: let them drift apart first.
    time.sleep(LONG_HOLD[1])
    delays: list[float] = []
    commits: list[float] = []
    by_short = 0
    for i in range(plan.lane_probes):
        while True:
            with db.autocommit() as tx:
                busy = tx.raw(LONG_BUSY, {"kind": LONG_KIND})[0]["n"]
            if busy >= WORKERS:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"lanes: only {busy} of {WORKERS} long lanes busy")
            time.sleep(POLL / 5)
        with db.transaction() as tx:
            # Visible as soon as its commit record is written, not after the WAL flush: the
            # delay measured is the queue's, not the disk's.
            tx.raw("SET LOCAL synchronous_commit = off")
            tenant = tx.raw(
                "INSERT INTO tenants (name, status) VALUES (%(name)s, 'creating') RETURNING id",
                {"name": f"new{i}"},
            )[0]["id"]
            job_id = enqueue(tx, tenant_id=tenant, kind=JobKind.provision_tenant)
            # The transaction's last statement: the COMMIT follows at once.
            before = tx.raw("SELECT clock_timestamp() AS t")[0]["t"]
        with db.autocommit() as tx:
            after = tx.raw("SELECT clock_timestamp() AS t")[0]["t"]
        commits.append((after - before).total_seconds() * 1000)
        while True:
            with db.autocommit() as tx:
                row = tx.raw(PROBE_STARTED, {"id": job_id})[0]
            if row["started_at"] is not None:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"lanes: provision-tenant job not started after {RUN_TIMEOUT} s")
            time.sleep(POLL / 5)
        delays.append((row["started_at"] - before).total_seconds() * 1000)
        by_short += row["worker_id"].endswith("-short-w0")
        time.sleep(rng.uniform(*LANE_GAP))
    procs.stop()
    results = procs.results()
    return {
        "delays": delays,
        "p50": median(delays),
        "max": max(delays),
        "commit_ms": median(commits),
        "by_short": by_short,
        "empty": sum(r["empty"] for r in results),
    }
