"""The worker loop: claim fairly, run each job in the child, record the outcome.

One job at a time per worker process; run more processes (``ingestd-worker@N``) for more.

    loop: reload on SIGHUP, rescue expired leases every few seconds, prune hourly
          claim -> none: wait for NOTIFY ingestd_jobs or poll_interval (--drain: exit
                         when nothing is ready and nothing runs)
                -> refused (retired/unknown kind, tenant status): failed, not run
                -> run in the child under the kind's timeout, heartbeat from a thread
                -> done | retry/failed (Queue.fail) | released (SIGTERM past the grace)

Signal handlers only set flags and write a byte to a wake-up pipe; the loop waits on that
pipe together with the child's pipe, the child's exit and the LISTEN socket, so a signal,
a result, a crash and a notification are each seen at once, without polling.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from ingestd import log
from ingestd.config.settings import Config, load_config
from ingestd.db.database import Database, connect_once
from ingestd.errors import ConfigError, DatabaseError, DatabaseUnavailable, ExitCode, IngestdError
from ingestd.ops import health, metrics
from ingestd.ops.metrics_server import MetricsEndpoint
from ingestd.ops.sdnotify import Notifier
from ingestd.queue.claims import NOTIFY_CHANNEL, Job, Queue, WorkerIdentity, WorkerIdInUse
from worker.child import Child, Result
from worker.jobs import Kind, load, notify, refusal

T = TypeVar("T")

PRUNE_EVERY = 3600.0
PRUNE_MAX_BATCHES = 20  # 5,000 rows each
RESCUE_EVERY_MAX = 5.0
IDENTITY_EVERY = 10.0  # how often the worker id's session is checked (one SELECT 1)
DB_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0)


class PluginError(IngestdError):
    """A --plugin module could not be imported."""

    exit_code = ExitCode.usage


def load_kinds(plugins: Sequence[str]) -> dict[str, Kind]:
    """The registry with the built-in kinds and those of the --plugin modules."""
    try:
        return load(plugins)
    except ImportError as exc:
        raise PluginError(f"cannot import job kinds from --plugin {exc.name!r}: {exc}") from exc


class Flag:
    """A boolean a signal handler may set. Not a threading.Event: Event.set() takes a
    lock, and a handler running while the main thread holds that lock (in clear() or
    is_set()) would wait for itself forever. A plain attribute store cannot block."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = False

    def set(self) -> None:
        self._value = True

    def clear(self) -> None:
        self._value = False

    def is_set(self) -> bool:
        return self._value


class Flags:
    """Set by signal handlers (nothing else happens in a handler) and by ``Runner.stop``."""

    def __init__(self) -> None:
        self.stop = Flag()
        self.reload = Flag()
        self.stop_at = 0.0
        self.signal_name = ""
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._saved: dict[int, Any] = {}

    def fileno(self) -> int:
        return self._r

    def install(self) -> None:
        for sig, handler in (
            (signal.SIGTERM, self._on_stop),
            (signal.SIGINT, self._on_stop),
            (signal.SIGHUP, self._on_reload),
        ):
            self._saved[sig] = signal.signal(sig, handler)

    def restore(self) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)

    def poke(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._w, b"\0")

    def clear_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._r, 512):
                pass

    def request_stop(self, why: str) -> None:
        if not self.stop.is_set():
            self.stop_at = time.monotonic()
            self.signal_name = why
            self.stop.set()
        self.poke()

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop(signal.Signals(signum).name)

    def _on_reload(self, signum: int, frame: FrameType | None) -> None:
        self.reload.set()
        self.poke()


class Listener:
    """LISTEN ingestd_jobs on a dedicated autocommit connection. Best effort: while it is
    down the worker polls every poll_interval and reconnects now and then."""

    RECONNECT_EVERY = 5.0

    def __init__(self, conninfo: str, connect_timeout: float, logger: Any) -> None:
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


