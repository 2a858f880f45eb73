"""bench/queue.py's harness: the plans (full and --small), the SQL that loads jobs and the
plain FIFO baseline, pgqueuer's own venv, a fresh database per scenario and round
(``Bench``), and the statistics (Jain's index, percentiles)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench._common import BenchError
from ingestd.db import sql
from ingestd.db.database import Database, Tx
from ingestd.db.pgcluster import EmbeddedPostgres
from ingestd.db.schema import migrate
from ingestd.jobkinds import JobKind

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent
# The console script next to the interpreter running us: the venv's `ingestd`.
INGESTD = str(Path(sys.executable).with_name("ingestd"))
PLUGIN = "bench_queue_plugin"
KIND = "bench-noop"
WORKERS = 4
START_TIMEOUT = 60.0  # seconds for worker processes to connect and say "ready"
RUN_TIMEOUT = 900.0  # seconds for one measured phase (all its workers)
INSTALL_TIMEOUT = 900.0  # seconds for creating the pgqueuer venv
EMPTY_SLEEP = 0.001  # a worker's pause after a claim that found nothing while jobs wait
POLL = 0.005  # the parent's polling interval (newcomer, caps; lanes polls 5x as often)
WEIGHTS = {"a": 2, "b": 1, "c": 1}  # weights: tenant -> queue_tenants.weight
CAP_WORKERS = 8  # caps: worker processes (each mostly sleeping in its 20 ms jobs)
CAP = 2  # caps: A's max_running
CAP_WEIGHT = 4  # caps: A's weight, so that without the cap A would hold more than CAP
CAP_HOLD = 0.020  # caps: seconds each job "runs" (between claim and done)
CAP_TENANTS = ["a", "b", "c", "d"]
LONG_KIND = str(JobKind.analyze_document)  # lanes: the long jobs (OCR)
LONG_HOLD = (0.1, 0.3)  # lanes: seconds a long job runs, uniform (its lanes drift apart)
LANE_TENANTS = 4  # lanes: tenants of the long jobs
LANE_GAP = (0.0, 0.15)  # lanes: seconds between one short job's start and the next probe


@dataclass(frozen=True)
class Plan:
    jobs: int  # throughput: jobs per run
    tenants: int  # throughput: ingestd tenants the jobs are spread over
    backlogs: tuple[int, int]  # latency: small and large backlog
    claims: int  # latency: measured claims per backlog
    warmup: int  # latency: unmeasured claims first
    churn: int  # latency: claims by 4 workers on the large backlog, then measure again
    fair: tuple[int, int, int]  # fairness: A, B, and each of C..J
    fair_claims: int  # fairness: claims in the window (all workers)
    newcomer_backlog: int  # newcomer: A's backlog
    newcomer_after: int  # newcomer: claims before K enqueues
    weight_claims: int  # weights: claims measured (all workers), each tenant has as many jobs
    cap_claims: int  # caps: claims by the CAP_WORKERS workers
    cap_backlogs: tuple[int, int]  # caps: A, and each of B..D
    lane_jobs: int  # lanes: long jobs queued
    lane_probes: int  # lanes: short jobs timed per run


FULL = Plan(
    jobs=20_000,
    tenants=10,
    backlogs=(1_000, 1_000_000),
    claims=500,
    warmup=50,
    churn=20_000,
    fair=(20_000, 2_000, 200),
    fair_claims=1_000,
    newcomer_backlog=20_000,
    newcomer_after=1_000,
    weight_claims=3_000,
    cap_claims=2_400,
    cap_backlogs=(5_000, 2_000),
    lane_jobs=1_000,
    lane_probes=12,
)
SMALL = Plan(
    jobs=2_000,
    tenants=10,
    backlogs=(1_000, 10_000),
    claims=200,
    warmup=20,
    churn=2_000,
    fair=(5_000, 500, 50),
    fair_claims=250,
    newcomer_backlog=3_000,
    newcomer_after=300,
    weight_claims=600,
    cap_claims=480,
    cap_backlogs=(1_000, 500),
    lane_jobs=1_000,
    lane_probes=6,
)
SMALL_TENANTS = 4  # latency: small tenants next to the big one
SMALL_TENANT_JOBS = 100


# -- SQL --------------------------------------------------------------------------------
# n documents with one queued job each per (tenant, n), in one statement. Arrival order:
# round-robin over the tenants, shuffled, or one tenant after the other.
ORDERS = {"interleaved": "g, tenant_id", "shuffled": "random()", "sequential": "tenant_id, g"}
LOAD_SQL = """
WITH spec AS (
    SELECT t.id AS tenant_id, s.n
    FROM unnest(%(names)s::text[], %(counts)s::int[]) AS s(name, n)
    JOIN tenants t ON t.name = s.name),
