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
import random
import select
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench._common import BenchError, bench_cluster, median, print_table, run_main
from ingestd.config.settings import WorkerConfig
from ingestd.db.database import Database, Tx, connect_once, sql
from ingestd.db.pgcluster import EmbeddedPostgres
from ingestd.db.schema import migrate
from ingestd.jobkinds import JobKind
from ingestd.queue.claims import NOTIFY_CHANNEL, Job, Queue
from ingestd.queue.enqueue import enqueue
from ingestd.queue.pools import EVERYTHING, Scope, resolve

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


# -- worker processes -------------------------------------------------------------------
def lane_scope(lane: str | None) -> Scope:
    """The claim's scope of a bench worker: the default pool's short lane, or everything
    (the default pool's other lanes: every tenant, every kind)."""
    if lane != "short":
        return EVERYTHING
    short = resolve(WorkerConfig()).short_scope
    assert short is not None  # the default pool serves every kind, the short ones too
    return short


def worker_main(spec: dict[str, Any]) -> None:
    """One worker process: "ready", wait for "go", claim + done until quota/empty/"stop".

    Optional in ``spec``: ``lane`` ("short": the default pool's short lane), ``hold``
    (kind -> [min, max] seconds the job "runs" between claim and done, uniform), ``idle``
    (seconds to wait after a claim found nothing while jobs are queued) and ``listen``
    (that wait ends early on a NOTIFY ingestd_jobs, as a real worker's idle wait does:
    worker/listener.py).
    """
    db = Database(spec["conninfo"], max_size=1, name=spec["id"]).open()
    queue = Queue(db, WorkerConfig(), spec["id"], scope=lane_scope(spec.get("lane")))
    fifo = spec["mode"] == "fifo"
    hold: dict[str, list[float]] = spec.get("hold") or {}
    idle = float(spec.get("idle", EMPTY_SLEEP))
    rng = random.Random(spec["id"])
    listener = None
    if spec.get("listen"):
        listener = connect_once(spec["conninfo"], autocommit=True, timeout=START_TIMEOUT)
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
    params = {"worker": spec["id"], "lease": queue.config.lease_seconds}
    with db.transaction() as tx:
        tx.raw("SELECT 1")
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.readline()  # "stop", or EOF when the parent is gone
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    quota = spec["quota"]
    deadline = time.monotonic() + RUN_TIMEOUT
    claims = empty = 0
    claim_log: list[tuple[float, int]] = []  # (wall clock when the claim returned, job id)
    while (quota is None or claims < quota) and not stop.is_set():
        if time.monotonic() > deadline:
            break
        if fifo:
            with db.autocommit() as tx:  # as Queue.claim
                row = tx.raw(FIFO_CLAIM, params)
            job_id = row[0]["id"] if row else None
            attempt = row[0]["attempt"] if row else None
        else:
            job = queue.claim()
            job_id = job.id if job else None
        if spec.get("log") and job_id is not None:
            claim_log.append((time.time(), job_id))
        if job_id is None:
            with db.transaction() as tx:
                if not tx.raw(ANY_QUEUED)[0]["q"]:
                    break
            # Jobs wait, but every tenant that has some was locked by another claimer (or
            # capped, or none is in this lane's scope).
            empty += 1
            if listener is None:
                time.sleep(idle)
            else:
                select.select([listener.fileno()], [], [], idle)
                for _ in listener.notifies(timeout=0):
                    pass
            continue
        if not fifo and hold:
            assert job is not None
            if span := hold.get(job.kind):
                time.sleep(rng.uniform(*span))
        if fifo:
            with db.autocommit() as tx:  # as Queue.done
                tx.raw(FIFO_DONE, {**params, "id": job_id, "attempt": attempt})
        else:
            assert job is not None
            queue.done(job)
        claims += 1
    if listener is not None:
        listener.close()
    db.close()
    print(json.dumps({"claims": claims, "empty": empty, "log": claim_log}), flush=True)


