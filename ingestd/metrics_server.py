"""The /metrics endpoint of a process, and the queue gauges only the database knows.

Counters live in ingestd/metrics.py and are incremented where things happen. Queue depth
and the age of the oldest waiting job are read from PostgreSQL when Prometheus scrapes
(one cheap grouped query over the queue's partial indexes), so they are right even when
several hosts run workers; a scrape while the database is down yields only
``ingestd_queue_up 0``, never an error page.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ingestd.config import parse_listen
from ingestd.db import Database
from ingestd.errors import DatabaseError


class MetricsEndpoint:
    """An HTTP server thread serving the default registry on ``listen``."""

    def __init__(self, listen: str, offset: int = 0) -> None:
        host, port = parse_listen(listen)
        self._server, self._thread = start_http_server(port + offset if port else 0, host)
        self.address = (host, int(self._server.server_port))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class QueueCollector(Collector):
    """ingestd_queue_jobs{tenant,state} and ingestd_queue_oldest_ready_seconds{tenant}."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = threading.Lock()  # one query at a time, however many scrapers

    def collect(self) -> Iterator[Any]:
        up = GaugeMetricFamily("ingestd_queue_up", "1 if the queue could be read")
        jobs = GaugeMetricFamily(
            "ingestd_queue_jobs",
            "Jobs by tenant and state (ready: queued and due; retrying: queued, waiting for "
            "backoff; running; failed_last_hour)",
            labels=["tenant", "state"],
        )
        oldest = GaugeMetricFamily("ingestd_queue_oldest_ready_seconds",
                                   "Age of the oldest job ready to run, by tenant",
                                   labels=["tenant"])  # fmt: skip
        try:
            with self._lock, self.db.transaction() as tx:
                tx.raw("SET LOCAL statement_timeout = 2000")
                rows = tx.all("status_queue")
        except DatabaseError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for r in rows:
            for state in ("ready", "retrying", "running", "failed_last_hour"):
                jobs.add_metric([r["tenant"], state], int(r[state]))
            oldest.add_metric([r["tenant"]], float(r["oldest_ready_seconds"] or 0))
        yield up
        yield jobs
        yield oldest


def register_queue_collector(db: Database) -> QueueCollector:
    collector = QueueCollector(db)
    REGISTRY.register(collector)
    return collector


def unregister(collector: Collector) -> None:
    REGISTRY.unregister(collector)