src AS (SELECT spec.tenant_id, g FROM spec, generate_series(1, spec.n) AS g),
d AS (
    INSERT INTO documents (tenant_id, sha256, size_bytes, mime_type, extension,
        original_filename, source, archive_path, title, processing_status)
    SELECT tenant_id,
           encode(sha256(convert_to(%(tag)s || ':' || tenant_id || ':' || g, 'UTF8')), 'hex'),
           1, 'application/pdf', 'pdf', 'bench.pdf', 'bench', 'bench', 'bench', 'queued'
    FROM src ORDER BY {order}
    RETURNING id, tenant_id)
INSERT INTO processing_jobs (tenant_id, document_id, kind, created_at, next_attempt_at)
SELECT tenant_id, id, %(kind)s, t, t FROM (
    -- Arrived 1 ms apart, as if enqueued one by one (one now() for all would let btree
    -- deduplication shrink the ready index, (kind, tenant_id, next_attempt_at, id)).
    SELECT tenant_id, id, now() - make_interval(
        secs => (count(*) OVER () - row_number() OVER (ORDER BY id)) / 1000.0) AS t
    FROM d) AS arrived
ORDER BY id
"""

# The baseline: oldest job first, whoever it belongs to (what pgqueuer and procrastinate
# effectively do), with the same job and document updates as ingestd's claim and done.
FIFO_INDEX = """
CREATE INDEX bench_fifo_ready ON processing_jobs (id) WHERE status = 'queued';
-- A function, like ingestd_claim: one autocommitted statement that commits without
-- waiting for the WAL flush, so both claims pay the same round trips and commit.
CREATE FUNCTION bench_fifo_claim(p_worker TEXT, p_lease FLOAT8)
RETURNS TABLE (id BIGINT, tenant_id BIGINT, document_id BIGINT, attempt UUID)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    WITH j AS (
        UPDATE processing_jobs p
        SET status = 'processing', started_at = now(), updated_at = now(),
            lease_expires_at = now() + make_interval(secs => p_lease), worker_id = p_worker,
            attempt = gen_random_uuid(), finished_at = NULL
        WHERE p.id = (SELECT r.id FROM processing_jobs r
                      WHERE r.status = 'queued' AND r.next_attempt_at <= now()
                      ORDER BY r.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED)
        RETURNING p.id, p.tenant_id, p.document_id, p.attempt
    ), d AS (
        UPDATE documents SET processing_status = 'processing'
        WHERE documents.id IN (SELECT j.document_id FROM j)
    )
    SELECT j.id, j.tenant_id, j.document_id, j.attempt FROM j;
END $$;
"""
FIFO_CLAIM = "SELECT * FROM bench_fifo_claim(%(worker)s, %(lease)s)"
# Done is the same statement for both claims: only the choice of job differs.
FIFO_DONE = sql.query("job_done")
ANY_QUEUED = "SELECT EXISTS (SELECT 1 FROM processing_jobs WHERE status = 'queued') AS q"


# -- pgqueuer, in its own venv ----------------------------------------------------------
PGQ_HELPER = r'''
"""pgqueuer's side of bench/queue.py; runs in the pgqueuer venv, not the project's."""
import asyncio
import json
import sys

import psycopg
import pgqueuer
from pgqueuer import PgQueuer, Queries
from pgqueuer.db import PsycopgDriver
from pgqueuer.types import QueueExecutionMode


async def connect(dsn):
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


async def setup(dsn, n, kind):
    async with await connect(dsn) as conn:
        queries = Queries(PsycopgDriver(conn))
        await queries.install()
        for start in range(0, n, 1000):
            k = min(1000, n - start)
            await queries.enqueue([kind] * k, [None] * k, [0] * k)
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("CHECKPOINT")
    print(json.dumps({"version": pgqueuer.__version__}), flush=True)


async def consume(dsn, batch, kind):
    conn = await connect(dsn)
    pgq = PgQueuer(PsycopgDriver(conn))

    @pgq.entrypoint(kind)
    async def noop(job):
        return None

    print("ready", flush=True)
    line = await asyncio.to_thread(sys.stdin.readline)
    if line.strip() != "go":
        return
    await pgq.qm.run(batch_size=batch, mode=QueueExecutionMode.drain)
    await conn.close()
    print(json.dumps({"ok": True}), flush=True)


if __name__ == "__main__":
    cmd, dsn = sys.argv[1], sys.argv[2]
    if cmd == "setup":
        asyncio.run(setup(dsn, int(sys.argv[3]), sys.argv[4]))
    else:
        asyncio.run(consume(dsn, int(sys.argv[3]), sys.argv[4]))
'''


def pgq_venv(path: Path) -> Path:
    """The venv's python, created with ``pip install pgqueuer psycopg[binary]`` if missing."""
    python = path / "bin" / "python"
    probe = [str(python), "-c", "import pgqueuer, psycopg"]
    if python.exists() and subprocess.run(probe, capture_output=True, timeout=120).returncode == 0:
        return python
    print(f"creating {path} with pgqueuer (PyPI) ...", file=sys.stderr)
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(path)], check=True, timeout=INSTALL_TIMEOUT)
    res = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "pgqueuer", "psycopg[binary]"],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
    )
    if res.returncode != 0:
        raise BenchError(f"pip install pgqueuer failed:\n{res.stdout}{res.stderr}")
    return python


