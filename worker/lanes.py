"""One ``ingestd worker`` process running ``worker.concurrency`` jobs at once: job slots
(lanes).

The process owns what it has once (worker/process.py): the signals, its worker id's
session, one LISTEN connection, the metrics endpoint, reading the config on SIGHUP, and
housekeeping (rescue, relay, prune: worker/housekeeping.py), all on this module's main
loop. A slot (worker/runner.py: claim, run in its own job child, heartbeat its lease,
record) runs on a thread and owns only its job child, its lease and its state (idle,
claiming, running, recording: the STATUS line). Slots share the worker id (jobs are owned
by their attempt, not by the name; log lines carry ``lane``), the database pool and the
systemd notification socket. So the cores stay busy when two one-page scans are queued
together (two slots, a job each), and one 300-page batch still uses every core (its pages
on threads in its job child; host-wide page slots keep the total at
``worker.concurrency``, worker/analysis/ocr/slots.py).

Signal handlers only set flags; the main loop hands a stop to every slot
(``Runner.stop``: each finishes or releases its job within ``worker.shutdown_grace``), a
notification to every slot (a poke: the idle ones claim), and a reloaded config to each
(``Runner.offer``: taken between jobs). A slot that fails (a bug) or a worker id taken by
another process stops them all: systemd restarts the unit whole rather than leave it
running at part strength unnoticed.

Lanes serve a pool (``--pool``, ingestd/queue/pools.py): ``workers`` lanes (default
``worker.concurrency``) claim the pool's tenants and kinds, ``short_lanes`` more (default
1) claim only its short kinds, so a provision-tenant or a delivery starts within seconds
while every other lane OCRs. With a single lane the worker is the single runner as before,
signals and all.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ingestd import log
from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.errors import DatabaseError, DatabaseUnavailable
from ingestd.queue.claims import Queue, WorkerIdInUse, default_worker_id
from ingestd.queue.pools import Pool, resolve, worker_application_name
from ingestd.runtime.sdnotify import Notifier
from ingestd.runtime.signals import Flags
from worker.child import Child
from worker.housekeeping import Housekeeper
from worker.process import ProcessServices
from worker.recording import outage_backoff
from worker.runner import Runner

TURN = 1.0  # seconds between looks at the lanes when no signal comes


class StatusBoard:
    """Every lane's status, joined into the one STATUS= line systemd shows (a short lane's
    number is marked ``s``)."""

    def __init__(self, labels: Sequence[str]) -> None:
        self._labels = list(labels)
        self._texts = ["starting"] * len(self._labels)
        self._lock = threading.Lock()
        # Held while READY, STATUS or STOPPING goes out and its flag changes: a lane's
        # STATUS can never overtake lane 1's READY, nor follow STOPPING.
        self.sending = threading.Lock()
        self.ready = False
        self.stopping = False

    def set(self, lane: int, text: str) -> str:
        with self._lock:
            self._texts[lane - 1] = text
            return "; ".join(f"{a}: {t}" for a, t in zip(self._labels, self._texts, strict=True))


class LaneNotifier(Notifier):
    """A lane's view of the process's notification socket: STATUS lists every lane,
    READY/STOPPING go out once, closing is the process's business."""

    def __init__(self, shared: Notifier, lane: int, board: StatusBoard) -> None:
        super().__init__({})
        self.shared, self.lane, self.board = shared, lane, board
        self.watchdog_interval = shared.watchdog_interval

    @property
    def enabled(self) -> bool:
        return self.shared.enabled

    def send(self, *fields: str) -> bool:
        return self.shared.send(*fields)

    def ready(self, status: str | None = None) -> bool:
        if self.lane != 1:
            return self.status(status) if status else True
        # READY comes first, from lane 1; the others' statuses wait for it.
        with self.board.sending:
            joined = self.board.set(self.lane, status) if status else None
            sent = self.shared.ready(joined)
            self.board.ready = True
            return sent

    def status(self, text: str) -> bool:
        with self.board.sending:
            joined = self.board.set(self.lane, text)
            # Nothing after STOPPING=1 (systemd reads the last STATUS as the reason).
            live = self.board.ready and not self.board.stopping
            return self.shared.status(joined) if live else True

    def reloading(self) -> bool:
        return self.shared.reloading() if self.lane == 1 else True

    def stopping(self, status: str | None = None) -> bool:
        if self.lane != 1:
            return True
        with self.board.sending:
            self.board.stopping = True
            return self.shared.stopping(status)

    def close(self) -> None:
        """The shared socket stays open for the other lanes."""


