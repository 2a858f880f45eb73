"""The job child: one persistent process per worker that runs handlers, one job at a time.

A handler may crash the interpreter, hang in a C library or be OOM-killed (tesseract on a
3,000-page scan); none of that may take the worker down. So the worker (the parent) keeps
the queue, the lease and the outcome, and the child only runs handlers: it is started with
the multiprocessing "spawn" context (a fresh interpreter, never a fork of the threaded
parent), fed jobs over a Pipe, and replaced when it dies or is killed for a timeout. The
one exception is the first child of ``ingestd worker``: started before the worker has any
thread (``fork=True`` and a single thread, checked), it is forked and so skips a fresh
interpreter's imports (about half a second on each worker start).

Protocol (pickled frozen dataclasses over the Pipe):
  parent -> child   Run(job) | Reconfigure(config) | Stop()
  child -> parent   Ready(pid) once, then per job a ``worker.outcomes.Result``:
                    Done(summary, data)
                    | Ended(Ending.permanent | Ending.attention, message)
                    | Ended(Ending.error, "ExcType: message" + traceback tail)

The child puts itself in its own process group (a timeout kill reaches the programs the
handler started), dies with its parent (PR_SET_PDEATHSIG: a SIGKILLed worker leaves no
orphan finishing a job that is rescued elsewhere) and ignores SIGTERM/SIGINT/SIGHUP:
stopping is the parent's decision (systemd signals the whole cgroup).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType

from ingestd import log
from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.errors import IngestdError
from ingestd.queue.claims import Job
from worker.jobs import JobContext, Kind, LimitReached, load
from worker.limits import fewer_malloc_arenas
from worker.outcomes import Done, Ended, Ending, Result

_PR_SET_PDEATHSIG = 1
TRACEBACK_FRAMES = 3


# -- the messages -------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """Parent -> child: run this job, answer with its ``Result``."""

    job: Job


@dataclass(frozen=True)
class Reconfigure:
    """Parent -> child: use this config from the next job on (a SIGHUP reload)."""

    config: Config


@dataclass(frozen=True)
class Stop:
    """Parent -> child: exit (only sent to an idle child)."""


@dataclass(frozen=True)
class Ready:
    """Child -> parent, once: the job kinds are loaded, jobs may come."""

    pid: int


Order = Run | Reconfigure | Stop


class Woke(enum.Enum):
    """What ended a ``Child.wait``."""

    answered = "answered"  # the child sent its answer (receive() it)
    exited = "exited"  # the child is gone
    woken = "woken"  # one of the extra descriptors is readable (a signal's wake-up byte)
    timed_out = "timed_out"  # none of these within the timeout


class ChildStartError(IngestdError):
    """The job child did not come up (it died while importing, or never said ready)."""


# -- the parent's handle ------------------------------------------------------------------
class Child:
    """The worker's handle on its job child."""

    def __init__(self, config: Config, conninfo: str, plugins: Sequence[str]) -> None:
        self._args = (config, conninfo, tuple(plugins), os.getpid())
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._new_config: Config | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def start(self, timeout: float = 60.0, *, fork: bool = False) -> int:
        """Start the child and wait until it has loaded the job kinds; returns its pid.

        ``fork``: fork it if this process has no other thread (nothing can be left
        holding a lock in the copy); otherwise, and by default, spawn it.
        """
        ctx = (
            multiprocessing.get_context("fork")
            if fork and threading.active_count() == 1
            else multiprocessing.get_context("spawn")
        )
        parent_end, child_end = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=child_main, args=(child_end, *self._args), name="ingestd-job")
        proc.start()
        child_end.close()
        self._proc, self._conn, self._new_config = proc, parent_end, None
        ready = multiprocessing.connection.wait([parent_end, proc.sentinel], timeout)
        msg: object = None
        if parent_end in ready:
            with contextlib.suppress(EOFError, OSError):
                msg = parent_end.recv()
        if not isinstance(msg, Ready):
            why = "did not start in time" if not ready else self.describe_exit()
            self.kill()
            raise ChildStartError(f"job child {why}; see the log lines above")
        return msg.pid

    def reconfigure(self, config: Config) -> None:
        """A reloaded config, for the child's next job (sent with it: a child busy for an
        hour must not have reloads pile up in the pipe) and for the next child started."""
        self._args = (config, *self._args[1:])
        self._new_config = config

    def run(self, job: Job) -> None:
        """Hand the idle child a job; its answer comes back through wait()/receive()."""
        assert self._conn is not None
        if self._new_config is not None:
            self._send(Reconfigure(self._new_config))
            self._new_config = None
        self._send(Run(job))

    def _send(self, order: Order) -> None:
        assert self._conn is not None
        self._conn.send(order)

    def wait(self, timeout: float, extra: Sequence[int] = ()) -> Woke:
        """Block until the child answers, exits, an fd in ``extra`` is readable or
        ``timeout`` passes; which one it was."""
        assert self._conn is not None and self._proc is not None
        ready = multiprocessing.connection.wait(
            [self._conn, self._proc.sentinel, *extra], max(0.0, timeout)
        )
        if self._conn in ready:
            return Woke.answered
        if self._proc.sentinel in ready:
            return Woke.exited
        return Woke.woken if ready else Woke.timed_out

    def receive(self) -> Result | None:
        """The child's answer, or None if it died instead."""
        assert self._conn is not None
        try:
            msg = self._conn.recv()
        except (EOFError, OSError):
            return None
        if isinstance(msg, Done | Ended):
            return msg
        return Ended(Ending.error, f"job child sent an unexpected message {msg!r:.200}")

    def describe_exit(self) -> str:
        """'signal 9' / 'exit code 3' once the child is gone (waits a little for it)."""
        if self._proc is None:
            return "not started"
        self._proc.join(5)
        code = self._proc.exitcode
        if code is None:
            return "still running"
        return f"signal {-code}" if code < 0 else f"exit code {code}"

    def kill(self) -> None:
        """SIGKILL the child and everything in its process group; reap it."""
        proc, self._proc = self._proc, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if proc is None:
            return
        if proc.pid is not None and proc.exitcode is None:
            # Its own group once it ran setpgid (pgid == pid); else only the process.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        proc.join(10)
        if proc.exitcode is not None:
            proc.close()  # its sentinel fd

    def stop(self, timeout: float = 5.0) -> None:
        """Ask an idle child to exit; kill it if it does not."""
        if self._proc is not None and self._proc.is_alive() and self._conn is not None:
            with contextlib.suppress(OSError, ValueError):
                self._send(Stop())
            self._proc.join(timeout)
        self.kill()


