"""A job slot's state as systemd sees it: its STATUS (idle, the job it runs), the
watchdog's ping, and STOPPING once, with the reason (worker/runner.py keeps one).

The notifier is the process's socket (worker/lanes.py joins the slots' statuses into one
STATUS line); this only decides when to send and never sends the same status twice."""

from __future__ import annotations

import time

from structlog.typing import FilteringBoundLogger

from ingestd.runtime.sdnotify import Notifier


class SlotStatus:
    def __init__(self, notifier: Notifier, logger: FilteringBoundLogger) -> None:
        self.notifier = notifier
        self.log = logger
        wd = notifier.watchdog_interval
        # When the next watchdog ping is due (never, outside systemd's watchdog).
        self.next_watchdog = time.monotonic() if wd else float("inf")
        self._text = ""
        self._stopping = False

    def ready(self, text: str = "idle") -> None:
        self.notifier.ready(text)
        self._text = text

    def set(self, text: str) -> None:
        if text != self._text:
            self._text = text
            self.notifier.status(text)

    def until_watchdog(self) -> float:
        return max(0.0, self.next_watchdog - time.monotonic())

    def tick(self) -> None:
        """The watchdog's ping, when it is due."""
        interval = self.notifier.watchdog_interval
        if interval is not None and time.monotonic() >= self.next_watchdog:
            self.notifier.watchdog()
            self.next_watchdog = time.monotonic() + interval

    def stopping(self, reason: str, job: int | None, grace: float) -> None:
        """STOPPING and ``worker.stopping``, once; with the job the grace is given to."""
        if self._stopping:
            return
        self._stopping = True
        self.notifier.stopping(f"stopping ({reason})")
        self.log.info(
            "worker.stopping", reason=reason, running_job=job, shutdown_grace=grace if job else None
        )
