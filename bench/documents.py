"""E-invoices analysed per second by a warm worker, next to the floor of doing the least.

The product: XRechnung (UBL and CII XML) and ZUGFeRD/Factur-X PDFs archived by intake,
then one ``analyze-document`` job each run by the worker (``worker.concurrency`` slots
in one process, their job children warm): re-hash the original, read the XML (the PDF's
embedded one), validate it against the shipped XSD and the EN 16931 rules, render the
readable PDF and thumbnail (XML) or copy the PDF, write the fields, title, date, seller
and search text with the job's completion. Timed from the first job's start to the last
job's end (the database's clocks), so process start-up is not in it.

The floor: the least any reader must do with the same files, in one process: read each
file, parse its XML (pull it out of the PDF first), and INSERT one row in a transaction
of its own. The goal: at least 0.5x the floor, and 50 documents/s on this machine.

    python bench/documents.py                     # 300 documents, 3 rounds
    python bench/documents.py --docs 30 --rounds 1   # small mode (make test)
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds a queue.py, which would shadow the stdlib's queue module (psycopg_pool
# imports it): take bench/ off the path, put the repository first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import os
import shutil
import tempfile
import time

from bench._common import BenchError, bench_cluster, median, print_table, run_main
from ingestd import log, xmlsafe
from ingestd.config.load import parse_config
from ingestd.config.settings import Config
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database, connect_once
from ingestd.db.schema import migrate
from ingestd.demo import einvoices
from ingestd.intake.items import IntakeItem, Outcome

GOAL_RATIO = 0.5
GOAL_RATE = 50.0
KINDS = ("ubl", "cii", "zugferd")


def make_files(folder: Path, count: int, round_no: int) -> list[Path]:
    """``count`` invoices, a third of each kind, each with its own number (new bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(count):
        kind = KINDS[i % 3]
        number = f"RE-{round_no}-{i:05d}"
        if kind == "zugferd":
            inv = einvoices.SampleInvoice(number=number, profile=einvoices.EN16931)
            data, name = einvoices.facturx_pdf(inv), f"{number}.pdf"
        else:
            inv = einvoices.SampleInvoice(number=number)
            write = einvoices.ubl_xml if kind == "ubl" else einvoices.cii_xml
            data, name = write(inv), f"{number}.xml"
        files.append(einvoices.write(folder / name, data))
    return files


def floor(conninfo: str, files: list[Path]) -> float:
    """Documents per second: read, parse the XML (out of the PDF first), one INSERT each."""
    from worker.analysis.einvoice.embedded import embedded_invoice_xml

    conn = connect_once(conninfo, autocommit=True)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS floor_rows (name text, root text)")
        started = time.perf_counter()
        for path in files:
            data = path.read_bytes()
            if path.suffix == ".pdf":
                found = embedded_invoice_xml(path)
                if found is None:
                    raise BenchError(f"{path.name}: no embedded XML")
                data = found[1]
            root = xmlsafe.parse(data)
            with conn.transaction():
                conn.execute("INSERT INTO floor_rows VALUES (%s, %s)", (path.name, root.tag))
        seconds = time.perf_counter() - started
    finally:
        conn.close()
    return len(files) / seconds


def product(config: Config, db: Database, files: list[Path]) -> float:
    """Documents per second through intake's jobs and the worker's slots."""
    from worker.lanes import Lanes

    intake = make_intake(config, db)
    for path in files:
        res = intake.ingest(IntakeItem(path=path, tenant="acme"))
        if res.outcome is not Outcome.ingested:
            raise BenchError(f"{path.name}: {res.outcome} {res.detail}")
    with db.transaction() as tx:
        first = tx.raw("SELECT max(id) AS id FROM processing_jobs")[0]["id"] - len(files)
    Lanes(config, db, drain=True).run()
    with db.transaction() as tx:
        row = tx.raw(
            "SELECT count(*) FILTER (WHERE status = 'done') AS done, count(*) AS n,"
            " extract(epoch FROM max(finished_at) - min(started_at)) AS seconds,"
            " (SELECT count(*) FROM invoices) AS invoices"
            " FROM processing_jobs WHERE id > %(first)s AND kind = 'analyze-document'",
            {"first": first},
        )[0]
    if row["done"] != len(files):
        raise BenchError(f"{row['done']} of {len(files)} jobs done")
    return len(files) / float(row["seconds"])


def one_round(root: Path, conninfo: str, count: int, round_no: int) -> tuple[float, float]:
    files = make_files(root / f"in{round_no}", count, round_no)
    base = root / f"r{round_no}"
    config = parse_config(
        {
            "database": {"url": conninfo},
            "paths": {
                "state_dir": str(base / "state"),
                "archive": str(base / "archive"),
                "derived": str(base / "derived"),
                "spool": str(base / "spool"),
            },
            "worker": {"concurrency": os.cpu_count() or 2, "poll_interval": 0.2},
            "log": {"level": "warning"},
        }
    )
    with Database(conninfo) as db:
        rate = product(config, db, files)
    floor_files = make_files(root / f"floor{round_no}", count, round_no)
    return rate, floor(conninfo, floor_files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    log.configure("warning", "json")
    root = Path(tempfile.mkdtemp(prefix="ingestd-bench-docs-"))
    root.chmod(0o755)
    try:
        with bench_cluster() as cluster:
            conninfo = cluster.conninfo
            with Database(conninfo) as db:
                migrate(db)
                with db.transaction() as tx:
                    tx.raw("INSERT INTO tenants (name, status) VALUES ('acme', 'active')")
            rounds = [one_round(root, conninfo, args.docs, n) for n in range(args.rounds)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ours, base = median([r[0] for r in rounds]), median([r[1] for r in rounds])
    print(
        f"\n{args.docs} e-invoices (UBL, CII, ZUGFeRD PDF in thirds), {args.rounds} rounds,"
        f" {os.cpu_count()} cores; medians"
    )
    print_table(
        ("what", "documents/s", "ratio vs baseline", "goal"),
        [
            ("ingestd worker: read, validate, render, record", f"{ours:.1f}",
             f"{ours / base:.2f}x", f">= {GOAL_RATIO}x and >= {GOAL_RATE:g}/s"),
            ("baseline floor: read, parse, one INSERT", f"{base:.1f}", "1.00x", "-"),
        ],
    )  # fmt: skip
    met = ours / base >= GOAL_RATIO and ours >= GOAL_RATE
    print(f"goal {'met' if met else 'NOT met'}: {ours / base:.2f}x the floor, {ours:.1f}/s")


if __name__ == "__main__":
    run_main(main, "the documents bench")
