"""Hot-folder drop-to-committed latency and throughput, inotify vs polling, in one run.

Workload 1 (``--files``): N files of 300 KB are written into a hot folder at once, once
per mode (inotify, polling); the latency of a file is COMMIT time (documents.created_at)
minus the moment its write finished.

Workload 2 (``--scale``, default 20,000 files; in small mode five times ``--files``):
that many small files (``--scale-size`` bytes) prepared beside the hot folder are moved
into it at once (one rename each, so the drop itself takes well under a second), inotify.
It measures what the watcher adds on top of intake when a whole backlog arrives: the
settle scan, the events, the hand-off.

The baseline of both is the same number of files through ``Intake.ingest`` in a plain
loop on as many threads as the watcher has intake threads (no watcher), i.e. the rate
the watcher could reach if it knew completion instantly. Rates: ``drop->last commit`` is
files / (last COMMIT - start of the drop), so it includes the stability window;
``once stable`` is (files - 1) / (last COMMIT - first COMMIT). Medians of the rounds.

    .venv/bin/python bench/watch.py [--files 500] [--rounds 2] [--stable 2.0]
                                    [--scale 20000] [--scale-size 20000] [--scale-rounds 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# The project root, not bench/: bench/queue.py would otherwise shadow the stdlib's queue.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_cluster, print_table
from ingestd import log
from ingestd.config.load import parse_config
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.db.schema import migrate
from ingestd.demo.samples import pdf_bytes
from ingestd.intake.items import IntakeItem
from ingestd.sources.hotfolders import HotFolders

# Intake threads of the watcher (hotfolders.workers), and so of the plain loop.
WORKERS = 2


class _Overflows(logging.Handler):
    """Counts watchdog's "inotify queue overflowed" warnings (events lost)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self.count += 1


OVERFLOWS = _Overflows()


def _fresh_db(cluster: object, name: str) -> Database:
    with Database(cluster.conninfo_for("postgres")) as admin, admin.autocommit() as tx:  # type: ignore[attr-defined]
        tx.raw(f'CREATE DATABASE "{name}"')
    db = Database(cluster.conninfo_for(name), max_size=8).open()  # type: ignore[attr-defined]
    migrate(db)
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": "bench", "status": "active"})
    return db


def _watcher(db: Database, work: Path, hot: Path, polling: bool, stable: float) -> HotFolders:
    config = parse_config(
        {
            "database": {"url": db.conninfo},
            "paths": {"state_dir": str(work / "state"), "spool": str(work / "spool")},
            "hotfolders": {"stable_seconds": stable, "poll_interval": 1.0, "workers": WORKERS},
            "watch": [{"path": str(hot), "tenant": "bench", "polling": polling}],
        }
    )
    return HotFolders(config, make_intake(config, db))