class Procs:
    """Worker processes speaking lines: "ready" -> "go" -> ["stop"] -> one result line."""

    def __init__(self, argvs: list[list[str]], logdir: Path, name: str) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        for i, argv in enumerate(argvs):
            log = logdir / f"{name}-{i}.log"
            self.logs.append(log)
            with open(log, "wb") as err:
                self.procs.append(
                    subprocess.Popen(
                        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=ROOT
                    )
                )

    def _line(self, i: int, deadline: float) -> str:
        proc = self.procs[i]
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                line = proc.stdout.readline().decode().strip()
                if line:
                    return line
                proc.wait(timeout=10)
                break
        tail = self.logs[i].read_text(errors="replace")[-3000:]
        raise BenchError(f"worker {i} ({proc.args!r}): no answer (exit {proc.poll()}):\n{tail}")

    def _send(self, word: str) -> None:
        for p in self.procs:
            assert p.stdin is not None
            with contextlib.suppress(OSError):
                p.stdin.write(word.encode() + b"\n")
                p.stdin.flush()

    def ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        for i in range(len(self.procs)):
            if (line := self._line(i, deadline)) != "ready":
                raise BenchError(f"worker {i}: expected 'ready', got {line!r}")

    def go(self) -> float:
        start = time.time()
        self._send("go")
        return start

    def stop(self) -> None:
        self._send("stop")

    def results(self) -> list[dict[str, Any]]:
        deadline = time.monotonic() + RUN_TIMEOUT + 60
        out = [json.loads(self._line(i, deadline)) for i in range(len(self.procs))]
        for i, p in enumerate(self.procs):
            if p.wait(timeout=60) != 0:
                raise BenchError(
                    f"worker {i} exited {p.returncode}:\n"
                    f"{self.logs[i].read_text(errors='replace')[-3000:]}"
                )
        return out

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
            for stream in (p.stdin, p.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


@contextlib.contextmanager
def processes(argvs: list[list[str]], logdir: Path, name: str) -> Iterator[Procs]:
    procs = Procs(argvs, logdir, name)
    try:
        procs.ready()
        yield procs
    finally:
        procs.kill()


def worker_argvs(
    conninfo: str,
    mode: str,
    quota: int | None,
    tag: str,
    log: bool = False,
    n: int = WORKERS,
    **extra: Any,
) -> list[list[str]]:
    """``n`` worker processes' command lines; ``extra`` goes into each spec (worker_main)."""
    return [
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            json.dumps(
                {
                    "conninfo": conninfo,
                    "mode": mode,
                    "quota": quota,
                    "id": f"{tag}-w{i}",
                    "log": log,
                    **extra,
                }
            ),
        ]
        for i in range(n)
    ]


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


def order(items: list[str], rnd: int) -> list[str]:
    # Alternate who goes first, so no side always gets the warmer (or fuller) cluster.
    return items if rnd % 2 == 0 else items[::-1]


# -- 1. throughput ----------------------------------------------------------------------
def tenants(n: int, prefix: str = "t") -> list[str]:
    return [f"{prefix}{i:02d}" for i in range(n)]


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


# -- 3. fairness ------------------------------------------------------------------------
FAIR_TENANTS = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
PER_TENANT = """
SELECT t.name, count(*) FILTER (WHERE j.status <> 'queued') AS claimed,
       count(*) FILTER (WHERE j.status = 'queued') AS queued
FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id GROUP BY t.name ORDER BY t.name
"""


def fairness(bench: Bench, plan: Plan, rnd: int) -> dict[str, dict[str, Any]]:
    a, b, rest = plan.fair
    spec = [("a", a), ("b", b), *((t, rest) for t in FAIR_TENANTS[2:])]
    names = {"ingestd": f"fair_ingestd_{rnd}", "fifo": f"fair_fifo_{rnd}"}
    dbs = {"ingestd": bench.fresh(names["ingestd"])}
    load(dbs["ingestd"], spec, "shuffled")
    dbs["fifo"] = bench.copy(names["ingestd"], names["fifo"])
    bench.one(dbs["fifo"], FIFO_INDEX)
    quota = plan.fair_claims // WORKERS
    out = {}
    for mode in order(["ingestd", "fifo"], rnd):
        tag = f"fair_{mode}_{rnd}"
        with processes(worker_argvs(dbs[mode], mode, quota, tag), bench.work, tag) as procs:
            procs.go()
            procs.results()
        with Database(dbs[mode]) as db, db.transaction() as tx:
            rows = tx.raw(PER_TENANT)
        claimed = [int(r["claimed"]) for r in rows]
        out[mode] = {
            "jain": jain(claimed),
            "claimed": claimed,
            "min_queued": min(int(r["queued"]) for r in rows),
        }
    for name in names.values():
        bench.drop(name)
    return out


