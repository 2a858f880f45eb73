"""What a worker process has once, however many job slots it runs.

Its worker id's session (``WorkerIdentity``: a second process under the same id is
refused, and the session's name tells ``status`` and /metrics how many slots of which
pool are alive), one LISTEN connection (a notification wakes the slots), the metrics
endpoint, and the config it reloads on SIGHUP (read once, handed to every slot). The
signals and housekeeping are the process loop's (worker/lanes.py); a slot
(worker/runner.py) owns only its job child, its lease and its state.

A process of one slot (``worker.concurrency = 1``, ``--drain``, the tests) is run by the
slot itself, which then holds these services as their owner.
"""

from __future__ import annotations

import time
from pathlib import Path

from structlog.typing import FilteringBoundLogger

from ingestd import log
from ingestd.config.load import load_config
from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.errors import ConfigError, DatabaseUnavailable
from ingestd.ops.metrics_server import MetricsEndpoint
from ingestd.queue.claims import WorkerIdentity
from worker.listener import Listener
from worker.probes import start_metrics

IDENTITY_EVERY = 10.0  # how often the worker id's session is checked (one SELECT 1)


class ProcessServices:
    def __init__(
        self,
        config: Config,
        db: Database,
        *,
        worker_id: str,
        application_name: str,
        logger: FilteringBoundLogger,
        config_path: Path | None = None,
        metrics_offset: int | None = None,
    ) -> None:
        self.db = db
        self.config_path = config_path
        self.metrics_offset = metrics_offset
        self.log = logger
        timeout = config.database.connect_timeout
        self.identity = WorkerIdentity(db.conninfo, worker_id, timeout, application_name)
        self.listener = Listener(db.conninfo, timeout, logger)
        self.metrics_endpoint: MetricsEndpoint | None = None
        self._next_identity = 0.0

    @property
    def held(self) -> bool:
        """The worker id is ours: slots claim only then."""
        return self.identity.held

    def start(self, config: Config) -> None:
        """Take the worker id (WorkerIdInUse ends the process here, before any job; a
        database away is retried by ``check_identity``) and serve the metrics."""
        try:
            self.identity.acquire()
        except DatabaseUnavailable as exc:
            self.log.warning("worker.database_unavailable", error=exc.message)
        self.metrics_endpoint = start_metrics(self.db, config, self.metrics_offset, self.log)

    def check_identity(self) -> None:
        """Every IDENTITY_EVERY seconds, or at once while it is not held: a lost session is
        taken again (WorkerIdInUse if someone else took the id meanwhile)."""
        now = time.monotonic()
        if not self.identity.held or now >= self._next_identity:
            self._next_identity = now + IDENTITY_EVERY
            self.identity.check()

    def load_config(self) -> Config | None:
        """The config file again (SIGHUP), the log set up by it; None (logged) if it is
        not valid: the process keeps the one it has."""
        try:
            new = load_config(self.config_path)
        except ConfigError as exc:
            self.log.error("worker.reload_failed", error=exc.message, problems=exc.problems)
            return None
        log.configure(new.log.level, new.log.format)
        return new

    def close(self) -> None:
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        self.listener.close()
        self.identity.release()
