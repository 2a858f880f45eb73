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
from dataclasses import dataclass, field

from bench._common import bench_cluster, median, print_table, run_main
from bench._queue_fairness import caps, fairness, lanes, newcomer, weights
from bench._queue_harness import (
    CAP,
    CAP_HOLD,
    CAP_WEIGHT,
    CAP_WORKERS,
    FULL,
    LONG_HOLD,
    PGQ_HELPER,
    ROOT,
    SMALL,
    SMALL_TENANT_JOBS,
    SMALL_TENANTS,
    WEIGHTS,
    WORKERS,
    Bench,
    Plan,
    order,
    pgq_venv,
)
from bench._queue_speed import (
    latency,
    runner_available,
    throughput_pgq,
    throughput_queue,
    throughput_runner,
)
from bench._queue_workers import worker_main


# -- main -------------------------------------------------------------------------------
@dataclass
class Row:
    label: str
    product: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    baseline_name: str = ""
    goal: str = "-"
    fmt: str = "{:.0f}"

    def cells(self) -> list[str]:
        p = median(self.product) if self.product else None
        b = median(self.baseline) if self.baseline else None
        ratio = "-" if p is None or not b else f"{p / b:.2f}" if p / b >= 0.01 else f"{p / b:.4f}"

        def show(v: float | None) -> str:
            return "-" if v is None else self.fmt.format(v)

        runs = " / ".join(
            " ".join(self.fmt.format(v) for v in vals) or "-"
            for vals in (self.product, self.baseline)
        )
        return [self.label, show(p), show(b), self.baseline_name, ratio, self.goal, runs]


SCENARIOS = ("throughput", "latency", "fairness", "newcomer", "weights", "caps", "lanes")