class Heartbeat(threading.Thread):
    """Renews the running job's lease every lease/3 s from a thread of the parent: the
    main thread only waits, but a heartbeat must not depend on it (nor on the child)."""

    def __init__(
        self, queue: Callable[[], Queue], on_lost: Callable[[], None], logger: Any
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
    ) -> None:
        self.config = config
        self.db = db
        self.config_path = config_path
        self.plugins = tuple(plugins)
        self.drain = drain
        self.queue = Queue(db, config.worker, worker_id, config.deliveries)
        self.worker_id = self.queue.worker_id
        self.notifier = notifier or Notifier()
        self.flags = Flags()
        self.log = log.get_logger(component="worker", worker=self.worker_id)
        # Given: started already by `ingestd worker` (forked before any thread existed).
        self.child = child or Child(config, db.conninfo, self.plugins)
        self.listener = Listener(db.conninfo, config.database.connect_timeout, self.log)
        self.identity = WorkerIdentity(db.conninfo, self.worker_id, config.database.connect_timeout)
        self._next_identity = 0.0
        self.heartbeat = Heartbeat(lambda: self.queue, self.flags.poke, self.log)
        now = time.monotonic()
        self._next_rescue = now
        self._next_prune = now  # at start, then hourly: cheap when there is nothing to do
        wd = self.notifier.watchdog_interval
        self._next_watchdog = now if wd else float("inf")
        self._status_text = ""
        self._stopping_logged = False
        self.jobs_run = 0
        self.kinds: dict[str, Kind] = {}
        # None: no endpoint (tests, --drain batch runs); N: worker_listen's port + N.
        self.metrics_offset = metrics_offset
        self.metrics_endpoint: MetricsEndpoint | None = None

    # -- public ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to stop, as SIGTERM does (thread-safe)."""
        self.flags.request_stop("stop()")

    def run(self, *, install_signals: bool = True) -> int:
        kinds = self.kinds = load_kinds(self.plugins)
        try:
            self.identity.acquire()  # WorkerIdInUse ends the worker here, before any job
        except DatabaseUnavailable as exc:
            self.log.warning("worker.database_unavailable", error=exc.message)  # loop retries
        except WorkerIdInUse:
            self.child.stop()
            raise
        if install_signals:
            self.flags.install()
        try:
            self.heartbeat.start()
            self._start_metrics()
            child_pid = self.child.pid if self.child.alive() else self.child.start()
            self.notifier.ready("idle")
            self._status_text = "idle"
            self.log.info(
                "worker.ready",
                pid=os.getpid(),
                child_pid=child_pid,
                kinds=sorted(kinds),
                plugins=list(self.plugins),
                drain=self.drain,
                poll_interval=self.config.worker.poll_interval,
                lease_seconds=self.config.worker.lease_seconds,
            )
            self._loop()
        finally:
            self._announce_stopping("error" if not self.flags.stop.is_set() else "")
            self.heartbeat.close()
            if self.metrics_endpoint is not None:
                self.metrics_endpoint.close()
            self.child.stop()
            self.listener.close()
            self.identity.release()
            self.flags.restore()
            self.flags.close()
            self.log.info("worker.stopped", jobs=self.jobs_run)
            self.notifier.close()
        return 0

    def _start_metrics(self) -> None:
        m = self.config.metrics
        if self.metrics_offset is None or not m.enabled:
            return
        try:
            self.metrics_endpoint = MetricsEndpoint(
                m.worker_listen, self.metrics_offset, health=self._health()
            )
        except OSError as exc:  # port taken: run without, say so (jobs matter more)
            self.log.error(
                "worker.metrics_failed",
                listen=m.worker_listen,
                offset=self.metrics_offset,
                error=str(exc),
            )
            return
        host, port = self.metrics_endpoint.address
        self.log.info("worker.metrics", listen=f"{host}:{port}")

    def _health(self) -> health.Health:
        """/healthz: the loop turns; /readyz: the database answers, derived is writable."""

        def database() -> str | None:
            try:
                with self.db.transaction() as tx:
                    tx.raw("SELECT 1")
            except DatabaseError as exc:
                return exc.message
            return None

        return health.Health(
            ["worker"],
            {"database": database, "derived": health.writable(self.config.paths.derived_dir)},
        )

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
            health.beat("worker", self._turn_period(), self._busy)
            try:
                self._housekeeping()
                if self.flags.stop.is_set():
                    break
                job = self.queue.claim() if self.identity.held else None
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
                delay = min(2.0**failures, 30.0)
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
        self._watchdog_tick()
        now = time.monotonic()
        if not self.identity.held or now >= self._next_identity:
            self._next_identity = now + IDENTITY_EVERY
            self.identity.check()
        if now >= self._next_rescue:
            self._rescue()
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY
            self._prune()

    def _queue_counts(self) -> tuple[int, int]:
        """(ready, running) over all tenants and workers, after a rescue pass: --drain
        ends only when nothing is ready and no job of any worker still runs (a dead
        worker's job is rescued and run first)."""
        self._rescue()
        with self.db.transaction() as tx:
            rows = tx.all("status_queue")
        return sum(int(r["ready"]) for r in rows), sum(int(r["running"]) for r in rows)

    def _idle_wait(self, at_most: float | None = None) -> None:
        self._set_status("idle")
        now = time.monotonic()
        wait = self.config.worker.poll_interval if at_most is None else at_most
        until = min(now + wait, self._next_rescue, self._next_watchdog, self._next_prune)
        fds = [self.flags.fileno()]
        lfd = self.listener.fileno()
        if lfd is not None:
            fds.append(lfd)
        ready, _, _ = select.select(fds, [], [], max(0.0, until - now))
        if lfd is not None and lfd in ready:
            self.listener.drain()
        if self.flags.fileno() in ready:
            self.flags.clear_wake()

    def _sleep(self, seconds: float) -> None:
        """Wait, but wake for a signal."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not self.flags.stop.is_set():
            ready, _, _ = select.select(
                [self.flags.fileno()], [], [], min(left, self._until_watchdog())
            )
            if ready:
                self.flags.clear_wake()
            self._watchdog_tick()
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
                self._record(
                    jl,
                    lambda: self.queue.fail(job, reason, permanent=True, failed_event="job.failed"),
                )
                jl.warning("job.refused", error=reason, seconds=_secs(t0))
                _observe(job, "refused", t0)
                finished = True
                return
            self._set_status(f"job {job.id} {job.kind} tenant {job.tenant}")
            jl.info("job.started", attempt=job.retry_count + 1)
            self._ensure_child()
            timeout = self.config.worker.timeout_for(job.kind)
            self.heartbeat.begin(job)
            try:
                result = self._run_in_child(job, timeout)
            finally:
                self.heartbeat.end()
            self.jobs_run += 1
            finished = self._outcome(job, jl, result, t0, timeout)
        finally:
            if not finished:
                # An error of our own (database gone mid-way, a bug): hand the job back
                # rather than leave it `processing` until its lease runs out.
                self.child.kill()
                with contextlib.suppress(DatabaseError):
                    if self.queue.release(job):
                        jl.warning("job.released", seconds=_secs(t0), reason="worker error")

    def _ensure_child(self) -> None:
        if not self.child.alive():
            self.child.kill()
            pid = self.child.start()
            self.log.info("worker.child_started", child_pid=pid)

    def _run_in_child(self, job: Job, timeout: float) -> Result:
        """The child's answer, or ("died"|"timeout"|"released"|"lost", message)."""
        self.child.run(job)
        deadline = time.monotonic() + timeout
        while True:  # bounded by the deadline
            grace_end = float("inf")
            if self.flags.stop.is_set():
                self._announce_stopping(job=job.id)
                grace_end = self.flags.stop_at + self.config.worker.shutdown_grace
            now = time.monotonic()
            what = self.child.wait(
                min(deadline, grace_end, self._next_watchdog) - now, [self.flags.fileno()]
            )
            if what == "message":
                answer = self.child.receive()
                if answer is not None:
                    return answer
                what = "exited"
            if what == "exited":
                died = f"worker child died ({self.child.describe_exit()})"
                self.child.kill()
                return ("died", died)
            if what == "wake":
                self.flags.clear_wake()
            self._watchdog_tick()
            if self.flags.reload.is_set():
                self._reload()
            if self.heartbeat.lost.is_set():
                self.child.kill()
                return ("lost", "the lease was lost (rescued by another worker)")
            now = time.monotonic()
            if now >= grace_end:
                self.child.kill()
                return (
                    "released",
                    f"shutdown grace of {_num(self.config.worker.shutdown_grace)} s ran out",
                )
            if now >= deadline:
                self.child.kill()
                return ("timeout", f"timed out after {_num(timeout)} s")

    def _outcome(self, job: Job, jl: Any, result: Result, t0: float, timeout: float) -> bool:
        """Record what happened; True once the job is no longer ours."""
        kind, detail = result
        seconds = _secs(t0)
        if kind == "ok":
            summary, data = detail if isinstance(detail, tuple) else (detail, {})
            registered = self.kinds.get(job.kind)
            apply = registered.apply if registered is not None else None
            try:
                ours = self._record(jl, lambda: self.queue.done(job, apply, data))
            except Exception as exc:  # the applier failed: a failed attempt, not a lost job
                kind, detail = "error", f"writing the job's results failed: {describe(exc)}"
            else:
                if ours:
                    jl.info("job.done", seconds=seconds, result=summary or None)
                    _observe(job, "done", t0)
                    if isinstance(summary, dict) and summary.get("ocr"):
                        metrics.OCR_PAGES.labels(job.tenant).inc(int(summary.get("pages") or 0))
                else:
                    jl.warning(
                        "job.lost",
                        seconds=seconds,
                        error="finished, but the job was no longer ours (lease expired)",
                    )
                return True
        if kind == "released":
            if self._record(jl, lambda: self.queue.release(job)):
                jl.warning("job.released", seconds=seconds, reason=detail)
            _observe(job, "released", t0)
            return True
        if kind == "lost":
            jl.warning("job.lost", seconds=seconds, error=detail)
            return True
        if kind == "timeout":
            jl.error("job.timeout", seconds=seconds, timeout=timeout)
        elif kind == "died":
            jl.error("job.child_died", seconds=seconds, error=detail)
        if kind in ("timeout", "died"):
            kind, detail = _limit_rule(job, kind, str(detail), timeout)
        permanent = kind in ("permanent", "attention")
        attention = kind == "attention"
        registered = self.kinds.get(job.kind)
        event = registered.failed_event if registered is not None else "job.failed"
        outcome = self._record(
            jl,
            lambda: self.queue.fail(
                job, str(detail), permanent=permanent, attention=attention, failed_event=event
            ),
        )
        _observe(
            job,
            "lost" if outcome is None else "retry" if outcome.status == "queued" else "failed",
            t0,
        )
        if outcome is None:
            jl.warning("job.lost", seconds=seconds, error=str(detail))
        elif outcome.status == "queued":
            jl.warning(
                "job.retry",
                seconds=seconds,
                attempt=outcome.retry_count,
                next_attempt_at=outcome.next_attempt_at.isoformat(),
                error=str(detail),
            )
        elif attention:
            jl.error(
                "job.needs_attention",
                seconds=seconds,
                attempt=outcome.retry_count + 1,
                reason=str(detail),
            )
        else:
            jl.error(
                "job.failed",
                seconds=seconds,
                attempt=outcome.retry_count,
                permanent=permanent,
                error=str(detail),
            )
        return True

    def _record(self, jl: Any, write: Callable[[], T]) -> T | None:
        """Write an outcome, retrying while the database is briefly away. If it stays
        away, the lease runs out and another worker's rescue counts the attempt."""
        for delay in (*DB_RETRY_DELAYS, None):
            try:
                return write()
            except DatabaseUnavailable as exc:
                if delay is None:
                    jl.error("job.outcome_lost", error=exc.message)
                    return None
                jl.warning("worker.database_unavailable", error=exc.message, retry_in=delay)
                time.sleep(delay)  # no flag check: the outcome is worth the short wait
        return None

    # -- housekeeping ---------------------------------------------------------------------
    def _rescue(self) -> None:
        every = min(RESCUE_EVERY_MAX, self.config.worker.lease_seconds / 2)
        self._next_rescue = time.monotonic() + every
        rows = self.queue.rescue()
        _count_failed_rescues(rows)
        # New operator events become notify jobs at the same pace (the outbox's relay).
        try:
            notify.relay(self.db, self.config)
        except DatabaseError:
            raise  # the loop's backoff handles an outage
        except Exception:  # a bug in matching must not stop the worker's jobs
            self.log.exception("worker.relay_failed")
        if rows:
            self.log.warning(
                "worker.rescued",
                count=len(rows),
                jobs=[
                    {"id": r["id"], "status": r["status"], "worker": r["worker_id"]}
                    for r in rows[:50]
                ],
            )

    def _prune(self) -> None:
        total = 0
        for _ in range(PRUNE_MAX_BATCHES):
            n = self.queue.prune()
            total += n
            if n < 5000:
                break
        if total:
            self.log.info("worker.pruned", jobs=total, older_than_s=self.config.worker.prune_after)

    def _reload(self) -> None:
        self.flags.reload.clear()
        self.notifier.reloading()
        try:
            new = load_config(self.config_path)
        except ConfigError as exc:
            self.log.error("worker.reload_failed", error=exc.message, problems=exc.problems)
            self.notifier.ready()
            return
        log.configure(new.log.level, new.log.format)
        if new.database != self.config.database:
            self.log.warning(
                "worker.reload_partial", detail="[database] changes take effect after a restart"
            )
        self.config = new
        self.queue = Queue(self.db, new.worker, self.worker_id, new.deliveries)
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
        )

    def _until_watchdog(self) -> float:
        return max(0.0, self._next_watchdog - time.monotonic())

    def _watchdog_tick(self) -> None:
        interval = self.notifier.watchdog_interval
        if interval is not None and time.monotonic() >= self._next_watchdog:
            self.notifier.watchdog()
            self._next_watchdog = time.monotonic() + interval

    def _set_status(self, text: str) -> None:
        if text != self._status_text:
            self._status_text = text
            self.notifier.status(text)

    def _announce_stopping(self, why: str = "", job: int | None = None) -> None:
        if self._stopping_logged:
            return
        self._stopping_logged = True
        reason = why or self.flags.signal_name or "stop"
        self.notifier.stopping(f"stopping ({reason})")
        self.log.info(
            "worker.stopping",
            reason=reason,
            running_job=job,
            shutdown_grace=self.config.worker.shutdown_grace if job else None,
        )


