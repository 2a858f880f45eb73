"""bench/queue.py's worker processes: what each runs (``worker_main``: ingestd's claim,
the FIFO claim or a lane's scope, in a loop), starting them together and stopping them
(``Procs``), and their command lines (``python bench/queue.py --worker SPEC``)."""

from __future__ import annotations

import contextlib
import json
import random
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench._common import BenchError
from bench._queue_harness import (
    ANY_QUEUED,
    EMPTY_SLEEP,
    FIFO_CLAIM,
    FIFO_DONE,
    ROOT,
    RUN_TIMEOUT,
    START_TIMEOUT,
    WORKERS,
)
from ingestd.config.settings import WorkerConfig
from ingestd.db.database import Database, connect_once
from ingestd.queue.claims import NOTIFY_CHANNEL, Queue
from ingestd.queue.pools import EVERYTHING, Scope, resolve


# -- worker processes -------------------------------------------------------------------
def lane_scope(lane: str | None) -> Scope:
    """The claim's scope of a bench worker: the default pool's short lane, or everything
    (the default pool's other lanes: every tenant, every kind)."""
    if lane != "short":
        return EVERYTHING
    short = resolve(WorkerConfig()).short_scope
    assert short is not None  # the default pool serves every kind, the short ones too
    return short


def worker_main(spec: dict[str, Any]) -> None:
    """One worker process: "ready", wait for "go", claim + done until quota/empty/"stop".

    Optional in ``spec``: ``lane`` ("short": the default pool's short lane), ``hold``
    (kind -> [min, max] seconds the job "runs" between claim and done, uniform), ``idle``
    (seconds to wait after a claim found nothing while jobs are queued) and ``listen``
    (that wait ends early on a NOTIFY ingestd_jobs, as a real worker's idle wait does:
    worker/listener.py).
    """
    db = Database(spec["conninfo"], max_size=1, name=spec["id"]).open()
    queue = Queue(db, WorkerConfig(), spec["id"], scope=lane_scope(spec.get("lane")))
    fifo = spec["mode"] == "fifo"
    hold: dict[str, list[float]] = spec.get("hold") or {}
    idle = float(spec.get("idle", EMPTY_SLEEP))
    rng = random.Random(spec["id"])
    listener = None
    if spec.get("listen"):
        listener = connect_once(spec["conninfo"], autocommit=True, timeout=START_TIMEOUT)
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
    params = {"worker": spec["id"], "lease": queue.config.lease_seconds}
    with db.transaction() as tx:
        tx.raw("SELECT 1")
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.readline()  # "stop", or EOF when the parent is gone
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    quota = spec["quota"]
    deadline = time.monotonic() + RUN_TIMEOUT
    claims = empty = 0
    claim_log: list[tuple[float, int]] = []  # (wall clock when the claim returned, job id)
    while (quota is None or claims < quota) and not stop.is_set():
        if time.monotonic() > deadline:
            break
        if fifo:
            with db.autocommit() as tx:  # as Queue.claim
                row = tx.raw(FIFO_CLAIM, params)
            job_id = row[0]["id"] if row else None
            attempt = row[0]["attempt"] if row else None
        else:
            job = queue.claim()
            job_id = job.id if job else None
        if spec.get("log") and job_id is not None:
            claim_log.append((time.time(), job_id))
        if job_id is None:
            with db.transaction() as tx:
                if not tx.raw(ANY_QUEUED)[0]["q"]:
                    break
            # Jobs wait, but every tenant that has some was locked by another claimer (or
            # capped, or none is in this lane's scope).
            empty += 1
            if listener is None:
                time.sleep(idle)
            else:
                select.select([listener.fileno()], [], [], idle)
                for _ in listener.notifies(timeout=0):
                    pass
            continue
        if not fifo and hold:
            assert job is not None
            if span := hold.get(job.kind):
                time.sleep(rng.uniform(*span))
        if fifo:
            with db.autocommit() as tx:  # as Queue.done
                tx.raw(FIFO_DONE, {**params, "id": job_id, "attempt": attempt})
        else:
            assert job is not None
            queue.done(job)
        claims += 1
    if listener is not None:
        listener.close()
    db.close()
    print(json.dumps({"claims": claims, "empty": empty, "log": claim_log}), flush=True)


class Procs:
    """Worker processes speaking lines: "ready" -> "go" -> ["stop"] -> one result line."""

    def __init__(self, argvs: list[list[str]], logdir: Path, name: str) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        for i, argv in enumerate(argvs):
            log = logdir / f"{name}-{i}.log"
            self.logs.append(log)
            with open(log, "wb") as err:
                self.procs.append(
                    subprocess.Popen(
                        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=ROOT
                    )
                )

    def _line(self, i: int, deadline: float) -> str:
        proc = self.procs[i]
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                line = proc.stdout.readline().decode().strip()
                if line:
                    return line
                proc.wait(timeout=10)
                break
        tail = self.logs[i].read_text(errors="replace")[-3000:]
        raise BenchError(f"worker {i} ({proc.args!r}): no answer (exit {proc.poll()}):\n{tail}")

    def _send(self, word: str) -> None:
        for p in self.procs:
            assert p.stdin is not None
            with contextlib.suppress(OSError):
                p.stdin.write(word.encode() + b"\n")
                p.stdin.flush()

    def ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        for i in range(len(self.procs)):
            if (line := self._line(i, deadline)) != "ready":
                raise BenchError(f"worker {i}: expected 'ready', got {line!r}")

    def go(self) -> float:
        start = time.time()
        self._send("go")
        return start

    def stop(self) -> None:
        self._send("stop")

    def results(self) -> list[dict[str, Any]]:
        deadline = time.monotonic() + RUN_TIMEOUT + 60
        out = [json.loads(self._line(i, deadline)) for i in range(len(self.procs))]
        for i, p in enumerate(self.procs):
            if p.wait(timeout=60) != 0:
                raise BenchError(
                    f"worker {i} exited {p.returncode}:\n"
                    f"{self.logs[i].read_text(errors='replace')[-3000:]}"
                )
        return out

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
            for stream in (p.stdin, p.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


@contextlib.contextmanager
def processes(argvs: list[list[str]], logdir: Path, name: str) -> Iterator[Procs]:
    procs = Procs(argvs, logdir, name)
    try:
        procs.ready()
        yield procs
    finally:
        procs.kill()


def worker_argvs(
    conninfo: str,
    mode: str,
    quota: int | None,
    tag: str,
    log: bool = False,
    n: int = WORKERS,
    **extra: Any,
) -> list[list[str]]:
    """``n`` worker processes' command lines; ``extra`` goes into each spec (worker_main)."""
    return [
        [
            sys.executable,
            str(Path(__file__).resolve().with_name("queue.py")),  # its --worker mode
            "--worker",
            json.dumps(
                {
                    "conninfo": conninfo,
                    "mode": mode,
                    "quota": quota,
                    "id": f"{tag}-w{i}",
                    "log": log,
                    **extra,
                }
            ),
        ]
        for i in range(n)
    ]
