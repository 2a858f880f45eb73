"""bench/queue.py's speed scenarios: 1. throughput (ingestd, pgqueuer, the FIFO claim,
real ``ingestd worker --drain`` processes) and 2. claim latency against the backlog."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import BenchError, median
from bench._queue_harness import (
    FIFO_INDEX,
    INGESTD,
    KIND,
    PLUGIN,
    ROOT,
    RUN_TIMEOUT,
    SMALL_TENANT_JOBS,
    SMALL_TENANTS,
    START_TIMEOUT,
    WORKERS,
    Bench,
    Plan,
    load,
    order,
    pct,
    tenants,
)
from bench._queue_workers import processes, worker_argvs
from ingestd.config.settings import WorkerConfig
from ingestd.db import sql
from ingestd.db.database import Database
from ingestd.queue.claims import Job, Queue
from ingestd.queue.enqueue import enqueue
from ingestd.queue.pools import EVERYTHING


def throughput_queue(bench: Bench, plan: Plan, mode: str, rnd: int) -> dict[str, Any]:
    """``mode`` ingestd (10 tenants) or fifo (the same jobs, plain FIFO claim)."""
    name = f"tp_{mode}_{rnd}"
    conninfo = bench.fresh(name)
    per = [plan.jobs // plan.tenants + (i < plan.jobs % plan.tenants) for i in range(plan.tenants)]
    load(conninfo, list(zip(tenants(plan.tenants), per, strict=True)), "interleaved")
    if mode == "fifo":
        bench.one(conninfo, FIFO_INDEX)
    with processes(worker_argvs(conninfo, mode, None, name), bench.work, name) as procs:
        start = procs.go()
        results = procs.results()
    row = bench.one(
        conninfo,
        "SELECT count(*) AS n, extract(epoch FROM max(finished_at))::float8 "
        "AS last FROM processing_jobs WHERE status = 'done'",
    )
    bench.drop(name)
    if row["n"] != plan.jobs:
        raise BenchError(f"{mode}: {row['n']} of {plan.jobs} jobs done")
    return {"rate": plan.jobs / (row["last"] - start), "empty": sum(r["empty"] for r in results)}


def throughput_pgq(bench: Bench, plan: Plan, batch: int, rnd: int) -> dict[str, Any]:
    assert bench.pgq_python is not None
    name = f"tp_pgq{batch}_{rnd}"
    conninfo = bench.fresh(name, schema=False)
    helper = bench.work / "pgq_helper.py"
    res = subprocess.run(
        [str(bench.pgq_python), str(helper), "setup", conninfo, str(plan.jobs), KIND],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    if res.returncode != 0:
        raise BenchError(f"pgqueuer setup failed:\n{res.stdout}{res.stderr}")
    bench.pgq_version = json.loads(res.stdout.strip().splitlines()[-1])["version"]
    argvs = [
        [str(bench.pgq_python), str(helper), "consume", conninfo, str(batch), KIND]
        for _ in range(WORKERS)
    ]
    with processes(argvs, bench.work, name) as procs:
        start = procs.go()
        procs.results()
    row = bench.one(
        conninfo,
        "SELECT count(*) AS n, extract(epoch FROM max(created))::float8 "
        "AS last FROM pgqueuer_log WHERE status = 'successful'",
    )
    left = bench.one(conninfo, "SELECT count(*) AS n FROM pgqueuer")["n"]
    bench.drop(name)
    if row["n"] != plan.jobs or left:
        raise BenchError(f"pgqueuer: {row['n']} of {plan.jobs} jobs successful, {left} left")
    return {"rate": plan.jobs / (row["last"] - start), "empty": 0}


PLUGIN_SOURCE = f'''"""bench/queue.py's no-op job kind, for `ingestd worker --plugin {PLUGIN}`."""
from worker.jobs import register


@register("{KIND}")
def noop(ctx):
    return None
