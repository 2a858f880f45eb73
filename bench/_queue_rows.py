"""The queue bench's table rows: one function per scenario runs its rounds (through
bench/_queue_speed.py and bench/_queue_fairness.py) and returns its rows, adding its goal
lines to ``goals``; bench/queue.py picks the scenarios and prints the table."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from bench._common import median
from bench._queue_fairness import caps, fairness, lanes, newcomer, weights
from bench._queue_harness import (
    CAP,
    CAP_HOLD,
    CAP_WEIGHT,
    CAP_WORKERS,
    LONG_HOLD,
    WEIGHTS,
    WORKERS,
    Bench,
    Plan,
    order,
)
from bench._queue_speed import (
    latency,
    runner_available,
    throughput_pgq,
    throughput_queue,
    throughput_runner,
)


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


def run_throughput(
    args: argparse.Namespace, plan: Plan, bench: Bench, goals: list[str]
) -> list[Row]:
    rows: list[Row] = []
    ing = Row(
        f"no-op jobs/s, {WORKERS} workers, {plan.jobs:,} jobs (ingestd: {plan.tenants} tenants)",
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
    return rows


def run_latency(args: argparse.Namespace, plan: Plan, bench: Bench, goals: list[str]) -> list[Row]:
    rows: list[Row] = []
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
    return rows


def run_fairness(args: argparse.Namespace, plan: Plan, bench: Bench, goals: list[str]) -> list[Row]:
    rows: list[Row] = []
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
    return rows


def run_newcomer(args: argparse.Namespace, plan: Plan, bench: Bench, goals: list[str]) -> list[Row]:
    rows: list[Row] = []
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
    return rows


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