# -- databases --------------------------------------------------------------------------
@dataclass
class Bench:
    cluster: EmbeddedPostgres
    work: Path
    pgq_python: Path | None
    pgq_version: str = "-"

    def admin(self, statement: str) -> None:
        with Database(self.cluster.conninfo_for("postgres")) as admin, admin.autocommit() as tx:
            tx.raw(statement)

    def fresh(self, name: str, *, schema: bool = True) -> str:
        """A new database (dropped first if a previous round left it); its conninfo."""
        self.admin(f'DROP DATABASE IF EXISTS "{name}"')
        self.admin(f'CREATE DATABASE "{name}"')
        conninfo = self.cluster.conninfo_for(name)
        if schema:
            with Database(conninfo) as db:
                migrate(db)
        return conninfo

    def copy(self, source: str, name: str) -> str:
        """A copy of ``source`` (no connections to it may be open)."""
        self.admin(f'DROP DATABASE IF EXISTS "{name}"')
        self.admin(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
        return self.cluster.conninfo_for(name)

    def drop(self, name: str) -> None:
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def one(self, conninfo: str, statement: str, params: dict[str, Any] | None = None) -> Any:
        with Database(conninfo) as db, db.transaction() as tx:
            rows = tx.raw(statement, params)
        return rows[0] if rows else None


def load(
    conninfo: str, spec: Sequence[tuple[str, int]], order: str, tag: str = "b", kind: str = KIND
) -> None:
    """Tenants and ``n`` documents + queued jobs (of ``kind``) each, then VACUUM ANALYZE and
    CHECKPOINT."""
    names = [name for name, _ in spec]
    with Database(conninfo) as db:
        with db.transaction() as tx:
            tx.raw(
                "INSERT INTO tenants (name, status) SELECT unnest(%(names)s::text[]), 'active'",
                {"names": names},
            )
            tx.raw("SELECT setseed(0.42)")
            tx.raw(
                LOAD_SQL.format(order=ORDERS[order]),
                {"names": names, "counts": [n for _, n in spec], "tag": tag, "kind": kind},
            )
        with db.autocommit() as tx:
            tx.raw("VACUUM ANALYZE documents, processing_jobs, queue_tenants")
            tx.raw("CHECKPOINT")


def add_job(tx: Tx, tenant: str, tag: str) -> int:
    """One more document + job for ``tenant``; the job's id."""
    row = tx.raw(
        LOAD_SQL.format(order=ORDERS["sequential"]) + " RETURNING id",
        {"names": [tenant], "counts": [1], "tag": tag, "kind": KIND},
    )[0]
    return int(row["id"])


def jain(values: Sequence[float]) -> float:
    total = sum(values)
    squares = sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else 0.0


def pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def order(items: list[T], rnd: int) -> list[T]:
    # Alternate who goes first, so no side always gets the warmer (or fuller) cluster.
    return items if rnd % 2 == 0 else items[::-1]


# -- 1. throughput ----------------------------------------------------------------------
def tenants(n: int, prefix: str = "t") -> list[str]:
    return [f"{prefix}{i:02d}" for i in range(n)]