def run(args: argparse.Namespace, plan: Plan, bench: Bench) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    goals: list[str] = []
    want = set(SCENARIOS) if args.only is None else {args.only}
    if "throughput" in want:
        ing = Row(
            f"no-op jobs/s, {WORKERS} workers, {plan.jobs:,} jobs (ingestd: "
            f"{plan.tenants} tenants)",
            baseline_name="pgqueuer batch_size=10",
        )
        pgq1 = Row("  same, baseline one job per dequeue", baseline_name="pgqueuer batch_size=1")
        fifo = Row("  same, baseline plain FIFO claim", baseline_name="FIFO SQL, same schema")
        runner = Row(
            f"  real `ingestd worker --drain` x {WORKERS} (job in its child), same jobs",
            baseline_name="pgqueuer batch_size=10",
        )
        sides = ["ingestd", "pgq10", "pgq1", "fifo"] if bench.pgq_python else ["ingestd", "fifo"]
        if args.runner and runner_available():
            sides.append("runner")
        elif args.runner:
            goals.append("note: no `ingestd worker` (worker/runner.py) here: no runner row")
        empties: list[int] = []
        for rnd in range(args.rounds):
            for side in order(sides, rnd):
                if side in ("ingestd", "fifo"):
                    res = throughput_queue(bench, plan, side, rnd)
                elif side == "runner":
                    res = throughput_runner(bench, plan, rnd)
                    if res["log_lines"]:
                        print(
                            f"ingestd worker: {res['log_lines']} log lines at level warning "
                            f"and above:\n{res['log_tail']}",
                            file=sys.stderr,
                        )
                else:
                    res = throughput_pgq(bench, plan, int(side[3:]), rnd)
                print(
                    f"throughput round {rnd + 1} {side}: {res['rate']:.0f} jobs/s"
                    f" ({res['empty']} empty claims)",
                    file=sys.stderr,
                )
                series = {
                    "ingestd": ing.product,
                    "pgq10": ing.baseline,
                    "pgq1": pgq1.baseline,
                    "fifo": fifo.baseline,
                    "runner": runner.product,
                }
                series[side].append(res["rate"])
                if side == "ingestd":
                    empties.append(res["empty"])
        pgq1.product = fifo.product = ing.product
        runner.baseline = ing.baseline
        rows += [ing, pgq1, fifo] if bench.pgq_python else [fifo]
        if runner.product:
            rows.append(runner)
        goals.append(
            f"note: ingestd claims that found nothing while jobs were queued "
            f"(all tenants locked by other claimers), per run: {empties}"
        )
    if "latency" in want:
        lo, hi = plan.backlogs
        lat = latency(bench, plan)
        for key, what in (("p50", "median"), ("p95", "p95")):
            rows.append(
                Row(
                    f"claim latency {what} (ms), backlog {hi:,} vs {lo:,}",
                    [lat[hi][key]],
                    [lat[lo][key]],
                    f"backlog {lo:,}",
                    "<= 1.2" if key == "p50" else "-",
                    "{:.2f}",
                )
            )
        for key, when in (("buffers_before", "before"), ("buffers_after", "after")):
            rows.append(
                Row(
                    f"  buffers hit+read of one claim (EXPLAIN), {when} the {plan.claims} claims",
                    [sum(lat[hi][key].values())],
                    [sum(lat[lo][key].values())],
                    f"backlog {lo:,}",
                )
            )
        churn = lat[hi]["churn"]
        rows.append(
            Row(
                f"claim latency median (ms), backlog {hi:,}, after {plan.churn:,} more "
                f"claims by {WORKERS} workers",
                [churn["p50"]],
                [lat[hi]["p50"]],
                "same, before them",
                "-",
                "{:.2f}",
            )
        )
        rows.append(
            Row(
                "  buffers hit+read of one claim (EXPLAIN), after them",
                [sum(churn["buffers"].values())],
                [sum(lat[hi]["buffers_after"].values())],
                "same, before them",
            )
        )
        ratio = lat[hi]["p50"] / lat[lo]["p50"]
        goals.append(
            f"goal: claim latency median at {hi:,} within 1.2x of {lo:,}: "
            f"{'met' if ratio <= 1.2 else 'NOT met'} ({ratio:.2f})"
        )
        goals.append(
            f"claim buffers (EXPLAIN): backlog {lo:,} {lat[lo]['buffers_before']} -> "
            f"{lat[lo]['buffers_after']}, backlog {hi:,} {lat[hi]['buffers_before']} "
            f"-> {lat[hi]['buffers_after']} -> {churn['buffers']} after the churn "
            f"({churn['dead']:,} dead tuples in processing_jobs then, "
            f"{churn['autovacuums']} autovacuums so far)"
        )
    if "fairness" in want:
        a, b, rest = plan.fair
        row = Row(
            f"Jain's index, {plan.fair_claims:,} claims by {WORKERS} workers, backlogs "
            f"A {a:,} B {b:,} C..J {rest:,}",
            baseline_name="FIFO SQL, same data",
            goal=">= 0.95",
            fmt="{:.3f}",
        )
        for rnd in range(args.rounds):
            res = fairness(bench, plan, rnd)
            row.product.append(res["ingestd"]["jain"])
            row.baseline.append(res["fifo"]["jain"])
            for mode, r in res.items():
                print(
                    f"fairness round {rnd + 1} {mode}: Jain {r['jain']:.3f}, claims per tenant "
                    f"A..J {r['claimed']}, fewest still queued {r['min_queued']}",
                    file=sys.stderr,
                )
            goals.append(
                f"fairness round {rnd + 1}: claims per tenant A..J: ingestd "
                f"{res['ingestd']['claimed']}, FIFO {res['fifo']['claimed']}; "
                f"every tenant still backlogged: "
                f"{min(r['min_queued'] for r in res.values()) > 0}"
            )
        rows.append(row)
        j = median(row.product)
        goals.append(f"goal: Jain's index >= 0.95: {'met' if j >= 0.95 else 'NOT met'} ({j:.3f})")
    if "newcomer" in want:
        claims = Row(
            f"newcomer K: claims returned between its COMMIT and its own claim "
            f"(A's {plan.newcomer_backlog:,} backlog, after {plan.newcomer_after:,} "
            "claims)",
            baseline_name="FIFO SQL, same data",
        )
        ms = Row(
            "newcomer K: ms from before its COMMIT until its claim returned",
            baseline_name="FIFO SQL, same data",
            fmt="{:.1f}",
        )
        empties = []
        for rnd in range(args.rounds):
            res = newcomer(bench, plan, rnd)
            claims.product.append(res["ingestd"]["claims"])
            claims.baseline.append(res["fifo"]["claims"])
            ms.product.append(res["ingestd"]["ms"])
            ms.baseline.append(res["fifo"]["ms"])
            empties.append(res["ingestd"]["empty"])
            print(f"newcomer round {rnd + 1}: {res}", file=sys.stderr)
        rows += [claims, ms]
        goals.append(
            f"note: newcomer runs, ingestd claims that found nothing while A's jobs "
            f"were queued (A locked by another claimer): {empties}"
        )
    if "weights" in want:
        rows += run_weights(args, plan, bench, goals)
    if "caps" in want:
        rows += run_caps(args, plan, bench, goals)
    if "lanes" in want:
        rows += run_lanes(args, plan, bench, goals)
    return rows, goals


