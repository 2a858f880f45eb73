"""The worker's own metrics endpoint and its health checks (/metrics, /healthz, /readyz)."""

from __future__ import annotations

from structlog.typing import FilteringBoundLogger

from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.errors import DatabaseError
from ingestd.ops.metrics_server import MetricsEndpoint
from ingestd.runtime import health


def worker_health(db: Database, config: Config) -> health.Health:
    """/healthz: the loop turns; /readyz: the database answers, derived is writable."""

    def database() -> str | None:
        try:
            with db.transaction() as tx:
                tx.raw("SELECT 1")
        except DatabaseError as exc:
            return exc.message
        return None

    # One loop per lane (worker/lanes.py names them): a stuck lane is a stuck worker.
    loops = ["worker", *(f"worker.{lane}" for lane in range(2, config.worker.concurrency + 1))]
    return health.Health(
        loops, {"database": database, "derived": health.writable(config.paths.derived_dir)}
    )


def start_metrics(
    db: Database, config: Config, offset: int | None, log: FilteringBoundLogger
) -> MetricsEndpoint | None:
    """The endpoint on worker_listen's port + ``offset`` (None: none, as in tests and
    --drain batch runs), or None when its port is taken: the worker runs without it and
    says so, jobs matter more."""
    m = config.metrics
    if offset is None or not m.enabled:
        return None
    try:
        endpoint = MetricsEndpoint(m.worker_listen, offset, health=worker_health(db, config))
    except OSError as exc:
        log.error("worker.metrics_failed", listen=m.worker_listen, offset=offset, error=str(exc))
        return None
    host, port = endpoint.address
    log.info("worker.metrics", listen=f"{host}:{port}")
    return endpoint
