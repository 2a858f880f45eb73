"""`ingestd status` and the /metrics pool gauges per worker pool (issue 21), against a real
PostgreSQL: ready jobs in each pool's scope, running jobs its workers claimed, its live
lanes (one session per worker process, named ingestd-worker:POOL:JOBS:SHORT), and a
warning for a pool nobody serves."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily

from ingestd.db.database import Database
from ingestd.errors import ExitCode
from ingestd.ops.metrics_server import QueueCollector
from ingestd.queue import pools
from ingestd.queue.claims import Queue
from tests.conftest import Env, PgServer, run_cli
from tests.fixtures.queue import make_jobs

ACME_POOL = [{"name": "acme", "tenants": ["acme"]}]


def _env(make_env: Any) -> Env:
    env: Env = make_env(worker={"pools": ACME_POOL})
    return env


def _claim(db: Database, env: Env, pool: str, worker: str) -> None:
    """One job claimed by a lane of ``pool``."""
    scope = pools.resolve(env.config.worker, pool).scope
    assert Queue(db, env.config.worker, worker, scope=scope).claim() is not None


@contextlib.contextmanager
def _lanes(conninfo: str, *names: str) -> Iterator[None]:
    """Sessions named as worker processes name theirs (WorkerIdentity), held for the block."""
    conns = [psycopg.connect(conninfo, application_name=n, autocommit=True) for n in names]
    try:
        yield
    finally:
        for conn in conns:
            conn.close()


def _status(env: Env) -> dict[str, Any]:
    result = run_cli(env, "status", "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _samples(collector: QueueCollector) -> dict[tuple[str, tuple[str, ...]], float]:
    out = {}
    for family in collector.collect():
        assert isinstance(family, GaugeMetricFamily)
        for s in family.samples:
            out[(s.name, tuple(s.labels.values()))] = s.value
    return out


def test_status_reports_ready_running_and_scope_per_pool(make_env: Any, db: Database) -> None:
    """status --json gives each pool (default first) its tenants, kinds, ready jobs in its
    scope, running jobs it claimed (processing_jobs.pool) and the oldest ready job's age."""
    env = _env(make_env)
    make_jobs(db, "acme", 3)
    make_jobs(db, "beta", 2)
    make_jobs(db, "gamma", 1)
    _claim(db, env, "acme", "w1")
    _claim(db, env, "default", "w2")

    report = _status(env)
    by_pool = {p["pool"]: p for p in report["pools"]}
    assert [p["pool"] for p in report["pools"]] == ["default", "acme"]
    acme, default = by_pool["acme"], by_pool["default"]
    assert (acme["tenants"], acme["except"], acme["kinds"]) == (["acme"], [], None)
    assert (default["tenants"], default["except"], default["kinds"]) == (None, ["acme"], None)
    assert (acme["ready"], acme["running"]) == (2, 1)
    assert (default["ready"], default["running"]) == (2, 1)
    assert acme["oldest_ready_seconds"] is not None and acme["oldest_ready_seconds"] >= 0
    assert acme["lanes"] == default["lanes"] == {"jobs": 0, "short": 0}
    assert (acme["unit"], default["unit"]) == ("ingestd-worker@acme", "ingestd-worker@1")


def test_pool_with_ready_jobs_and_no_lane_says_what_to_start(make_env: Any, db: Database) -> None:
    """A pool with ready jobs and no live lane prints a line naming the unit to start; an
    idle pool without lanes prints none."""
    env = _env(make_env)
    make_jobs(db, "acme", 12)

    text = run_cli(env, "status").stdout
    assert (
        "pool acme: 12 job(s) ready and no worker serves it: systemctl start ingestd-worker@acme"
        in text
    )
    assert "pool default:" not in text  # nothing ready there
    assert "POOL" in text and "all others" in text
    report = _status(env)
    warnings = {p["pool"]: p["warning"] for p in report["pools"]}
    assert warnings["default"] is None and "ingestd-worker@acme" in warnings["acme"]

    make_jobs(db, "beta", 1)
    text = run_cli(env, "status").stdout
    assert "pool default: 1 job(s) ready and no worker serves it: " in text
    assert "systemctl start ingestd-worker@1" in text


def test_live_lanes_are_counted_per_pool_and_silence_the_warning(
    make_env: Any, db: Database, db_url: str, pg_server: PgServer
) -> None:
    """Sessions named ingestd-worker:POOL:JOBS:SHORT in this database (one per worker
    process, with its number of job and short slots) add up to the pool's live lanes
    (those of another database and other names do not); a served pool gets no warning."""
    env = _env(make_env)
    make_jobs(db, "acme", 2)
    make_jobs(db, "beta", 1)
    with (
        _lanes(db_url, "ingestd-worker:acme:1:1", "ingestd-worker:acme:1:0"),
        _lanes(db_url, "ingestd-lane:acme:jobs"),  # not a worker's name: not counted
        _lanes(pg_server.admin_conninfo, "ingestd-worker:default:2:1"),  # another database
    ):
        report = _status(env)
        text = run_cli(env, "status").stdout
    by_pool = {p["pool"]: p for p in report["pools"]}
    assert by_pool["acme"]["lanes"] == {"jobs": 2, "short": 1}
    assert by_pool["acme"]["warning"] is None
    assert by_pool["default"]["lanes"] == {"jobs": 0, "short": 0}
    assert "pool acme:" not in text and "pool default: 1 job(s) ready" in text