# -- 4. newcomer ------------------------------------------------------------------------
def newcomer(bench: Bench, plan: Plan, rnd: int) -> dict[str, dict[str, Any]]:
    names = {"ingestd": f"new_ingestd_{rnd}", "fifo": f"new_fifo_{rnd}"}
    dbs = {"ingestd": bench.fresh(names["ingestd"])}
    load(dbs["ingestd"], [("a", plan.newcomer_backlog)], "sequential")
    with Database(dbs["ingestd"]) as db, db.transaction() as tx:
        tx.raw("INSERT INTO tenants (name, status) VALUES ('k', 'active')")
    dbs["fifo"] = bench.copy(names["ingestd"], names["fifo"])
    bench.one(dbs["fifo"], FIFO_INDEX)
    out = {}
    for mode in order(["ingestd", "fifo"], rnd):
        tag = f"new_{mode}_{rnd}"
        argvs = worker_argvs(dbs[mode], mode, None, tag, log=True)
        with Database(dbs[mode], max_size=1) as db, processes(argvs, bench.work, tag) as procs:
            out[mode] = newcomer_run(db, plan, procs)
    for name in names.values():
        bench.drop(name)
    return out


def newcomer_run(db: Database, plan: Plan, procs: Procs) -> dict[str, Any]:
    def claimed() -> int:
        with db.transaction() as tx:
            q = "SELECT count(*) AS n FROM processing_jobs WHERE status <> 'queued'"
            return int(tx.raw(q)[0]["n"])

    procs.go()
    deadline = time.monotonic() + RUN_TIMEOUT
    while claimed() < plan.newcomer_after:
        if time.monotonic() > deadline:
            raise BenchError("newcomer: workers too slow")
        time.sleep(POLL)
    # Claim times come from the workers (when each claim returned): the claim's started_at
    # is its transaction's start, which can precede the job's COMMIT when the claim waited
    # for its turn (ingestd_claim's advisory lock).
    before_commit = time.time()
    with db.transaction() as tx:
        job_id = add_job(tx, "k", "newcomer")
    committed = time.time()
    started = None
    while started is None and time.monotonic() < deadline:
        with db.transaction() as tx:
            started = tx.raw(
                "SELECT started_at FROM processing_jobs WHERE id = %(id)s", {"id": job_id}
            )[0]["started_at"]
        if started is None:
            time.sleep(POLL)
    procs.stop()
    results = procs.results()
    if started is None:
        raise BenchError(f"newcomer: K's job not started after {RUN_TIMEOUT:.0f} s")
    log = sorted((t, j) for r in results for t, j in r["log"])
    at = next((t for t, j in log if j == job_id), None)
    if at is None:
        raise BenchError("newcomer: K's job started, but no worker logged its claim")
    before = sum(1 for t, j in log if committed <= t < at and j != job_id)
    return {
        "claims": before,
        "ms": (at - before_commit) * 1000,
        "empty": sum(r["empty"] for r in results),
    }


# -- 5. weighted shares -----------------------------------------------------------------
# Each tenant's claims among the first n (the claims' started_at order).
FIRST_CLAIMS = """
SELECT t.name, j.tenant_id FROM (
    SELECT tenant_id, started_at, id FROM processing_jobs WHERE started_at IS NOT NULL
    ORDER BY started_at, id LIMIT %(n)s) AS j
JOIN tenants t ON t.id = j.tenant_id ORDER BY j.started_at, j.id
"""


