"""Hot-folder drop-to-committed latency and throughput, inotify vs polling, in one run.

For each mode, N files of 300 KB are dropped into a hot folder at once; the latency of a
file is COMMIT time (documents.created_at) minus the moment its write finished. The
baseline is the same N files through ``Intake.ingest`` in a loop (no watcher), i.e. the
throughput the watcher could reach if it knew completion instantly.

    .venv/bin/python bench/watch.py [--files 500] [--rounds 2] [--stable 2.0]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The project root, not bench/: bench/queue.py would otherwise shadow the stdlib's queue.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_cluster, print_table
from ingestd import log
from ingestd.config import parse_config
from ingestd.db import Database
from ingestd.intake import IntakeItem
from ingestd.runtime import make_intake
from ingestd.samples import pdf_bytes
from ingestd.schema import migrate
from ingestd.watch import HotFolders


def _fresh_db(cluster: object, name: str) -> Database:
    with Database(cluster.conninfo_for("postgres")) as admin, admin.autocommit() as tx:  # type: ignore[attr-defined]
        tx.raw(f'CREATE DATABASE "{name}"')
    db = Database(cluster.conninfo_for(name), max_size=8).open()  # type: ignore[attr-defined]
    migrate(db)
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": "bench", "status": "active"})
    return db


def run_watch(
    db: Database, work: Path, payloads: list[bytes], polling: bool, stable: float
) -> dict[str, float]:
    hot = work / "hot"
    hot.mkdir()
    config = parse_config(
        {
            "database": {"url": db.conninfo},
            "paths": {"state_dir": str(work / "state"), "spool": str(work / "spool")},
            "hotfolders": {"stable_seconds": stable, "poll_interval": 1.0, "workers": 2},
            "watch": [{"path": str(hot), "tenant": "bench", "polling": polling}],
        }
    )
    watcher = HotFolders(config, make_intake(config, db))
    watcher.start()
    dropped: dict[str, float] = {}
    first = time.time()
    for i, data in enumerate(payloads):
        name = f"scan-{i:05d}.pdf"
        (hot / name).write_bytes(data)
        dropped[name] = time.time()
    n = len(payloads)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        with db.transaction() as tx:
            if tx.raw("SELECT count(*) AS n FROM documents")[0]["n"] >= n:
                break
        time.sleep(0.2)
    watcher.stop()
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT original_filename, extract(epoch FROM created_at) AS t FROM documents"
        )
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


def run_direct(db: Database, work: Path, payloads: list[bytes]) -> float:
    src = work / "direct"
    src.mkdir()
    files = []
    for i, data in enumerate(payloads):
        p = src / f"direct-{i:05d}.pdf"
        p.write_bytes(data)
        files.append(p)
    config = parse_config(
        {"paths": {"state_dir": str(work / "state"), "spool": str(work / "spool")}}
    )
    intake = make_intake(config, db)
    start = time.perf_counter()
    for p in files:
        intake.ingest(IntakeItem(path=p, tenant="bench"))
    return len(files) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--stable", type=float, default=2.0)
    args = ap.parse_args()
    log.configure("error", "console")
    results: dict[str, list[dict[str, float]]] = {"inotify": [], "polling": []}
    direct: list[float] = []
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
            direct.append(
                run_direct(
                    db,
                    work,
                    [pdf_bytes(f"d{rnd}", pad_to=300_000, seed=i) for i in range(args.files)],
                )
            )
            db.close()
            shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(direct)
    print(
        f"\nhot-folder benchmark: {args.files} files of 300 KB dropped at once, "
        f"stable_seconds={args.stable}, {args.rounds} rounds, medians"
    )
    rows = []
    for mode, runs in results.items():
        tp = statistics.median(r["throughput"] for r in runs)
        steady = statistics.median(r["steady"] for r in runs)
        rows.append([
            mode,
            f"{statistics.median(r['p50'] for r in runs):.2f}",
            f"{statistics.median(r['p95'] for r in runs):.2f}",
            f"{tp:.0f}",
            f"{steady:.0f}",
            f"{steady / base:.2f}",
            " ".join(f"{r['throughput']:.0f}/{r['steady']:.0f}" for r in runs),
        ])  # fmt: skip
    rows.append(
        ["baseline: Intake.ingest loop (no watcher)", "-", "-", "-", f"{base:.0f}", "1.00",
         " ".join(f"{v:.0f}" for v in direct)]
    )  # fmt: skip
    print_table(
        ["mode", "latency p50 s", "latency p95 s", "files/s drop->last commit",
         "files/s once stable", "stable rate vs baseline", "runs (total/stable)"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
