"""The running job's lease, renewed from a thread of the worker (the parent)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from structlog.typing import FilteringBoundLogger

from ingestd.errors import DatabaseError
from ingestd.queue.claims import Job, Queue


class Heartbeat(threading.Thread):
    """Renews the running job's lease every lease/3 s from a thread of the parent: the
    main thread only waits, but a heartbeat must not depend on it (nor on the child)."""

    def __init__(
        self, queue: Callable[[], Queue], on_lost: Callable[[], None], logger: FilteringBoundLogger
    ) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self._queue = queue
        self._on_lost = on_lost
        self.log = logger
        self._cond = threading.Condition()
        self._job: Job | None = None
        self._due = 0.0
        self._closed = False
        self.lost = threading.Event()

    def _interval(self) -> float:
        return self._queue().config.lease_seconds / 3

    @property
    def job(self) -> Job | None:
        """The running job, if any (for the health check)."""
        return self._job

    def begin(self, job: Job) -> None:
        with self._cond:
            self._job = job
            self._due = time.monotonic() + self._interval()
            self.lost.clear()
            self._cond.notify()

    def end(self) -> None:
        with self._cond:
            self._job = None
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self.is_alive():
            self.join(10)

    def run(self) -> None:
        while True:  # until close()
            with self._cond:
                while not self._closed:
                    if self._job is None:
                        self._cond.wait()
                    elif (left := self._due - time.monotonic()) > 0:
                        self._cond.wait(left)
                    else:
                        break
                if self._closed:
                    return
                job = self._job
                assert job is not None
                self._due = time.monotonic() + self._interval()
            try:
                ours = self._queue().heartbeat(job)
            except DatabaseError as exc:
                self.log.warning("job.heartbeat_failed", job_id=job.id, error=exc.message)
                continue
            if not ours:
                with self._cond:
                    current = self._job is job
                if current:
                    self.lost.set()
                    self._on_lost()