# -- the child ----------------------------------------------------------------------------
def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the pipe's EOF still ends an idle child
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A no-op handler, not SIG_IGN: programs the handler executes get default dispositions."""


def describe_exception(exc: BaseException) -> str:
    """'ExcType: message' plus where it was raised (the last few frames)."""
    head = f"{type(exc).__name__}: {exc}".rstrip(": ")
    frames = traceback.extract_tb(exc.__traceback__)[-TRACEBACK_FRAMES:]
    tail = [f"  at {'/'.join(Path(f.filename).parts[-2:])}:{f.lineno} in {f.name}" for f in frames]
    return "\n".join([head, *tail])


def run_job(job: Job, kinds: dict[str, Kind], config: Config, db: Database) -> Result:
    kind = kinds.get(job.kind)
    if kind is None:  # the parent refuses these first; kept for a child on old plugins
        return Ended(Ending.permanent, f"unknown job kind {job.kind!r}; not retried")
    logger = log.get_logger(
        component="job",
        job_id=job.id,
        kind=job.kind,
        tenant=job.tenant,
        document_id=job.document_id,
        trace=job.trace,
    )
    ctx = JobContext(job=job, config=config, db=db, log=logger)
    try:
        kind.handler(ctx)
    except LimitReached as exc:  # retried once, then attention: the runner's limit_rule
        return Ended(Ending.limit, exc.message, again=exc.again)
    except IngestdError as exc:
        # Retry or not is the error's own ``transient``; attention, its ``attention``.
        if exc.transient:
            return Ended(Ending.error, describe_exception(exc))
        ending = Ending.attention if exc.attention else Ending.permanent
        return Ended(ending, exc.message or type(exc).__name__)
    except BaseException as exc:  # SystemExit from a handler is a failed attempt too
        return Ended(Ending.error, describe_exception(exc))
    return Done(ctx.result, ctx.data)


def child_main(
    conn: Connection, config: Config, conninfo: str, plugins: tuple[str, ...], parent_pid: int
) -> None:
    _die_with_parent(parent_pid)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    fewer_malloc_arenas()  # before the OCR page threads exist
    log.configure(config.log.level, config.log.format)
    kinds = load(plugins)
    db = Database(
        conninfo,
        min_size=1,
        max_size=2,
        connect_timeout=config.database.connect_timeout,
        name="ingestd-job",
        # A job reads what the intake wrote: never from a fenced old primary (a document
        # "not found" there would end the job in attention).
        verify_writable=True,
    ).open()
    try:
        conn.send(Ready(os.getpid()))
        while True:  # ends with Stop() or the parent's end of the pipe closing
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            if isinstance(msg, Stop):
                break
            if isinstance(msg, Reconfigure):
                config = msg.config
                log.configure(config.log.level, config.log.format)
                continue
            if isinstance(msg, Run):
                result = run_job(msg.job, kinds, config, db)
                try:
                    conn.send(result)
                except (BrokenPipeError, EOFError):
                    break
                except Exception as exc:  # unpicklable: what it derived cannot be written
                    conn.send(
                        Ended(
                            Ending.error,
                            f"job result could not be sent to the worker: "
                            f"{type(exc).__name__}: {exc}",
                        )
                    )
    finally:
        db.close()
