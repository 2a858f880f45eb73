"""LISTEN for the queue's notifications, so an idle worker claims a new job at once."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from structlog.typing import FilteringBoundLogger

from ingestd.db.database import connect_once
from ingestd.queue.claims import NOTIFY_CHANNEL


class Listener:
    """LISTEN ingestd_jobs on a dedicated autocommit connection. Best effort: while it is
    down the worker polls every poll_interval and reconnects now and then."""

    RECONNECT_EVERY = 5.0

    def __init__(self, conninfo: str, connect_timeout: float, logger: FilteringBoundLogger) -> None:
        self.conninfo = conninfo
        self.connect_timeout = connect_timeout
        self.log = logger
        self._conn: Any = None
        self._retry_at = 0.0

    def fileno(self) -> int | None:
        if self._conn is None and time.monotonic() >= self._retry_at:
            self._connect()
        return int(self._conn.fileno()) if self._conn is not None else None

    def _connect(self) -> None:
        try:
            conn = connect_once(self.conninfo, autocommit=True, timeout=self.connect_timeout)
            try:
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        except Exception as exc:  # psycopg's own errors: only db.py knows their classes
            self._retry_at = time.monotonic() + self.RECONNECT_EVERY
            self.log.warning(
                "worker.listen_failed", error=str(exc).strip()[:300], retry_in=self.RECONNECT_EVERY
            )

    def drain(self) -> int:
        """Consume the notifications that arrived; their content does not matter."""
        if self._conn is None:
            return 0
        try:
            return sum(1 for _ in self._conn.notifies(timeout=0))
        except Exception as exc:  # the connection broke (server restart): reconnect later
            self.log.warning("worker.listen_lost", error=str(exc).strip()[:300])
            self.close()
            self._retry_at = time.monotonic() + 0.5
            return 0

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
