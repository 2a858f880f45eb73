"""Intake throughput next to the durable primitive it cannot beat, in one run.

Baseline (per document): write 300 KB to a temp file + fsync + rename + directory fsync,
then one INSERT + COMMIT. Product: ``Intake.ingest`` on a 300 KB PDF (validate, stream
hash + copy + 0440 + fsync + no-overwrite link + dir fsync, tenant check, one transaction
in two round trips: tenant lock + duplicate check, then document + job + audit entry
sent with the COMMIT; source unlink).

Both run on the same durable embedded PostgreSQL (fsync on) and the same filesystem,
alternating, several rounds; the table shows medians.

    .venv/bin/python bench/intake.py [--files 1000] [--rounds 3] [--size 300000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# The project root, not bench/: bench/queue.py would otherwise shadow the stdlib's queue.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_cluster, median, print_table
from ingestd import log
from ingestd.archive.store import LocalArchive
from ingestd.config.settings import IntakeConfig
from ingestd.db.database import Database
from ingestd.db.schema import migrate
from ingestd.demo.samples import pdf_bytes
from ingestd.durable import fsync_dir
from ingestd.intake.ingest import Intake
from ingestd.intake.items import IntakeItem, Outcome


def primitive(db: Database, workdir: Path, payloads: list[bytes]) -> float:
    """docs/s of write+fsync+rename+dir-fsync plus INSERT+COMMIT, one thread."""
    target = workdir / "primitive"
    target.mkdir()
    with db.transaction() as tx:
        tx.raw("CREATE TABLE IF NOT EXISTS bench_primitive (id BIGSERIAL PRIMARY KEY, name TEXT)")
    start = time.perf_counter()
    for i, data in enumerate(payloads):
        tmp = target / f".tmp-{i}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, target / f"{i}.pdf")
        fsync_dir(target)
        with db.transaction() as tx:
            tx.raw("INSERT INTO bench_primitive (name) VALUES (%(n)s)", {"n": str(i)})
    elapsed = time.perf_counter() - start
    shutil.rmtree(target)
    return len(payloads) / elapsed


def product(db: Database, workdir: Path, payloads: list[bytes], threads: int) -> float:
    """docs/s of the real intake pipeline."""
    src = workdir / "src"
    src.mkdir()
    files = []
    for i, data in enumerate(payloads):
        p = src / f"Rechnung {i:05d}.pdf"
        p.write_bytes(data)
        files.append(p)
    os.sync()  # do not bill the product for flushing the sources we just wrote
    archive = LocalArchive(workdir / "archive")
    intake = Intake(IntakeConfig(), db, archive)

    def one(p: Path) -> None:
        res = intake.ingest(IntakeItem(path=p, tenant="bench"))
        if res.outcome is not Outcome.ingested:
            raise RuntimeError(f"{p}: {res.outcome} {res.detail}")

    start = time.perf_counter()
    if threads == 1:
        for p in files:
            one(p)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, files))
    elapsed = time.perf_counter() - start
    shutil.rmtree(src)
    return len(payloads) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=300_000)
    args = ap.parse_args()
    log.configure("warning", "console")

    results: dict[str, list[float]] = {"primitive": [], "intake": [], "intake4": []}
    with bench_cluster() as cluster:
        for rnd in range(args.rounds):
            work = Path(tempfile.mkdtemp(prefix="ingestd-bench-", dir=os.environ.get("BENCH_DIR")))
            dbname = f"bench_{rnd}"
            with Database(cluster.conninfo_for("postgres")) as admin, admin.autocommit() as tx:
                tx.raw(f'CREATE DATABASE "{dbname}"')
            with Database(cluster.conninfo_for(dbname), max_size=8) as db:
                migrate(db)
                with db.transaction() as tx:
                    tx.one("tenant_insert", {"name": "bench", "status": "active"})
                # Distinct content per round: every document is new, none a duplicate.
                payloads = [
                    pdf_bytes(f"r{rnd}", pad_to=args.size, seed=i) for i in range(args.files)
                ]
                results["primitive"].append(primitive(db, work, payloads))
                results["intake"].append(product(db, work, payloads, threads=1))
                with db.transaction() as tx:
                    tx.raw("TRUNCATE documents, processing_jobs, document_tags CASCADE")
                shutil.rmtree(work / "archive")
                results["intake4"].append(product(db, work, payloads, threads=4))
            shutil.rmtree(work, ignore_errors=True)
            print(
                f"round {rnd + 1}: primitive {results['primitive'][-1]:.0f}/s, "
                f"intake {results['intake'][-1]:.0f}/s, intake x4 {results['intake4'][-1]:.0f}/s",
                file=sys.stderr,
            )

    base = median(results["primitive"])
    print(f"\nintake benchmark: {args.files} files of {args.size} B, {args.rounds} rounds, medians")
    print_table(
        ["what", "docs/s (median)", "runs", "ratio vs primitive"],
        [
            [
                "primitive: write+fsync+rename+dirfsync + INSERT+COMMIT (1 thread)",
                f"{base:.0f}",
                " ".join(f"{v:.0f}" for v in results["primitive"]),
                "1.00",
            ],
            [
                "ingestd intake (1 thread)",
                f"{median(results['intake']):.0f}",
                " ".join(f"{v:.0f}" for v in results["intake"]),
                f"{median(results['intake']) / base:.2f}",
            ],
            [
                "ingestd intake (4 threads)",
                f"{median(results['intake4']):.0f}",
                " ".join(f"{v:.0f}" for v in results["intake4"]),
                f"{median(results['intake4']) / base:.2f}",
            ],
        ],
    )


if __name__ == "__main__":
    main()
