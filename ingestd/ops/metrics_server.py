"""The metrics listener of a process (/metrics, /healthz, /readyz) and the gauges only
the database, the spool and the state directory know.

Counters live in ingestd/runtime/metrics.py and are incremented where things happen. Queue depth
and the age of the oldest waiting job are read from PostgreSQL when Prometheus scrapes
(one cheap grouped query over the queue's partial indexes), so they are right even when
several hosts run workers; a scrape while the database is down yields only
``ingestd_queue_up 0``, never an error page. Given the config's pools, the same scrape
reads each pool's ready and running jobs and its live lanes on every host (one more
statement for all pools: ingestd.queue.pool_status). The spool backlog and the last
``ingestd verify`` come from the daemon's Spool object and ``<state_dir>/verify/last.json``;
the health checks (ingestd/runtime/health.py) are exported as gauges too, for dashboards.

Paths: ``/metrics`` (Prometheus text), ``/healthz`` and ``/readyz`` (JSON, 200 or 503),
anything else 404.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ingestd.archive.verify import PROBLEM_KINDS, last_run
from ingestd.config.settings import WorkerConfig, parse_listen
from ingestd.db.database import Database
from ingestd.errors import DatabaseError
from ingestd.queue import pool_status
from ingestd.runtime import metrics
from ingestd.runtime.health import Health, body

_NOT_FOUND = b"not found: this listener serves /metrics, /healthz and /readyz\n"


class _Handler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes every 15 s are not news; errors show up as ingestd_*_up gauges


def _app(health: Health | None) -> Callable[..., Iterable[bytes]]:
    prometheus = make_wsgi_app(REGISTRY)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return prometheus(environ, start_response)  # type: ignore[no-any-return]
        if health is not None and path in ("/healthz", "/readyz"):
            results = health.live() if path == "/healthz" else health.ready()
            payload = body(results)
            data = json.dumps(payload, ensure_ascii=False).encode() + b"\n"
            status = "200 OK" if payload["status"] == "ok" else "503 Service Unavailable"
            start_response(
                status,
                [
                    ("Content-Type", "application/json"),
                    ("Cache-Control", "no-store"),
                    ("Content-Length", str(len(data))),
                ],
            )
            return [data]
        start_response(
            "404 Not Found",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(_NOT_FOUND))),
            ],
        )
        return [_NOT_FOUND]

    return app


class MetricsEndpoint:
    """An HTTP server thread on ``listen`` (port + ``offset``): the default registry on
    /metrics and, given ``health``, /healthz and /readyz."""

    def __init__(self, listen: str, offset: int = 0, *, health: Health | None = None) -> None:
        host, port = parse_listen(listen)
        port = port + offset if port else 0
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
            0
        ][0]

        class Server(ThreadingMixIn, WSGIServer):
            daemon_threads = True
            address_family = family

        metrics.set_build_info()
        self._server = make_server(host, port, _app(health), Server, handler_class=_Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()
        self.address = (host, int(self._server.server_port))
        self._collectors: list[Collector] = []
        if health is not None:
            self.add_collector(HealthCollector(health))

    def add_collector(self, collector: Collector) -> None:
        """Registered now, unregistered by ``close``."""
        REGISTRY.register(collector)
        self._collectors.append(collector)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        for collector in self._collectors:
            REGISTRY.unregister(collector)
        self._collectors.clear()


class QueueCollector(Collector):
    """ingestd_queue_jobs{tenant,state} and ingestd_queue_oldest_ready_seconds{tenant};
    given the config's pools (``worker``, which a reload may replace),
    ingestd_pool_jobs{pool,state}, ingestd_pool_oldest_ready_seconds{pool} and
    ingestd_pool_lanes{pool,lane}, read in the same transaction."""

    STATES = ("ready", "retrying", "running")

    def __init__(self, db: Database, worker: WorkerConfig | None = None) -> None:
        self.db = db
        self.worker = worker  # None: no pool gauges
        self._lock = threading.Lock()  # one query at a time, however many scrapers

    @staticmethod
    def families() -> tuple[GaugeMetricFamily, ...]:
        up = GaugeMetricFamily("ingestd_queue_up", "1 if the queue could be read")
        # Failures are counted by the workers (ingestd_jobs_failed_total), not gauged over
        # a window here: a state gauge holds states.
        jobs = GaugeMetricFamily(
            "ingestd_queue_jobs",
            "Jobs by tenant and state (ready: queued and due; retrying: queued, waiting for "
            "backoff; running)",
            labels=["tenant", "state"],
        )
        oldest = GaugeMetricFamily(
            "ingestd_queue_oldest_ready_seconds",
            "Age of the oldest job ready to run, by tenant",
            labels=["tenant"],
        )
        pool_jobs = GaugeMetricFamily(
            "ingestd_pool_jobs",
            "Jobs by worker pool and state (ready: queued and due, in the pool's tenants "
            "and kinds; pools may overlap; running: claimed by the pool's workers)",
            labels=["pool", "state"],
        )
        pool_oldest = GaugeMetricFamily(
            "ingestd_pool_oldest_ready_seconds",
            "Age of the oldest job ready to run in the pool's tenants and kinds",
            labels=["pool"],
        )
        pool_lanes = GaugeMetricFamily(
            "ingestd_pool_lanes",
            "Live worker lanes of the pool on all hosts (lane: jobs, or short for the "
            "lanes of short kinds only)",
            labels=["pool", "lane"],
        )
        attention = GaugeMetricFamily(
            "ingestd_documents_attention",
            "Documents that need an operator (`ingestd documents attention`), by tenant; "
            "not failed jobs",
            labels=["tenant"],
        )
        return up, jobs, oldest, pool_jobs, pool_oldest, pool_lanes, attention

    def describe(self) -> Iterator[Any]:
        return iter(self.families())  # registering must not query the database

    def collect(self) -> Iterator[Any]:
        up, jobs, oldest, pool_jobs, pool_oldest, pool_lanes, attention = self.families()
        worker = self.worker
        try:
            with self._lock, self.db.transaction() as tx:
                tx.raw("SET LOCAL statement_timeout = 2000")
                rows = tx.all("status_queue")
                needing = tx.all("status_attention_documents")
                by_pool = pool_status.read(tx, worker) if worker is not None else []
        except DatabaseError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for r in rows:
            for state in self.STATES:
                jobs.add_metric([r["tenant"], state], int(r[state]))
            oldest.add_metric([r["tenant"]], float(r["oldest_ready_seconds"] or 0))
        for r in needing:
            attention.add_metric([r["tenant"]], int(r["n"]))
        yield up
        yield jobs
        yield oldest
        yield attention
        if worker is None:
            return
        for p in by_pool:
            pool_jobs.add_metric([p.pool, "ready"], p.ready)
            pool_jobs.add_metric([p.pool, "running"], p.running)
            pool_oldest.add_metric([p.pool], float(p.oldest_ready_seconds or 0))
            pool_lanes.add_metric([p.pool, "jobs"], p.jobs_lanes)
            pool_lanes.add_metric([p.pool, "short"], p.short_lanes)
        yield pool_jobs
        yield pool_oldest
        yield pool_lanes


class DaemonCollector(Collector):
    """The spool backlog (the daemon's Spool object) and the last ``ingestd verify``
    (``<state_dir>/verify/last.json``): cheap, no database, right during an outage."""

    def __init__(self, spool: Callable[[], dict[str, int]], state_dir: Path) -> None:
        self.spool = spool  # Spool.snapshot
        self.state_dir = state_dir

    @staticmethod
    def families() -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily(
                "ingestd_spool_pending_uploads",
                "Uploads acknowledged and waiting in the spool for intake "
                "(including those being ingested now)",
            ),
            GaugeMetricFamily(
                "ingestd_spool_pending_bytes", "Bytes of the uploads waiting in the spool"
            ),
            GaugeMetricFamily(
                "ingestd_verify_last_run_timestamp_seconds",
                "When the last `ingestd verify` finished (Unix time; 0: never on this host)",
            ),
            GaugeMetricFamily(
                "ingestd_verify_last_problems",
                "Problems the last `ingestd verify` found, by kind (missing, "
                "altered, orphaned, temp, mode)",
                labels=["kind"],
            ),
            GaugeMetricFamily(
                "ingestd_verify_last_checked_documents",
                "Documents the last `ingestd verify` checked",
            ),
            GaugeMetricFamily(
                "ingestd_verify_last_duration_seconds", "How long the last `ingestd verify` took"
            ),
        ]

    def describe(self) -> Iterator[Any]:
        return iter(self.families())

    def collect(self) -> Iterator[Any]:
        pending, size, at, problems, checked, took = self.families()
        snap = self.spool()
        pending.add_metric([], snap.get("pending", 0))
        size.add_metric([], snap.get("bytes", 0))
        yield pending
        yield size
        run = last_run(self.state_dir)
        at.add_metric([], float(run.get("finished_epoch", 0)) if run else 0.0)
        yield at
        if run is None:
            return  # no result to show: "0 problems" would be a claim nobody checked
        kinds = run.get("by_kind") or {}
        for kind in PROBLEM_KINDS:
            problems.add_metric([kind], int(kinds.get(kind, 0)))
        checked.add_metric([], int(run.get("checked", 0)))
        took.add_metric([], float(run.get("duration_seconds", 0)))
        yield problems
        yield checked
        yield took


class HealthCollector(Collector):
    """/healthz and /readyz as gauges, for dashboards and alerts."""

    def __init__(self, health: Health) -> None:
        self.health = health

    @staticmethod
    def families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        ok = GaugeMetricFamily(
            "ingestd_health_check_ok",
            "1 if a check of /healthz (probe=live) or /readyz (probe=ready) passes, else 0",
            labels=["probe", "check"],
        )
        age = GaugeMetricFamily(
            "ingestd_loop_seconds_since_turn",
            "Seconds since each loop of the process last turned",
            labels=["loop"],
        )
        return ok, age

    def describe(self) -> Iterator[Any]:
        return iter(self.families())

    def collect(self) -> Iterator[Any]:
        ok, age = self.families()
        for probe, results in (("live", self.health.live()), ("ready", self.health.ready())):
            for r in results:
                ok.add_metric([probe, r.name], 1 if r.ok else 0)
        for loop in self.health.loops:
            age.add_metric([loop.name], self.health.loop_age(loop.name)[0])
        yield ok
        yield age


def register_queue_collector(db: Database, worker: WorkerConfig | None = None) -> QueueCollector:
    """The queue gauges; with ``worker`` (the config's pools), the pool gauges too."""
    collector = QueueCollector(db, worker)
    REGISTRY.register(collector)
    return collector


def unregister(collector: Collector) -> None:
    REGISTRY.unregister(collector)