'''
# Backends of this database waiting for a lock: the workers held at the gate (the one whose
# claim holds the claim's turn, on queue_clocks, the others on that turn-taking advisory
# lock).
GATE_WAITERS = """
SELECT count(*) AS n FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


def runner_available() -> bool:
    return (ROOT / "worker" / "runner.py").exists() and Path(INGESTD).exists()


def throughput_runner(bench: Bench, plan: Plan, rnd: int) -> dict[str, Any]:
    """4 real ``ingestd worker --drain`` processes (each job runs in the worker's child).

    The start gate: an EXCLUSIVE lock on queue_clocks (every successful claim upserts its
    share's row there, migration 0014; the claim only reads queue_tenants), held until 4
    of the workers' lanes wait in their first claim (one on queue_clocks, the others on the
    claim's advisory lock, behind it); the rate runs from its release to the last
    completion.
    """
    name = f"tp_runner_{rnd}"
    conninfo = bench.fresh(name)
    per = [plan.jobs // plan.tenants + (i < plan.jobs % plan.tenants) for i in range(plan.tenants)]
    load(conninfo, list(zip(tenants(plan.tenants), per, strict=True)), "interleaved")
    (bench.work / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    config = bench.work / f"{name}.toml"
    config.write_text(
        f"[database]\nurl = {json.dumps(conninfo)}\n[paths]\n"
        + "".join(
            f"{k} = {json.dumps(str(bench.work / name / k))}\n"
            for k in ("state_dir", "archive", "derived", "spool")
        )
        + '[log]\nformat = "json"\nlevel = "warning"\n'
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bench.work), str(ROOT)])}
    procs: list[subprocess.Popen[bytes]] = []
    logs = [bench.work / f"{name}-{i}.log" for i in range(WORKERS)]
    try:
        with Database(conninfo, max_size=2) as db, db.transaction() as gate:
            gate.raw("LOCK TABLE queue_clocks IN EXCLUSIVE MODE")
            for i, path in enumerate(logs):
                with open(path, "wb") as out:
                    procs.append(
                        subprocess.Popen(
                            [
                                INGESTD,
                                "--config",
                                str(config),
                                "worker",
                                "--drain",
                                "--plugin",
                                PLUGIN,
                                "--worker-id",
                                f"{name}-w{i}",
                            ],
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            env=env,
                            cwd=bench.work,
                        )
                    )
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                with db.transaction() as tx:
                    if tx.raw(GATE_WAITERS)[0]["n"] >= WORKERS:
                        break
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise BenchError(
                        f"ingestd worker: not all {WORKERS} claiming after "
                        f"{START_TIMEOUT:.0f} s:\n"
                        f"{logs[0].read_text(errors='replace')[-3000:]}"
                    )
                time.sleep(0.05)
            start = time.time()
        # Leaving the block COMMITs: the gate opens.
        deadline = time.monotonic() + RUN_TIMEOUT
        for i, p in enumerate(procs):
            try:
                code = p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise BenchError(
                    f"ingestd worker {i}: still running after {RUN_TIMEOUT:.0f} s"
                ) from None
            if code != 0:
                raise BenchError(
                    f"ingestd worker {i} exited {code}:\n"
                    f"{logs[i].read_text(errors='replace')[-3000:]}"
                )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    row = bench.one(
        conninfo,
        "SELECT count(*) AS n, extract(epoch FROM max(finished_at))::float8 "
        "AS last FROM processing_jobs WHERE status = 'done'",
    )
    bench.drop(name)
    if row["n"] != plan.jobs:
        raise BenchError(f"ingestd worker: {row['n']} of {plan.jobs} jobs done")
    lines = [line for path in logs for line in path.read_text(errors="replace").splitlines()]
    return {
        "rate": plan.jobs / (row["last"] - start),
        "empty": 0,
        "log_lines": len(lines),
        "log_tail": "\n".join(lines[-5:]),
    }


# -- 2. claim latency -------------------------------------------------------------------
def claim_buffers(db: Database, worker: str) -> dict[str, int]:
    """EXPLAIN (ANALYZE, BUFFERS) of one job_claim, rolled back: buffers hit and read."""
    statement = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql.query("job_claim")
    params = {
        "worker": worker,
        "lease": WorkerConfig().lease_seconds,
        "tenant_cap": None,
        **EVERYTHING.params(),
    }
    with contextlib.suppress(_Rollback), db.transaction() as tx:
        plan = tx.raw(statement, params)[0]["QUERY PLAN"][0]["Plan"]
        raise _Rollback
    return {"hit": int(plan["Shared Hit Blocks"]), "read": int(plan["Shared Read Blocks"])}


class _Rollback(Exception):
    pass


LAT_TIMES = (
    "SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables WHERE relname = 'processing_jobs'"
)


def latency(bench: Bench, plan: Plan) -> dict[int, dict[str, Any]]:
    """Both backlogs loaded, then claims alternate between them (same cluster state)."""
    small = [(f"s{i}", SMALL_TENANT_JOBS) for i in range(SMALL_TENANTS)]
    conninfos = {}
    for size in plan.backlogs:
        conninfos[size] = bench.fresh(f"lat_{size}")
        t0 = time.monotonic()
        load(
            conninfos[size], [("big", size - SMALL_TENANTS * SMALL_TENANT_JOBS), *small], "shuffled"
        )
        print(f"latency: {size:,} jobs loaded in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    out: dict[int, dict[str, Any]] = {size: {"times": []} for size in plan.backlogs}
    with contextlib.ExitStack() as stack:
        queues = {
            size: Queue(stack.enter_context(Database(c, max_size=1)), WorkerConfig(), "lat")
            for size, c in conninfos.items()
        }
        for _ in range(plan.warmup):
            for q in queues.values():
                timed_claim(q)
        for size, q in queues.items():
            out[size]["buffers_before"] = claim_buffers(q.db, "lat")
        for i in range(plan.claims):
            for size in order(list(plan.backlogs), i):
                out[size]["times"].append(timed_claim(queues[size]))
        for size, q in queues.items():
            out[size]["buffers_after"] = claim_buffers(q.db, "lat")
            with q.db.transaction() as tx:
                n = tx.raw("SELECT count(*) AS n FROM processing_jobs WHERE status = 'queued'")
            if n[0]["n"] != size:
                raise BenchError(f"latency: backlog {n[0]['n']}, expected {size}")
    for res in out.values():
        times = res["times"]
        res |= {"p50": median(times) * 1000, "p95": pct(times, 0.95) * 1000}
    # Churn: 4 workers claim (and finish) jobs of the large backlog, leaving one dead entry
    # per claim at the head of the tenant's range in the ready index until VACUUM.
    hi = plan.backlogs[1]
    tag = "lat_churn"
    quota = plan.churn // WORKERS
    with processes(worker_argvs(conninfos[hi], "ingestd", quota, tag), bench.work, tag) as p:
        p.go()
        p.results()
    with Database(conninfos[hi], max_size=1) as db:
        q = Queue(db, WorkerConfig(), "lat")
        for _ in range(plan.warmup):
            timed_claim(q)
        times = [timed_claim(q) for _ in range(plan.claims)]
        buffers = claim_buffers(db, "lat")
        with db.transaction() as tx:
            stats = tx.raw(LAT_TIMES)[0]
    out[hi]["churn"] = {
        "p50": median(times) * 1000,
        "p95": pct(times, 0.95) * 1000,
        "buffers": buffers,
        "dead": stats["n_dead_tup"],
        "autovacuums": stats["autovacuum_count"],
    }
    for size in plan.backlogs:
        bench.drop(f"lat_{size}")
    return out


def timed_claim(queue: Queue) -> float:
    """Seconds for one claim (claim + commit); then done and requeued, untimed."""
    t = time.perf_counter()
    job = queue.claim()
    dt = time.perf_counter() - t
    if job is None:
        raise BenchError("latency: no job to claim")
    requeue(queue.db, queue, job)
    return dt


def requeue(db: Database, queue: Queue, job: Job) -> None:
    """Done, and the same document queued again: the backlog keeps its size (not timed)."""
    queue.done(job)
    with db.transaction() as tx:
        enqueue(tx, tenant_id=job.tenant_id, document_id=job.document_id, kind=KIND)