def _wait_for(db: Database, n: int, timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with db.transaction() as tx:
            if tx.raw("SELECT count(*) AS n FROM documents")[0]["n"] >= n:
                return
        time.sleep(0.2)
    raise SystemExit(f"error: not all {n} files were committed within {timeout:.0f} s")


def _commits(db: Database) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(
            "SELECT original_filename, extract(epoch FROM created_at) AS t FROM documents"
        )


def _settle_cpu() -> float:
    """CPU seconds of the running watcher's settle thread."""
    for t in threading.enumerate():
        if t.name == "watch-settle" and t.ident is not None:
            return time.clock_gettime(time.pthread_getcpuclockid(t.ident))
    return float("nan")


def run_watch(
    db: Database, work: Path, payloads: list[bytes], polling: bool, stable: float
) -> dict[str, float]:
    hot = work / "hot"
    hot.mkdir()
    watcher = _watcher(db, work, hot, polling, stable)
    watcher.start()
    dropped: dict[str, float] = {}
    first = time.time()
    for i, data in enumerate(payloads):
        name = f"scan-{i:05d}.pdf"
        (hot / name).write_bytes(data)
        dropped[name] = time.time()
    n = len(payloads)
    _wait_for(db, n, timeout=600)
    watcher.stop()
    rows = _commits(db)
    lat = sorted(float(r["t"]) - dropped[r["original_filename"]] for r in rows)
    last = max(float(r["t"]) for r in rows)
    first_commit = min(float(r["t"]) for r in rows)
    shutil.rmtree(hot)
    return {
        "p50": statistics.median(lat),
        "p95": lat[int(0.95 * (len(lat) - 1))],
        "throughput": n / (last - first),
        # Once files are stable: the rate at which the watcher commits them.
        "steady": (n - 1) / max(last - first_commit, 1e-6),
        "count": len(rows),
    }


def _prepare(folder: Path, count: int, size: int, tag: str) -> list[Path]:
    folder.mkdir(parents=True)
    files = []
    for i in range(count):
        p = folder / f"{tag}-{i:05d}.pdf"
        p.write_bytes(pdf_bytes(tag, pad_to=size, seed=i))
        files.append(p)
    return files


def run_scale(
    db: Database, work: Path, count: int, size: int, stable: float, tag: str
) -> dict[str, float]:
    """``count`` files moved into a watched folder at once; inotify."""
    staged = _prepare(work / "staging", count, size, tag)
    hot = work / "hot"
    hot.mkdir()
    watcher = _watcher(db, work, hot, False, stable)
    watcher.start()
    overflows = OVERFLOWS.count
    first = time.time()
    for p in staged:
        os.rename(p, hot / p.name)
    drop = time.time() - first
    # Polling the watcher, not the database: a count(*) five times a second over a
    # growing table would slow the side being measured.
    deadline = time.monotonic() + 1800
    while not (watcher.stats["taken"] >= count and watcher.idle()):
        if time.monotonic() > deadline:
            raise SystemExit(f"error: not all {count} files were taken within 1800 s")
        time.sleep(0.2)
    _wait_for(db, count, timeout=60)
    settle_cpu = _settle_cpu()
    stats = dict(watcher.stats)
    watcher.stop()
    rows = _commits(db)
    last = max(float(r["t"]) for r in rows)
    first_commit = min(float(r["t"]) for r in rows)
    lat = sorted(float(r["t"]) - first for r in rows)
    return {
        "throughput": count / (last - first),
        "steady": (count - 1) / max(last - first_commit, 1e-6),
        "p50": statistics.median(lat),
        "drop": drop,
        "settle_cpu": settle_cpu,
        "looked": stats["looked"] / count,
        "overflows": OVERFLOWS.count - overflows,
    }


def run_direct(db: Database, work: Path, files: list[Path], threads: int = WORKERS) -> float:
    """files/s of ``Intake.ingest`` over ``files`` on ``threads`` threads, no watcher."""
    config = parse_config(
        {"paths": {"state_dir": str(work / "state"), "spool": str(work / "spool")}}
    )
    intake = make_intake(config, db)
    shares = [files[i::threads] for i in range(threads)]

    def loop(share: list[Path]) -> None:
        for p in share:
            intake.ingest(IntakeItem(path=p, tenant="bench"))

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(loop, shares))
    return len(files) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--stable", type=float, default=2.0)
    ap.add_argument(
        "--scale",
        type=int,
        default=None,
        help="files of the drop-at-once workload (default 20000; with --files "
        "below 500, five times --files); 0 skips it",
    )
    ap.add_argument("--scale-size", type=int, default=20_000)
    ap.add_argument("--scale-rounds", type=int, default=None, help="default 3, or --rounds")
    args = ap.parse_args()
    scale = (
        args.scale if args.scale is not None else (20_000 if args.files >= 500 else 5 * args.files)
    )
    scale_rounds = args.scale_rounds or (3 if args.files >= 500 else args.rounds)
    log.configure("error", "console")
    logging.getLogger("watchdog").addHandler(OVERFLOWS)
    results: dict[str, list[dict[str, float]]] = {"inotify": [], "polling": []}
    direct: list[float] = []
    scaled: list[dict[str, float]] = []
    scale_direct: list[float] = []
    with bench_cluster() as cluster:
        for rnd in range(args.rounds):
            for mode in ("inotify", "polling"):
                work = Path(tempfile.mkdtemp(prefix="ingestd-bench-watch-"))
                db = _fresh_db(cluster, f"w{rnd}{mode}")
                payloads = [
                    pdf_bytes(f"{mode}{rnd}", pad_to=300_000, seed=i) for i in range(args.files)
                ]
                res = run_watch(db, work, payloads, mode == "polling", args.stable)
                results[mode].append(res)
                print(f"round {rnd + 1} {mode}: {res}", file=sys.stderr)
                db.close()
                shutil.rmtree(work, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix="ingestd-bench-watch-"))
            db = _fresh_db(cluster, f"d{rnd}")
            files = _prepare(work / "direct", args.files, 300_000, f"d{rnd}")
            direct.append(run_direct(db, work, files))
            print(f"round {rnd + 1} plain loop: {direct[-1]:.0f} files/s", file=sys.stderr)
            db.close()
            shutil.rmtree(work, ignore_errors=True)
        for rnd in range(scale_rounds if scale else 0):
            work = Path(tempfile.mkdtemp(prefix="ingestd-bench-watch-"))
            db = _fresh_db(cluster, f"s{rnd}")
            res = run_scale(db, work, scale, args.scale_size, args.stable, f"s{rnd}")
            scaled.append(res)
            print(f"scale round {rnd + 1} watcher: {res}", file=sys.stderr)
            db.close()
            shutil.rmtree(work, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix="ingestd-bench-watch-"))
            db = _fresh_db(cluster, f"sd{rnd}")
            files = _prepare(work / "direct", scale, args.scale_size, f"sd{rnd}")
            scale_direct.append(run_direct(db, work, files))
            print(
                f"scale round {rnd + 1} plain loop: {scale_direct[-1]:.0f} files/s", file=sys.stderr
            )
            db.close()
            shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(direct)
    print(
        f"\nhot-folder benchmark: {args.files} files of 300 KB written at once, "
        f"stable_seconds={args.stable}, {args.rounds} rounds, medians; baseline on "
        f"{WORKERS} threads like the watcher"
    )
    rows = []
    for mode, runs in results.items():
        tp = statistics.median(r["throughput"] for r in runs)
        steady = statistics.median(r["steady"] for r in runs)
        rows.append(
            [
                mode,
                f"{statistics.median(r['p50'] for r in runs):.2f}",
                f"{statistics.median(r['p95'] for r in runs):.2f}",
                f"{tp:.0f}",
                f"{steady:.0f}",
                f"{steady / base:.2f}",
                " ".join(f"{r['throughput']:.0f}/{r['steady']:.0f}" for r in runs),
            ]
        )
    rows.append(
        [
            f"baseline: Intake.ingest loop, {WORKERS} threads (no watcher)",
            "-",
            "-",
            "-",
            f"{base:.0f}",
            "1.00",
            " ".join(f"{v:.0f}" for v in direct),
        ]
    )
    print_table(
        [
            "mode",
            "latency p50 s",
            "latency p95 s",
            "files/s drop->last commit",
            "files/s once stable",
            "stable rate vs baseline",
            "runs (total/stable)",
        ],
        rows,
    )
    if not scaled:
        return
    sbase = statistics.median(scale_direct)
    tp = statistics.median(r["throughput"] for r in scaled)
    steady = statistics.median(r["steady"] for r in scaled)
    print(
        f"\nhot-folder scale: {scale} files of {args.scale_size} bytes moved in at once "
        f"(inotify, {WORKERS} intake threads, stable_seconds={args.stable}), "
        f"{scale_rounds} rounds, medians"
    )
    print_table(
        [
            "workload",
            "files/s drop->last commit",
            "ratio vs plain loop",
            "files/s once stable",
            "ratio vs plain loop (stable)",
            "p50 s from drop",
            "drop s",
            "settle CPU s",
            "lstat/file",
            "inotify overflows",
            "runs (total/stable)",
        ],
        [
            [
                f"watcher, {scale} files",
                f"{tp:.0f}",
                f"{tp / sbase:.2f}",
                f"{steady:.0f}",
                f"{steady / sbase:.2f}",
                f"{statistics.median(r['p50'] for r in scaled):.1f}",
                f"{statistics.median(r['drop'] for r in scaled):.2f}",
                f"{statistics.median(r['settle_cpu'] for r in scaled):.2f}",
                f"{statistics.median(r['looked'] for r in scaled):.2f}",
                str(sum(int(r["overflows"]) for r in scaled)),
                " ".join(f"{r['throughput']:.0f}/{r['steady']:.0f}" for r in scaled),
            ],
            [
                f"plain Intake.ingest loop, {WORKERS} threads",
                f"{sbase:.0f}",
                "1.00",
                f"{sbase:.0f}",
                "1.00",
                "-",
                "-",
                "-",
                "-",
                "-",
                " ".join(f"{v:.0f}" for v in scale_direct),
            ],
        ],
    )


if __name__ == "__main__":
    main()