def run_weights(args: argparse.Namespace, plan: Plan, bench: Bench, goals: list[str]) -> list[Row]:
    total = sum(WEIGHTS.values())
    shares = {
        t: Row(
            f"weights: {t.upper()}'s share (weight {w}) of {plan.weight_claims:,} claims by "
            f"{WORKERS} workers"
            if t == "a"
            else f"  same, {t.upper()}'s (weight {w})",
            baseline=[w / total] * args.rounds,
            baseline_name="configured w / sum(w)",
            goal="ratio 0.95..1.05",
            fmt="{:.3f}",
        )
        for t, w in WEIGHTS.items()
    }
    error = Row(
        "  largest relative error of the shares, abs(measured - configured) / configured",
        baseline_name="FIFO SQL, same data",
        goal="<= 0.05",
        fmt="{:.3f}",
    )
    for rnd in range(args.rounds):
        res = weights(bench, plan, rnd)
        for t, row in shares.items():
            row.product.append(res["ingestd"]["share"][t])
        error.product.append(res["ingestd"]["error"])
        error.baseline.append(res["fifo"]["error"])
        print(f"weights round {rnd + 1}: {res}", file=sys.stderr)
        goals.append(
            f"weights round {rnd + 1}: shares A/B/C ingestd "
            + "/".join(f"{res['ingestd']['share'][t]:.3f}" for t in WEIGHTS)
            + ", FIFO "
            + "/".join(f"{res['fifo']['share'][t]:.3f}" for t in WEIGHTS)
            + f"; ingestd's first claims {res['ingestd']['first']}"
        )
    e = median(error.product)
    goals.append(
        f"goal: every share within 5 % of its configured share: "
        f"{'met' if e <= 0.05 else 'NOT met'} ({e:.3f})"
    )
    return [*shares.values(), error]


def run_caps(args: argparse.Namespace, plan: Plan, bench: Bench, goals: list[str]) -> list[Row]:
    a, rest = plan.cap_backlogs
    head = (
        f"caps: A's most running (max_running {CAP}, weight {CAP_WEIGHT}), {CAP_WORKERS} "
        f"workers, {CAP_HOLD * 1000:.0f} ms jobs, {plan.cap_claims:,} claims, backlogs "
        f"A {a:,} B..D {rest:,}"
    )
    most = Row(head, baseline_name="no cap, same data", goal=f"<= {CAP}")
    mean_a = Row("  A's mean running", baseline_name="no cap, same data", fmt="{:.2f}")
    mean_all = Row(
        f"  all tenants' mean running (of {CAP_WORKERS} workers)",
        baseline_name="no cap, same data",
        fmt="{:.2f}",
    )
    for rnd in range(args.rounds):
        res = caps(bench, plan, rnd)
        most.product.append(res["capped"]["max_a"])
        most.baseline.append(res["uncapped"]["max_a"])
        mean_a.product.append(res["capped"]["mean_a"])
        mean_a.baseline.append(res["uncapped"]["mean_a"])
        mean_all.product.append(res["capped"]["mean_all"])
        mean_all.baseline.append(res["uncapped"]["mean_all"])
        print(f"caps round {rnd + 1}: {res}", file=sys.stderr)
        goals.append(
            f"caps round {rnd + 1}: claims per tenant A..D capped {res['capped']['claimed']}, "
            f"uncapped {res['uncapped']['claimed']}; samples {res['capped']['samples']} / "
            f"{res['uncapped']['samples']}; empty claims {res['capped']['empty']} / "
            f"{res['uncapped']['empty']}; every tenant still backlogged: "
            f"{min(r['min_queued'] for r in res.values()) > 0}"
        )
    worst = max(most.product)
    goals.append(
        f"goal: A never more than {CAP} running: {'met' if worst <= CAP else 'NOT met'} "
        f"(most seen {worst:.0f})"
    )
    return [most, mean_a, mean_all]


def run_lanes(args: argparse.Namespace, plan: Plan, bench: Bench, goals: list[str]) -> list[Row]:
    lo, hi = LONG_HOLD
    p50 = Row(
        f"lanes: ms from a provision-tenant's COMMIT to its start, median of "
        f"{plan.lane_probes}, {plan.lane_jobs:,} OCR jobs ({lo * 1000:.0f}..{hi * 1000:.0f} "
        f"ms) queued, all {WORKERS} long lanes busy; ingestd: + 1 short lane",
        baseline_name="no short lane (0003)",
        fmt="{:.1f}",
    )
    worst = Row("  same, the longest", baseline_name="no short lane (0003)", fmt="{:.1f}")
    for rnd in range(args.rounds):
        res = lanes(bench, plan, rnd)
        p50.product.append(res["short"]["p50"])
        p50.baseline.append(res["none"]["p50"])
        worst.product.append(res["short"]["max"])
        worst.baseline.append(res["none"]["max"])
        print(f"lanes round {rnd + 1}: {res}", file=sys.stderr)
        goals.append(
            f"lanes round {rnd + 1}: delays (ms) with the short lane "
            + " ".join(f"{d:.1f}" for d in res["short"]["delays"])
            + f" ({res['short']['by_short']} of {plan.lane_probes} taken by the short lane), "
            + "without "
            + " ".join(f"{d:.1f}" for d in res["none"]["delays"])
            + f"; the probes' COMMIT took {res['short']['commit_ms']:.1f} / "
            + f"{res['none']['commit_ms']:.1f} ms; long jobs still queued "
            + f"{res['short']['long_queued']:,} / {res['none']['long_queued']:,}"
        )
    return [p50, worst]


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