class Lanes:
    def __init__(
        self,
        config: Config,
        db: Database,
        *,
        config_path: Path | None = None,
        plugins: Sequence[str] = (),
        worker_id: str | None = None,
        drain: bool = False,
        metrics_offset: int | None = None,
        children: Sequence[Child] = (),
        pool: Pool | None = None,
    ) -> None:
        self.pool = pool or resolve(config.worker)
        scopes = self.pool.lane_scopes()
        count = len(scopes)
        base = worker_id or default_worker_id()
        self.notifier = Notifier()
        self.flags = Flags()
        self.log = log.get_logger(component="worker", worker=base, pool=self.pool.name)
        board = StatusBoard([f"{i}s" if s.short else str(i) for i, s in enumerate(scopes, 1)])
        short = sum(1 for s in scopes if s.short)
        # One process, N slots: the services are the process's (a single slot owns them).
        self.services = (
            ProcessServices(
                config,
                db,
                worker_id=base,
                application_name=worker_application_name(self.pool.name, count - short, short),
                logger=self.log,
                config_path=config_path,
                metrics_offset=metrics_offset,
            )
            if count > 1
            else None
        )
        self.runners = [
            Runner(
                config,
                db,
                config_path=config_path,
                plugins=plugins,
                worker_id=base,
                drain=drain,
                notifier=self.notifier if count == 1 else LaneNotifier(self.notifier, lane, board),
                metrics_offset=metrics_offset,
                child=children[lane - 1] if lane <= len(children) else None,
                lane=lane,
                scope=scopes[lane - 1],
                keeps_house=count == 1,
                services=self.services,
            )
            for lane in range(1, count + 1)
        ]
        self._errors: list[BaseException] = []
        # Rescue, relay and prune once per process, on this main loop (lane 1's config:
        # it reloads it on SIGHUP), never held up by a lane's long job.
        first = self.runners[0]
        self.housekeeper = Housekeeper(
            db,
            lambda: first.config,
            lambda: Queue(db, first.config.worker, base, first.config.deliveries),
            self.log,
        )
        self._house_failures = 0

    def run(self) -> int:
        if self.services is None:
            return self.runners[0].run()
        try:
            self.services.start(self.runners[0].config)
        except WorkerIdInUse:
            for r in self.runners:
                r.child.stop()
            raise
        self.flags.install()
        threads = [
            threading.Thread(target=self._lane, args=(r,), name=f"lane-{i}", daemon=True)
            for i, r in enumerate(self.runners, 1)
        ]
        self.log.info(
            "worker.lanes",
            lanes=len(threads),
            short_lanes=sum(1 for r in self.runners if r.scope.short),
        )
        try:
            for t in threads:
                t.start()
            stopped = False
            while any(t.is_alive() for t in threads):
                self._turn(self.services)
                if not stopped:
                    self._keep_house()
                    self._check_identity(self.services)
                if self.flags.reload.is_set():
                    self.flags.reload.clear()
                    new = self.services.load_config()
                    if new is not None:  # else logged: every slot keeps the one it has
                        for r in self.runners:
                            r.offer(new)
                # A drained lane ends alone (the others see the same empty queue); a
                # signal or a lane's error ends them all.
                if not stopped and (self.flags.stop.is_set() or self._errors):
                    stopped = True
                    why = self.flags.signal_name or "a lane stopped with an error"
                    for r in self.runners:
                        r.flags.request_stop(why)
            for t in threads:
                t.join()
        finally:
            self.services.close()
            for r in self.runners:  # only now: the loop above pokes every slot until here
                r.flags.close()
            self.flags.restore()
            self.flags.close()
            self.notifier.close()
        if self._errors:
            raise self._errors[0]
        return 0

    def _turn(self, services: ProcessServices) -> None:
        """Wait for a signal, a notification or the next housekeeping (a second at most);
        a notification wakes every slot (the idle ones claim, the busy ones ignore it)."""
        wait = min(TURN, self.housekeeper.next_due() - time.monotonic())
        fds = [self.flags.fileno()]
        lfd = services.listener.fileno()
        if lfd is not None:
            fds.append(lfd)
        ready, _, _ = select.select(fds, [], [], max(0.0, wait))
        if self.flags.fileno() in ready:
            self.flags.clear_wake()
        if lfd is not None and lfd in ready and services.listener.drain():
            for r in self.runners:
                r.flags.poke()

    def _check_identity(self, services: ProcessServices) -> None:
        """The worker id's session now and then; lost and taken by another process meanwhile:
        every slot stops (a database away is retried on the next turns)."""
        try:
            services.check_identity()
        except WorkerIdInUse as exc:
            self.log.error("worker.id_in_use", error=exc.message)
            self._errors.append(exc)
        except DatabaseUnavailable as exc:
            self.log.debug("worker.identity_postponed", error=exc.message)

    def _keep_house(self) -> None:
        """The housekeeping that is due; a database away is retried with a backoff (the
        lanes see the same outage and log it themselves)."""
        try:
            self.housekeeper.run_due()
            self._house_failures = 0
        except DatabaseError as exc:
            delay = outage_backoff(self._house_failures)
            self._house_failures += 1
            self.housekeeper.next_rescue = time.monotonic() + delay
            self.housekeeper.next_prune = max(self.housekeeper.next_prune, time.monotonic() + delay)
            self.log.debug("worker.housekeeping_postponed", error=exc.message, retry_in=delay)

    def _lane(self, runner: Runner) -> None:
        try:
            runner.run(install_signals=False)
        except BaseException as exc:
            self._errors.append(exc)
            self.flags.poke()
