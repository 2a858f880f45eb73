"""Audit verify: recompute a chain of 1,000,000 events against the database.

The product: ``ingestd audit verify --no-files`` as an operator runs it (a process of its
own: every entry re-hashed and checked for position, link and columns; every seal; every
document row against the chain's archived entries). The baseline: the least any
verifier must do, in the same run: stream the same entries out of Postgres (COPY) and
recompute each hash from the one before, nothing else. The goal: 1,000,000 events in at
most 60 s on this 2-core machine.

The data: ``--tenants`` chains; of every four events three are ``document.archived``
(each with its document row) and one a duplicate or refusal, built in Python and copied
into the tables (appending a million entries one transaction at a time would take the
bench longer than the verify it measures).

    python bench/audit.py                 # 1,000,000 events, 3 rounds
    python bench/audit.py --events 20000 --rounds 1   # small mode (make test)
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds a queue.py, which would shadow the stdlib's queue module (psycopg_pool
# imports it): take bench/ off the path, put the repository first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import hashlib
import json
import subprocess
import tempfile
import time

from bench._common import BenchError, bench_cluster, median, print_table, run_main
from ingestd.db.database import Database, connect_once
from ingestd.db.schema import migrate

GENESIS = "0" * 64
GOAL_SECONDS = 60.0


def _entry_hash(prev: str, body: str) -> str:
    return hashlib.sha256((prev + body).encode()).hexdigest()


def populate(conninfo: str, events: int, tenants: int) -> int:
    """Write ``events`` entries over ``tenants`` chains (and their document rows)."""
    conn = connect_once(conninfo)
    per = events // tenants
    docs = 0
    with conn:
        with conn.cursor() as cur:
            ids = []
            for t in range(tenants):
                row = cur.execute(
                    "INSERT INTO tenants (name, status) VALUES (%s, 'active') RETURNING id",
                    (f"t{t}",),
                ).fetchone()
                assert row is not None
                ids.append(int(row["id"]))
        for t, chain in enumerate(ids):
            tenant = f"t{t}"
            prev = GENESIS
            doc_rows = []
            with (
                conn.cursor() as cur,
                cur.copy(
                    "COPY audit_events (chain, seq, at, kind, tenant, document_id, body, "
                    "prev_hash, hash) FROM STDIN"
                ) as copy,
            ):
                for seq in range(1, per + 1):
                    doc_id = None
                    if seq % 4:
                        docs += 1
                        doc_id = docs
                        sha = hashlib.sha256(str(doc_id).encode()).hexdigest()
                        path = f"{tenant}/2026/12/{sha}.pdf"
                        kind = "document.archived"
                        detail = {"sha256": sha, "size": 300_000, "path": path, "type": "pdf",
                                  "filename": f"Scan_{seq:06d}.pdf", "source": "sftp:scanner",
                                  "job": doc_id}  # fmt: skip
                        doc_rows.append((doc_id, chain, sha, path))
                    else:
                        kind = "document.refused"
                        detail = {"reason": "bad_type", "detail": "content is text",
                                  "filename": f"n{seq}.txt", "source": "watch:/srv"}  # fmt: skip
                    at = f"2026-12-01T10:00:00.{seq % 1000000:06d}Z"
                    body = json.dumps(
                        {"at": at, "seq": seq, "kind": kind, "chain": chain, "detail": detail,
                         "tenant": tenant, "document": doc_id},
                    )  # fmt: skip
                    h = _entry_hash(prev, body)
                    copy.write_row((chain, seq, at, kind, tenant, doc_id, body, prev, h))
                    prev = h
            with conn.cursor() as cur:
                cur.execute(
                    "INSERT INTO audit_heads (chain, seq, hash) VALUES (%s, %s, %s)",
                    (chain, per, prev),
                )
                with cur.copy(
                    "COPY documents (id, tenant_id, sha256, size_bytes, mime_type, extension, "
                    "original_filename, source, archive_path, title) FROM STDIN"
                ) as copy:
                    for doc_id, tid, sha, path in doc_rows:
                        copy.write_row((doc_id, tid, sha, 300_000, "application/pdf", "pdf",
                                        "Scan.pdf", "sftp:scanner", path, "Scan"))  # fmt: skip
        with conn.cursor() as cur:
            cur.execute("SELECT setval('documents_id_seq', %s)", (docs,))
    conn.close()
    conn = connect_once(conninfo, autocommit=True)
    conn.execute("VACUUM ANALYZE audit_events")
    conn.execute("VACUUM ANALYZE documents")
    conn.close()
    return per * tenants


def baseline(conninfo: str) -> tuple[float, int]:
    """Stream every entry (COPY) and recompute each chain's hashes, nothing more."""
    conn = connect_once(conninfo)
    t0 = time.perf_counter()
    n, bad = 0, 0
    prev_chain, prev = None, GENESIS
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY (SELECT chain, prev_hash, body, hash FROM audit_events ORDER BY chain, seq) "
            "TO STDOUT"
        ) as copy,
    ):
        for chain, prev_hash, body, h in copy.rows():
            if chain != prev_chain:
                prev_chain, prev = chain, GENESIS
            if prev_hash != prev or _entry_hash(prev_hash, body) != h:
                bad += 1
            prev = h
            n += 1
    elapsed = time.perf_counter() - t0
    conn.close()
    if bad:
        raise BenchError(f"baseline found {bad} broken entries in a chain built intact")
    return elapsed, n


def product(config: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "ingestd.cli", "audit", "verify", "--no-files", "--json",
         "--config", str(config)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise BenchError(
            f"audit verify exited {proc.returncode}: {proc.stdout[-800:]}{proc.stderr[-800:]}"
        )
    out = json.loads(proc.stdout)
    if not out["ok"]:
        raise BenchError(f"audit verify found problems in an intact chain: {out['problems'][:3]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--tenants", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with bench_cluster(durable=False) as cluster, tempfile.TemporaryDirectory() as work:
        conninfo = cluster.conninfo
        with Database(conninfo) as db:
            migrate(db)
        t0 = time.perf_counter()
        events = populate(conninfo, args.events, args.tenants)
        print(
            f"built {events:,} events in {args.tenants} chains in {time.perf_counter() - t0:.1f} s"
        )
        config = Path(work) / "ingestd.toml"
        config.write_text(
            f'[database]\nurl = "{conninfo}"\n[paths]\nstate_dir = "{work}/state"\n'
            f'archive = "{work}/archive"\nderived = "{work}/derived"\nspool = "{work}/spool"\n'
            '[log]\nformat = "json"\nlevel = "warning"\n'
        )
        ours: list[float] = []
        base: list[float] = []
        for r in range(args.rounds):
            first, second = (product, baseline) if r % 2 == 0 else (baseline, product)
            for side in (first, second):
                if side is product:
                    ours.append(product(config))
                else:
                    base.append(baseline(conninfo)[0])
        o, b = median(ours), median(base)
        met = "met" if o <= GOAL_SECONDS else "MISSED"
        if events < 1_000_000:
            met = f"(small run; {met} at this size)"
        print()
        print_table(
            ["workload", "ingestd audit verify (s)", "events/s", "baseline: COPY + rehash (s)",
             "events/s ", "ratio (time)", "goal"],
            [[f"{events:,} events, {args.tenants} chains, {args.rounds} rounds (median)",
              f"{o:.2f}", f"{events / o:,.0f}", f"{b:.2f}", f"{events / b:,.0f}",
              f"{o / b:.2f}x", f"<= {GOAL_SECONDS:.0f} s for 1,000,000: {met}"]],
        )  # fmt: skip


if __name__ == "__main__":
    run_main(main, "bench")