def _limit_rule(job: Job, kind: str, detail: str, timeout: float) -> tuple[str, str]:
    """A job killed at its time limit, or whose child died (the OOM killer, a crash in a
    C library), is retried once: the machine may have been busy, or short of memory for
    a moment. The second time it is the file: a document's job ends needing attention
    with the limit named, any other job fails for good; no more blind retries, each of
    which would take the same time or memory again."""
    if job.retry_count < 1:
        return "error", detail
    limit = (
        f"the limit worker.timeouts.{job.kind} ({_num(timeout)} s)"
        if kind == "timeout"
        else "the memory or the program it needs (the child died)"
    )
    detail = f"{detail}; again after a retry: it exceeds {limit}"
    return ("attention" if job.document_id is not None else "permanent"), detail


def _observe(job: Job, outcome: str, t0: float) -> None:
    metrics.JOB_SECONDS.labels(job.kind, outcome).observe(time.monotonic() - t0)
    if outcome in ("failed", "refused"):
        metrics.JOBS_FAILED.labels(job.tenant, job.kind).inc()


def _count_failed_rescues(rows: list[dict[str, Any]]) -> None:
    """Rescued jobs whose lease ran out once too often are failed for good: counted too."""
    for r in rows:
        if r["status"] == "failed":
            metrics.JOBS_FAILED.labels(str(r["tenant"]), str(r["kind"])).inc()


def describe(exc: BaseException) -> str:
    message = exc.message if isinstance(exc, IngestdError) else str(exc)
    return f"{type(exc).__name__}: {message}"[:2000]


def _secs(t0: float) -> float:
    return round(time.monotonic() - t0, 3)


def _num(x: float) -> str:
    return f"{x:g}"
