"""Job queue: ingestd's tenant-fair claim next to pgqueuer and a plain FIFO, in one run.

Everything runs on one durable embedded PostgreSQL (fsync on), a fresh database per
scenario and round; jobs are no-ops, so the queue itself is what is measured. Loaded jobs
arrive 1 ms apart (distinct timestamps, as if enqueued one by one).

1. Throughput, 4 worker processes, N jobs: jobs/s from the start signal to the last
   completion (its database timestamp). ingestd: each process loops ``Queue.claim()`` +
   ``Queue.done()`` (ingestd/queue/claims.py, WorkerConfig defaults), the N jobs spread round-robin
   over 10 tenants. pgqueuer, installed into its own venv (never into the project):
   its schema in a database of its own, N jobs enqueued in batches of 1,000, 4 consumer
   processes ``QueueManager.run(mode=drain)`` with a no-op entrypoint, at its default
   batch_size (10) and at 1 (one job per dequeue, as ingestd claims). A third baseline
   is a plain FIFO claim (``ORDER BY id ... FOR UPDATE SKIP LOCKED LIMIT 1``) doing the same
   job and document updates as ingestd on the same schema, its claim committed as ingestd
   commits its claim (synchronous_commit off): what fairness costs. If
   worker/runner.py exists, also 4 real ``ingestd worker --drain`` processes with a no-op
   plugin kind (each job runs in the worker's child process).
2. Claim latency vs backlog: one client, ``Queue.claim()`` (claim + commit) timed; each
   claimed job is marked done and one job is enqueued again, so the backlog keeps its size.
   1,000 vs 1,000,000 queued jobs (one big tenant plus 4 small ones of 100 jobs), claims
   alternating between the two. Then 4 workers claim 20,000 jobs of the large backlog
   (each leaves a dead entry in the ready index until VACUUM) and it is measured again.
3. Fairness under saturation: backlogs A 20,000, B 2,000, C..J 200 each (arrival order
   shuffled); 4 workers claim 1,000 jobs in all, so every tenant stays backlogged. Jain's
   index over the claims per tenant; baseline: the FIFO claim on a copy of the same data.
4. Newcomer wait: 4 workers on A's 20,000 backlog; after 1,000 claims tenant K enqueues one
   job: the claims (and ms) from its COMMIT until it starts; baseline: FIFO on a copy.
5. Weighted shares: tenants A (weight 2), B and C (weight 1) with 3,000 no-op jobs each,
   arrival interleaved A B C A B C ...; 4 workers claim 3,000 jobs in all (600 in
   --small), so all three stay backlogged. Each tenant's share of those claims (in
   started_at order) against its configured share w / sum(w) (1/2, 1/4, 1/4), and the
   largest relative error; baseline: the FIFO claim on a copy, which shares by arrival.
6. Caps: tenant A with max_running 2 and weight 4 (uncapped it would hold 4/7 of the
   workers, so the cap binds) and 5,000 jobs, B..D 2,000 each; 8 worker processes, each
   job held 20 ms between claim and done, 2,400 claims (480 in --small). The parent
   samples the running jobs every 5 ms: A's largest and mean count, and all tenants'
   mean (the other workers kept serving B..D); baseline: the same data without the cap.
7. Lanes: 1,000 analyze-document jobs of 4 tenants queued, each held 100..300 ms, on 4
   long-lane processes (the default pool's scope, every kind) plus 1 process on the
   default pool's short lane (its short_scope; idle, it waits for NOTIFY ingestd_jobs as
   a real lane does). Whenever all 4 long lanes are busy, a new tenant's
   provision-tenant job is enqueued: the ms from its COMMIT (the inserting transaction's
   last clock_timestamp(); it commits with synchronous_commit off, so the job is visible
   then, not after a WAL flush) to its started_at, 12 times (6 in --small), 0..150 ms
   apart. Baseline: the same without the short lane (0003's single pool): the job waits
   for a long one to end (and is then served first: its tenant is new).

    .venv/bin/python bench/queue.py [--jobs 20000] [--rounds 3] [--backlog 1000000]
                                    [--claims 500] [--small]
                                    [--only throughput|latency|fairness|newcomer|
                                            weights|caps|lanes]
                                    [--no-pgqueuer] [--no-runner]
                                    [--pgq-venv .bench/venv-pgqueuer]

The pgqueuer venv is created on first use (``pip install pgqueuer psycopg[binary]`` from
PyPI) and reused; ``make clean`` removes it with .bench/.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file shares its name with the stdlib module ``queue`` (psycopg, concurrent.futures
# import it): move its directory, which ``python bench/queue.py`` puts first, to the end.
sys.path.sort(key=lambda p: Path(p or ".").resolve() == Path(__file__).resolve().parent)
# The project root, not bench/: bench/queue.py would otherwise shadow the stdlib's queue.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time

from bench._common import bench_cluster, print_table, run_main
from bench._queue_harness import (
    CAP_WORKERS,
    FULL,
    PGQ_HELPER,
    ROOT,
    SMALL,
    SMALL_TENANT_JOBS,
    SMALL_TENANTS,
    WORKERS,
    Bench,
    Plan,
    pgq_venv,
)
from bench._queue_rows import (
    Row,
    run_caps,
    run_fairness,
    run_lanes,
    run_latency,
    run_newcomer,
    run_throughput,
    run_weights,
)
from bench._queue_workers import worker_main

SCENARIOS = ("throughput", "latency", "fairness", "newcomer", "weights", "caps", "lanes")
RUNS = {
    "throughput": run_throughput,
    "latency": run_latency,
    "fairness": run_fairness,
    "newcomer": run_newcomer,
    "weights": run_weights,
    "caps": run_caps,
    "lanes": run_lanes,
}


def run(args: argparse.Namespace, plan: Plan, bench: Bench) -> tuple[list[Row], list[str]]:
    """The chosen scenarios (every one unless --only), in this order: their rows and
    goal lines."""
    rows: list[Row] = []
    goals: list[str] = []
    for name in SCENARIOS:
        if args.only in (None, name):
            rows += RUNS[name](args, plan, bench, goals)
    return rows, goals


# -- main -------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=None, help="throughput: jobs per run (20,000)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of every scenario but latency (its claims alternate backlogs instead)",
    )
    ap.add_argument(
        "--backlog",
        type=int,
        default=None,
        help="latency: the large backlog (1,000,000; the small one is 1,000)",
    )
    ap.add_argument("--claims", type=int, default=None, help="latency: measured claims (500)")
    ap.add_argument(
        "--small",
        action="store_true",
        help="quick smoke run: 2,000 jobs, backlog 10,000, smaller fairness data, fewer claims "
        "(weights 600, caps 480) and lane probes (6)",
    )
    ap.add_argument("--only", choices=SCENARIOS, default=None)
    ap.add_argument("--no-pgqueuer", action="store_true", help="skip the pgqueuer baseline")
    ap.add_argument(
        "--pgq-venv",
        type=Path,
        default=ROOT / ".bench" / "venv-pgqueuer",
        help="venv for pgqueuer, created (pip install) if missing",
    )
    ap.add_argument(
        "--no-runner",
        dest="runner",
        action="store_false",
        help="skip the row for real `ingestd worker` processes",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker_main(json.loads(args.worker))
        return
    plan = SMALL if args.small else FULL
    plan = Plan(
        **{
            **plan.__dict__,
            **({"jobs": args.jobs} if args.jobs else {}),
            **({"claims": args.claims} if args.claims else {}),
            **({"backlogs": (plan.backlogs[0], args.backlog)} if args.backlog else {}),
        }
    )
    if args.rounds < 1 or plan.jobs < plan.tenants or plan.claims < 50:
        ap.error("need --rounds >= 1, --jobs >= 10 and --claims >= 50")
    if plan.backlogs[1] <= SMALL_TENANTS * SMALL_TENANT_JOBS:
        ap.error(f"--backlog must exceed {SMALL_TENANTS * SMALL_TENANT_JOBS}")

    pgq_python = None
    if not args.no_pgqueuer and args.only in (None, "throughput"):
        pgq_python = pgq_venv(args.pgq_venv.absolute())
    with contextlib.ExitStack() as stack:
        work = Path(
            tempfile.mkdtemp(prefix="ingestd-bench-queue-", dir=os.environ.get("BENCH_DIR"))
        )
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        (work / "pgq_helper.py").write_text(PGQ_HELPER)
        cluster = stack.enter_context(bench_cluster())
        bench = Bench(cluster, work, pgq_python)
        pg_version = bench.one(cluster.conninfo_for("postgres"), "SHOW server_version")
        load_before = os.getloadavg()[0]
        t0 = time.monotonic()
        rows, notes = run(args, plan, bench)
        load_after = os.getloadavg()[0]

    mode = "--small" if args.small else "full"
    print(
        f"\nqueue benchmark ({mode}): {os.cpu_count()} cores, PostgreSQL "
        f"{pg_version['server_version']} (durable embedded cluster, fsync on), pgqueuer "
        f"{bench.pgq_version} (psycopg driver, durable tables); {WORKERS} worker processes "
        f"({CAP_WORKERS} for caps, {WORKERS} + 1 short lane for lanes); "
        "claims (ingestd and FIFO) autocommitted with synchronous_commit off; "
        f"throughput N = {plan.jobs:,}, medians of {args.rounds} rounds (all but latency); "
        f"latency: {plan.claims} claims per backlog after {plan.warmup} unmeasured; "
        f"{time.monotonic() - t0:.0f} s; load average {load_before:.1f} before, "
        f"{load_after:.1f} after (other work on the machine skews the rates)"
    )
    print_table(
        [
            "measure",
            "ingestd",
            "baseline",
            "baseline is",
            "ratio ingestd/baseline",
            "goal",
            "runs (ingestd / baseline)",
        ],
        [r.cells() for r in rows],
    )
    for line in notes:
        print(line)


if __name__ == "__main__":
    run_main(main, "workers and Postgres")
