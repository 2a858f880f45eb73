"""A job slot: claim fairly, run each job in the slot's child, record the outcome.

One job at a time per slot; a worker process runs ``worker.concurrency`` slots
(worker/lanes.py), a process of one slot is this loop alone (then it also holds the
process's services, worker/process.py, and installs the signal handlers).

    loop: reload on SIGHUP, rescue expired leases every few seconds, prune hourly
          claim -> none: wait for NOTIFY ingestd_jobs or poll_interval (--drain: exit
                         when nothing is ready and nothing runs)
                -> refused (retired/unknown kind, tenant status): failed, not run
                -> run in the child under the kind's timeout, heartbeat from a thread
                -> done | retry/failed (Queue.fail) | released (SIGTERM past the grace)

Signal handlers only set flags and write a byte to a wake-up pipe; the loop waits on that
pipe together with the child's pipe, the child's exit and the LISTEN socket, so a signal,
a result, a crash and a notification are each seen at once, without polling.

Its parts: ``ingestd/runtime/signals.py`` (the flags and the wake-up pipe, the daemon's
too), ``worker/process.py`` (worker id, LISTEN, metrics, reading the config),
``worker/heartbeat.py`` (the lease), ``worker/child.py`` (the job child),
``worker/slot_status.py`` (STATUS, watchdog, STOPPING),
``worker/recording.py`` (writing an outcome), ``worker/housekeeping.py`` (rescue, relay,
prune). This module is the loop that ties them together.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Sequence
from pathlib import Path

from ingestd import log
from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.errors import ConfigError, DatabaseError, DatabaseUnavailable, ExitCode, IngestdError
from ingestd.queue import pools
from ingestd.queue.claims import Job, Queue, WorkerIdInUse
from ingestd.queue.pools import EVERYTHING, Scope, worker_application_name
from ingestd.runtime import health
from ingestd.runtime.sdnotify import Notifier
from ingestd.runtime.signals import Flags
from worker import housekeeping
from worker.child import Child, Woke
from worker.heartbeat import Heartbeat
from worker.jobs import Kind, load, refusal
from worker.outcomes import Ended, Ending, Result, elapsed, number
from worker.process import ProcessServices
from worker.recording import DB_RETRY_DELAYS, outage_backoff, record_outcome, record_refusal
from worker.slot_status import SlotStatus


class PluginError(IngestdError):
    """A --plugin module could not be imported."""

    exit_code = ExitCode.usage


def load_kinds(plugins: Sequence[str]) -> dict[str, Kind]:
    """The registry with the built-in kinds and those of the --plugin modules."""
    try:
        return load(plugins)
    except ImportError as exc:
        raise PluginError(f"cannot import job kinds from --plugin {exc.name!r}: {exc}") from exc


class Runner:
    def __init__(
        self,
        config: Config,
        db: Database,
        *,
        config_path: Path | None = None,
        plugins: Sequence[str] = (),
        worker_id: str | None = None,
        drain: bool = False,
        notifier: Notifier | None = None,
        metrics_offset: int | None = None,
        child: Child | None = None,
        lane: int = 1,
        scope: Scope = EVERYTHING,
        keeps_house: bool = True,
        services: ProcessServices | None = None,
    ) -> None:
        self.config = config
        # Which tenants and kinds this lane claims: its pool's, or the pool's short kinds
        # (worker/lanes.py); re-read from the config on SIGHUP.
        self.scope = scope
        # worker/lanes.py: lanes of one process share its worker id (jobs are owned by
        # attempt, not by name); each has a loop of its own in /healthz.
        self.lane = lane
        self.health_name = "worker" if lane == 1 else f"worker.{lane}"
        self.db = db
        self.config_path = config_path
        self.plugins = tuple(plugins)
        self.drain = drain
        self.queue = Queue(db, config.worker, worker_id, config.deliveries, scope)
        self.worker_id = self.queue.worker_id
        self.notifier = notifier or Notifier()
        self.flags = Flags()
        self.log = log.get_logger(
            component="worker", worker=self.worker_id, lane=lane, pool=scope.pool
        )
        # Given: started already by `ingestd worker` (forked before any thread existed).
        self.child = child or Child(config, db.conninfo, self.plugins)
        # The process's worker id, LISTEN, metrics and config reading (worker/process.py):
        # a slot of a process with several is given them; a process of one slot is this
        # runner, which then owns them.
        self.owns_services = services is None
        self.services = services or ProcessServices(
            config,
            db,
            worker_id=self.worker_id,
            application_name=worker_application_name(
                scope.pool, 0 if scope.short else 1, 1 if scope.short else 0
            ),
            logger=self.log,
            config_path=config_path,
            metrics_offset=metrics_offset,
        )
        self._offered: Config | None = None  # a slot's next config, from its process
        self.heartbeat = Heartbeat(lambda: self.queue, self.flags.poke, self.log)
        # The process's rescue, relay and prune: this runner's unless a process with
        # lanes keeps them on its main loop (worker/lanes.py).
        self.housekeeper = (
            housekeeping.Housekeeper(db, lambda: self.config, lambda: self.queue, self.log)
            if keeps_house
            else None
        )
        self.status = SlotStatus(self.notifier, self.log)
        self.jobs_run = 0
        self.kinds: dict[str, Kind] = {}

    # -- public ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to stop, as SIGTERM does (thread-safe)."""
        self.flags.request_stop("stop()")

    def offer(self, config: Config) -> None:
        """A slot's process reloaded its config: this slot takes it between jobs."""
        self._offered = config
        self.flags.reload.set()
        self.flags.poke()

    def run(self, *, install_signals: bool = True) -> int:
        kinds = self.kinds = load_kinds(self.plugins)
        if self.owns_services:
            try:
                self.services.start(self.config)  # WorkerIdInUse ends it here, before any job
            except WorkerIdInUse:
                self.child.stop()
                raise
        if install_signals:
            self.flags.install()
        try:
            self.heartbeat.start()
            child_pid = self.child.pid if self.child.alive() else self.child.start()
            self.status.ready("idle")
            self.log.info(
                "worker.ready",
                pid=os.getpid(),
                child_pid=child_pid,
                kinds=sorted(kinds),
                serves=self._serves(),
                plugins=list(self.plugins),
                drain=self.drain,
                poll_interval=self.config.worker.poll_interval,
                lease_seconds=self.config.worker.lease_seconds,
            )
            self._loop()
        finally:
            self._announce_stopping("error" if not self.flags.stop.is_set() else "")
            self.heartbeat.close()
            self.child.stop()
            self.flags.restore()
            if self.owns_services:
                self.services.close()
                # A slot of a process with several keeps its flags open: the process
                # pokes every slot (a notification, a reload, a stop) until the last
                # slot's thread ended, then closes them (worker/lanes.py).
                self.flags.close()
            self.log.info("worker.stopped", jobs=self.jobs_run)
            self.notifier.close()
        return 0

    def _turn_period(self) -> float:
        """The longest turn without a job: the poll interval, or the backoff while the
        database is away (30 s at most) and a connection attempt timing out."""
        timeout = self.config.database.connect_timeout
        return max(self.config.worker.poll_interval, 30.0) + 2 * timeout

    def _busy(self) -> float:
        """While a job runs, its time limit, the grace of a stop and writing its outcome."""
        job = self.heartbeat.job
        if job is None:
            return 0.0
        w = self.config.worker
        return w.timeout_for(job.kind) + w.shutdown_grace + 2 * sum(DB_RETRY_DELAYS)

    # -- the loop -------------------------------------------------------------------------
    def _loop(self) -> None:
        failures = 0
        while not self.flags.stop.is_set():  # until SIGTERM/SIGINT, or drained
            health.beat(self.health_name, self._turn_period(), self._busy)
            try:
                self._housekeeping()
                if self.flags.stop.is_set():
                    break
                job = self.queue.claim() if self.services.held else None
                if job is not None:
                    self._handle(job)
                    failures = 0
                    continue
                ready = 0
                if self.drain:
                    ready, running = self._queue_counts()
                    if ready == 0 and running == 0:
                        self.flags.request_stop("drained")
                        break
                failures = 0
                # Ready jobs we could not claim (claims collided, or the tenant cap):
                # look again soon rather than after a whole poll interval.
                self._idle_wait(0.05 if ready else None)
            except WorkerIdInUse as exc:
                # Our session was lost and another worker took the name meanwhile.
                self.log.error("worker.id_in_use", error=exc.message)
                self.flags.request_stop("worker id in use")
            except DatabaseError as exc:
                # Down or restarting: nothing is lost (jobs wait in the table); retry. Any
                # other database error is logged and retried the same way: systemd
                # restarting the worker would not fix it either.
                delay = outage_backoff(failures)
                failures += 1
                event = (
                    "worker.database_unavailable"
                    if isinstance(exc, DatabaseUnavailable)
                    else "worker.database_error"
                )
                self.log.warning(event, error=exc.message, retry_in=delay)
                self._sleep(delay)

    def _housekeeping(self) -> None:
        if self.flags.reload.is_set():
            self._reload()
        self.status.tick()
        if self.owns_services:
            self.services.check_identity()
        if self.housekeeper is not None:
            self.housekeeper.run_due()

    def _queue_counts(self) -> tuple[int, int]:
        """(ready, running) in this lane's scope, over all workers, after a rescue pass:
        --drain ends only when nothing is ready and no job of any worker still runs (a
        dead worker's job is rescued and run first)."""
        housekeeping.rescue_and_relay(self.queue, self.db, self.config, self.log)
        return housekeeping.queue_counts(self.db, self.scope)

    def _serves(self) -> dict[str, object]:
        """The lane's scope as worker.ready and worker.reloaded log it."""
        return {"short": self.scope.short, **self.scope.describe()}

    def _idle_wait(self, at_most: float | None = None) -> None:
        self.status.set("idle")
        now = time.monotonic()
        wait = self.config.worker.poll_interval if at_most is None else at_most
        until = min(now + wait, self.status.next_watchdog)
        if self.housekeeper is not None:
            until = min(until, self.housekeeper.next_due())
        # A slot of a process with several is woken through its flags: the process holds
        # LISTEN and pokes every slot on a notification.
        fds = [self.flags.fileno()]
        lfd = self.services.listener.fileno() if self.owns_services else None
        if lfd is not None:
            fds.append(lfd)
        ready, _, _ = select.select(fds, [], [], max(0.0, until - now))
        if lfd is not None and lfd in ready:
            self.services.listener.drain()
        if self.flags.fileno() in ready:
            self.flags.clear_wake()

    def _sleep(self, seconds: float) -> None:
        """Wait, but wake for a signal."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not self.flags.stop.is_set():
            ready, _, _ = select.select(
                [self.flags.fileno()], [], [], min(left, self.status.until_watchdog())
            )
            if ready:
                self.flags.clear_wake()
            self.status.tick()
            if self.flags.reload.is_set():
                self._reload()

    # -- one job --------------------------------------------------------------------------
    def _handle(self, job: Job) -> None:
        jl = self.log.bind(
            job_id=job.id,
            kind=job.kind,
            tenant=job.tenant,
            document_id=job.document_id,
            trace=job.trace,
        )
        t0 = time.monotonic()
        finished = False
        try:
            reason = refusal(job)
            if reason is not None:
                record_refusal(self.queue, jl, job, reason, t0)
                finished = True
                return
            self.status.set(f"job {job.id} {job.kind} tenant {job.tenant}")
            jl.info("job.started", attempt=job.retry_count + 1)
            self._ensure_child()
            timeout = self.config.worker.timeout_for(job.kind)
            self.heartbeat.begin(job)
            try:
                result = self._run_in_child(job, timeout)
            finally:
                self.heartbeat.end()
            self.jobs_run += 1
            record_outcome(self.queue, self.kinds, job, jl, result, t0, timeout)
            finished = True  # the job is no longer ours
        finally:
            if not finished:
                # An error of our own (database gone mid-way, a bug): hand the job back
                # rather than leave it `processing` until its lease runs out.
                self.child.kill()
                with contextlib.suppress(DatabaseError):
                    if self.queue.release(job):
                        jl.warning("job.released", seconds=elapsed(t0), reason="worker error")

    def _ensure_child(self) -> None:
        if not self.child.alive():
            self.child.kill()
            pid = self.child.start()
            self.log.info("worker.child_started", child_pid=pid)

    def _run_in_child(self, job: Job, timeout: float) -> Result:
        """The child's answer, or how the runner ended the attempt (died, timeout,
        released, lost)."""
        self.child.run(job)
        deadline = time.monotonic() + timeout
        while True:  # bounded by the deadline
            grace_end = float("inf")
            if self.flags.stop.is_set():
                self._announce_stopping(job=job.id)
                grace_end = self.flags.stop_at + self.config.worker.shutdown_grace
            now = time.monotonic()
            what = self.child.wait(
                min(deadline, grace_end, self.status.next_watchdog) - now, [self.flags.fileno()]
            )
            if what is Woke.answered:
                answer = self.child.receive()
                if answer is not None:
                    return answer
                what = Woke.exited
            if what is Woke.exited:
                died = f"worker child died ({self.child.describe_exit()})"
                self.child.kill()
                return Ended(Ending.died, died)
            if what is Woke.woken:
                self.flags.clear_wake()
            self.status.tick()
            if self.flags.reload.is_set():
                self._reload()
            if self.heartbeat.lost.is_set():
                self.child.kill()
                return Ended(Ending.lost, "the lease was lost (rescued by another worker)")
            now = time.monotonic()
            if now >= grace_end:
                self.child.kill()
                grace = number(self.config.worker.shutdown_grace)
                return Ended(Ending.released, f"shutdown grace of {grace} s ran out")
            if now >= deadline:
                self.child.kill()
                return Ended(Ending.timeout, f"timed out after {number(timeout)} s")

    # -- reload ---------------------------------------------------------------------------
    def _reload(self) -> None:
        self.flags.reload.clear()
        self.notifier.reloading()
        if self.owns_services:
            new = self.services.load_config()
        else:
            new, self._offered = self._offered, None
        if new is None:
            self.notifier.ready()
            return
        if new.database != self.config.database:
            self.log.warning(
                "worker.reload_partial", detail="[database] changes take effect after a restart"
            )
        try:
            scope = pools.rescope(new.worker, self.scope)
        except ConfigError as exc:  # the pool is gone from the config: keep serving it
            self.log.error("worker.reload_failed", error=exc.message, problems=exc.problems)
            self.notifier.ready()
            return
        self.config = new
        self.scope = scope
        self.queue = Queue(self.db, new.worker, self.worker_id, new.deliveries, scope)
        self.child.reconfigure(new)
        self.notifier.ready()
        w = new.worker
        self.log.info(
            "worker.reloaded",
            log_level=new.log.level,
            poll_interval=w.poll_interval,
            lease_seconds=w.lease_seconds,
            max_retries=w.max_retries,
            shutdown_grace=w.shutdown_grace,
            serves=self._serves(),
        )

    def _announce_stopping(self, why: str = "", job: int | None = None) -> None:
        reason = why or self.flags.signal_name or "stop"
        self.status.stopping(reason, job, self.config.worker.shutdown_grace)