def set_limits(conninfo: str, name: str, weight: int | None, max_running: int | None) -> None:
    """A tenant's weight and cap, as `ingestd tenant limits` sets them (tenant_limits_set)."""
    with Database(conninfo, max_size=1) as db, db.transaction() as tx:
        row = tx.one(
            "tenant_limits_set",
            {
                "name": name,
                "weight": weight,
                "max_running": max_running,
                "uncap": max_running is None,
            },
        )
    if row is None:
        raise BenchError(f"no tenant {name!r} to set limits for")


def weights(bench: Bench, plan: Plan, rnd: int) -> dict[str, dict[str, Any]]:
    """A weight 2, B and C weight 1, all backlogged; ingestd and FIFO on the same data."""
    n = plan.weight_claims
    names = {"ingestd": f"w_ingestd_{rnd}", "fifo": f"w_fifo_{rnd}"}
    dbs = {"ingestd": bench.fresh(names["ingestd"])}
    # Each tenant could take every claim: all stay backlogged whatever the shares.
    load(dbs["ingestd"], [(t, n) for t in WEIGHTS], "interleaved")
    for tenant, weight in WEIGHTS.items():
        set_limits(dbs["ingestd"], tenant, weight, None)
    dbs["fifo"] = bench.copy(names["ingestd"], names["fifo"])
    bench.one(dbs["fifo"], FIFO_INDEX)
    out: dict[str, dict[str, Any]] = {}
    for mode in order(["ingestd", "fifo"], rnd):
        tag = f"w_{mode}_{rnd}"
        with processes(worker_argvs(dbs[mode], mode, n // WORKERS, tag), bench.work, tag) as p:
            p.go()
            p.results()
        with Database(dbs[mode], max_size=1) as db, db.transaction() as tx:
            claims = [r["name"] for r in tx.raw(FIRST_CLAIMS, {"n": n})]
        if len(claims) != n:
            raise BenchError(f"weights {mode}: {len(claims)} of {n} claims")
        out[mode] = {
            "share": {t: claims.count(t) / n for t in WEIGHTS},
            "first": "".join(claims[:24]),
        }
    for name in names.values():
        bench.drop(name)
    total = sum(WEIGHTS.values())
    for res in out.values():
        res["error"] = max(
            abs(res["share"][t] - w / total) / (w / total) for t, w in WEIGHTS.items()
        )
    return out


# -- 6. caps ----------------------------------------------------------------------------
CAP_SAMPLE = """
SELECT count(*) FILTER (WHERE tenant_id = %(a)s) AS a, count(*) AS n,
       (SELECT count(*) FROM processing_jobs WHERE status = 'done') AS done
FROM processing_jobs WHERE status = 'processing'
"""


def caps(bench: Bench, plan: Plan, rnd: int) -> dict[str, dict[str, Any]]:
    """A capped at CAP (weight CAP_WEIGHT) among B..D; baseline: the same without the cap."""
    a, rest = plan.cap_backlogs
    names = {"capped": f"cap_on_{rnd}", "uncapped": f"cap_off_{rnd}"}
    dbs = {"capped": bench.fresh(names["capped"])}
    load(dbs["capped"], [("a", a), *((t, rest) for t in CAP_TENANTS[1:])], "shuffled")
    set_limits(dbs["capped"], "a", CAP_WEIGHT, None)
    dbs["uncapped"] = bench.copy(names["capped"], names["uncapped"])
    set_limits(dbs["capped"], "a", CAP_WEIGHT, CAP)
    quota = plan.cap_claims // CAP_WORKERS
    out: dict[str, dict[str, Any]] = {}
    for mode in order(["capped", "uncapped"], rnd):
        tag = f"cap_{mode}_{rnd}"
        argvs = worker_argvs(
            dbs[mode], "ingestd", quota, tag, n=CAP_WORKERS, hold={KIND: [CAP_HOLD, CAP_HOLD]}
        )
        with Database(dbs[mode], max_size=1) as db, processes(argvs, bench.work, tag) as procs:
            out[mode] = caps_run(db, procs, quota * CAP_WORKERS)
        with Database(dbs[mode], max_size=1) as db, db.transaction() as tx:
            rows = tx.raw(PER_TENANT)
        out[mode]["claimed"] = [int(r["claimed"]) for r in rows]
        out[mode]["min_queued"] = min(int(r["queued"]) for r in rows)
    for name in names.values():
        bench.drop(name)
    return out


def caps_run(db: Database, procs: Procs, total: int) -> dict[str, Any]:
    """Samples (A running, all running) every POLL until ``total`` jobs are done."""
    with db.transaction() as tx:
        a_id = tx.raw("SELECT id FROM tenants WHERE name = 'a'")[0]["id"]
    samples: list[tuple[int, int, int]] = []  # (A running, all running, done)
    procs.go()
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        with db.autocommit() as tx:
            r = tx.raw(CAP_SAMPLE, {"a": a_id})[0]
        samples.append((int(r["a"]), int(r["n"]), int(r["done"])))
        if r["done"] >= total:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"caps: {r['done']} of {total} jobs done after {RUN_TIMEOUT:.0f} s")
        time.sleep(POLL)
    results = procs.results()
    # Means over the steady part: after the first 5 % and before the last 10 % of the jobs
    # (the workers start one by one and end as their quotas run out).
    steady = [s for s in samples if 0.05 * total <= s[2] < 0.9 * total] or samples
    return {
        "max_a": max(s[0] for s in samples),
        "mean_a": sum(s[0] for s in steady) / len(steady),
        "mean_all": sum(s[1] for s in steady) / len(steady),
        "max_all": max(s[1] for s in samples),
        "samples": len(samples),
        "empty": sum(res["empty"] for res in results),
    }


# -- 7. lanes ---------------------------------------------------------------------------
LONG_BUSY = """
SELECT count(*) AS n FROM processing_jobs WHERE status = 'processing' AND kind = %(kind)s
"""
PROBE_STARTED = "SELECT started_at, worker_id FROM processing_jobs WHERE id = %(id)s"


def lanes(bench: Bench, plan: Plan, rnd: int) -> dict[str, dict[str, Any]]:
    """Long jobs on WORKERS long lanes, with and without a short lane beside them."""
    names = {"short": f"lanes_short_{rnd}", "none": f"lanes_none_{rnd}"}
    dbs = {"short": bench.fresh(names["short"])}
    n = plan.lane_jobs
    per = [n // LANE_TENANTS + (i < n % LANE_TENANTS) for i in range(LANE_TENANTS)]
    load(
        dbs["short"],
        list(zip(tenants(LANE_TENANTS, "l"), per, strict=True)),
        "shuffled",
        kind=LONG_KIND,
    )
    dbs["none"] = bench.copy(names["short"], names["none"])
    out: dict[str, dict[str, Any]] = {}
    for mode in order(["short", "none"], rnd):
        tag = f"lanes_{mode}_{rnd}"
        argvs = worker_argvs(dbs[mode], "ingestd", None, tag, hold={LONG_KIND: list(LONG_HOLD)})
        if mode == "short":
            argvs += worker_argvs(
                dbs[mode],
                "ingestd",
                None,
                f"{tag}-short",
                n=1,
                lane="short",
                idle=0.25,
                listen=True,
            )
        with Database(dbs[mode], max_size=1) as db, processes(argvs, bench.work, tag) as procs:
            out[mode] = lanes_run(db, plan, procs, random.Random(rnd))
        with Database(dbs[mode], max_size=1) as db, db.transaction() as tx:
            left = tx.raw(
                "SELECT count(*) AS n FROM processing_jobs WHERE status = 'queued' "
                "AND kind = %(kind)s",
                {"kind": LONG_KIND},
            )[0]["n"]
        out[mode]["long_queued"] = int(left)
    for name in names.values():
        bench.drop(name)
    return out


def lanes_run(db: Database, plan: Plan, procs: Procs, rng: random.Random) -> dict[str, Any]:
    """Probes: a new tenant's provision-tenant job whenever every long lane is busy."""
    procs.go()
    deadline = time.monotonic() + RUN_TIMEOUT
    # The lanes start their first long jobs together: let them drift apart first.
    time.sleep(LONG_HOLD[1])
    delays: list[float] = []
    commits: list[float] = []
    by_short = 0
    for i in range(plan.lane_probes):
        while True:
            with db.autocommit() as tx:
                busy = tx.raw(LONG_BUSY, {"kind": LONG_KIND})[0]["n"]
            if busy >= WORKERS:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"lanes: only {busy} of {WORKERS} long lanes busy")
            time.sleep(POLL / 5)
        with db.transaction() as tx:
            # Visible as soon as its commit record is written, not after the WAL flush: the
            # delay measured is the queue's, not the disk's.
            tx.raw("SET LOCAL synchronous_commit = off")
            tenant = tx.raw(
                "INSERT INTO tenants (name, status) VALUES (%(name)s, 'creating') RETURNING id",
                {"name": f"new{i}"},
            )[0]["id"]
            job_id = enqueue(tx, tenant_id=tenant, kind=JobKind.provision_tenant)
            # The transaction's last statement: the COMMIT follows at once.
            before = tx.raw("SELECT clock_timestamp() AS t")[0]["t"]
        with db.autocommit() as tx:
            after = tx.raw("SELECT clock_timestamp() AS t")[0]["t"]
        commits.append((after - before).total_seconds() * 1000)
        while True:
            with db.autocommit() as tx:
                row = tx.raw(PROBE_STARTED, {"id": job_id})[0]
            if row["started_at"] is not None:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"lanes: provision-tenant job not started after {RUN_TIMEOUT} s")
            time.sleep(POLL / 5)
        delays.append((row["started_at"] - before).total_seconds() * 1000)
        by_short += row["worker_id"].endswith("-short-w0")
        time.sleep(rng.uniform(*LANE_GAP))
    procs.stop()
    results = procs.results()
    return {
        "delays": delays,
        "p50": median(delays),
        "max": max(delays),
        "commit_ms": median(commits),
        "by_short": by_short,
        "empty": sum(r["empty"] for r in results),
    }


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
        res = latency(bench, plan)
        for key, what in (("p50", "median"), ("p95", "p95")):
            rows.append(
                Row(
                    f"claim latency {what} (ms), backlog {hi:,} vs {lo:,}",
                    [res[hi][key]],
                    [res[lo][key]],
                    f"backlog {lo:,}",
                    "<= 1.2" if key == "p50" else "-",
                    "{:.2f}",
                )
            )
        for key, when in (("buffers_before", "before"), ("buffers_after", "after")):
            rows.append(
                Row(
                    f"  buffers hit+read of one claim (EXPLAIN), {when} the {plan.claims} claims",
                    [sum(res[hi][key].values())],
                    [sum(res[lo][key].values())],
                    f"backlog {lo:,}",
                )
            )
        churn = res[hi]["churn"]
        rows.append(
            Row(
                f"claim latency median (ms), backlog {hi:,}, after {plan.churn:,} more "
                f"claims by {WORKERS} workers",
                [churn["p50"]],
                [res[hi]["p50"]],
                "same, before them",
                "-",
                "{:.2f}",
            )
        )
        rows.append(
            Row(
                "  buffers hit+read of one claim (EXPLAIN), after them",
                [sum(churn["buffers"].values())],
                [sum(res[hi]["buffers_after"].values())],
                "same, before them",
            )
        )
        ratio = res[hi]["p50"] / res[lo]["p50"]
        goals.append(
            f"goal: claim latency median at {hi:,} within 1.2x of {lo:,}: "
            f"{'met' if ratio <= 1.2 else 'NOT met'} ({ratio:.2f})"
        )
        goals.append(
            f"claim buffers (EXPLAIN): backlog {lo:,} {res[lo]['buffers_before']} -> "
            f"{res[lo]['buffers_after']}, backlog {hi:,} {res[hi]['buffers_before']} "
            f"-> {res[hi]['buffers_after']} -> {churn['buffers']} after the churn "
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