def test_a_shared_pool_covered_by_a_live_pool_of_all_kinds_does_not_warn(
    make_env: Any, db: Database, db_url: str
) -> None:
    """Pool ocr (kinds analyze-document, no tenants of its own) has no worker, but the
    default pool's live lanes claim the same jobs: no warning; dedicated acme warns."""
    env: Env = make_env(
        worker={"pools": [*ACME_POOL, {"name": "ocr", "kinds": ["analyze-document"]}]}
    )
    make_jobs(db, "acme", 1)
    make_jobs(db, "beta", 2)
    with _lanes(db_url, "ingestd-worker:default:1:0"):
        report = _status(env)
    warnings = {p["pool"]: p["warning"] for p in report["pools"]}
    assert warnings["ocr"] is None and warnings["default"] is None
    assert warnings["acme"] is not None and "ingestd-worker@acme" in warnings["acme"]


def test_queue_table_shows_each_tenants_weight_and_cap(make_env: Any, db: Database) -> None:
    """The per-tenant queue rows carry the tenant's weight and max_running (None: no cap)."""
    env = _env(make_env)
    make_jobs(db, "acme", 1)
    make_jobs(db, "beta", 1)
    with db.transaction() as tx:
        tx.raw(
            "UPDATE queue_tenants SET weight = 3, max_running = 2 "
            "WHERE tenant_id = (SELECT id FROM tenants WHERE name = 'acme')"
        )
    queue = {q["tenant"]: q for q in _status(env)["queue"]}
    assert (queue["acme"]["weight"], queue["acme"]["max_running"]) == (3, 2)
    assert (queue["beta"]["weight"], queue["beta"]["max_running"]) == (1, None)
    text = run_cli(env, "status").stdout
    assert "WEIGHT" in text and "MAX RUNNING" in text


def test_status_with_the_database_down_has_no_pools(make_env: Any) -> None:
    """With the database down status still answers (exit degraded) and lists no pools."""
    env: Env = make_env(
        worker={"pools": ACME_POOL},
        database={"url": "postgresql://ingestd@127.0.0.1:1/ingestd", "connect_timeout": 1},
    )
    result = run_cli(env, "status", "--json")
    assert result.returncode == ExitCode.degraded, result.stderr
    report = json.loads(result.stdout)
    assert report["database"]["up"] is False and report["pools"] == []
    text = run_cli(env, "status")
    assert "database: DOWN" in text.stdout and "POOL" not in text.stdout
    assert "Traceback" not in text.stderr


def test_metrics_collector_reports_jobs_age_and_lanes_per_pool(
    make_env: Any, db: Database, db_url: str
) -> None:
    """QueueCollector given the pools exports ingestd_pool_jobs{pool,state},
    ingestd_pool_oldest_ready_seconds{pool} and ingestd_pool_lanes{pool,lane}."""
    env = _env(make_env)
    make_jobs(db, "acme", 3)
    make_jobs(db, "beta", 1)
    _claim(db, env, "acme", "w1")
    with _lanes(db_url, "ingestd-worker:acme:1:0", "ingestd-worker:default:0:1"):
        got = _samples(QueueCollector(db, env.config.worker))
    assert got[("ingestd_queue_up", ())] == 1
    assert got[("ingestd_pool_jobs", ("acme", "ready"))] == 2
    assert got[("ingestd_pool_jobs", ("acme", "running"))] == 1
    assert got[("ingestd_pool_jobs", ("default", "ready"))] == 1
    assert got[("ingestd_pool_jobs", ("default", "running"))] == 0
    assert got[("ingestd_pool_oldest_ready_seconds", ("acme",))] >= 0
    assert got[("ingestd_pool_lanes", ("acme", "jobs"))] == 1
    assert got[("ingestd_pool_lanes", ("acme", "short"))] == 0
    assert got[("ingestd_pool_lanes", ("default", "jobs"))] == 0
    assert got[("ingestd_pool_lanes", ("default", "short"))] == 1
    # Without the pools (as before issue 21): the queue gauges only.
    assert not any(name.startswith("ingestd_pool_") for name, _ in _samples(QueueCollector(db)))


def test_metrics_collector_with_the_database_down_says_only_queue_up_0() -> None:
    """A scrape with the database unreachable yields ingestd_queue_up 0, no pool gauges
    and no exception."""
    from ingestd.config.settings import WorkerConfig

    worker = WorkerConfig.model_validate({"pools": ACME_POOL})
    with Database("postgresql://ingestd@127.0.0.1:1/ingestd", connect_timeout=1) as dead:
        got = _samples(QueueCollector(dead, worker))
    assert got == {("ingestd_queue_up", ()): 0}
