"""What a worker process does beside its jobs: rescue expired leases, relay operator
events into notify jobs, prune old jobs, old arrivals and stale split work.

Every worker process does it (there is no leader to elect); each step is one short
statement that is cheap when there is nothing to do and safe when two workers do it at
once. ``Housekeeper`` keeps the clocks: once per process, never once per lane. A single
runner asks it between jobs (``Runner._housekeeping``); a process with lanes asks it from
its main loop (worker/lanes.py), so one lane's hour-long OCR job never holds up the
rescue of another worker's jobs or the relay of a notification.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from structlog.typing import FilteringBoundLogger

from ingestd.archive.store import remove_tree
from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.errors import DatabaseError
from ingestd.queue.claims import Queue
from ingestd.queue.pools import EVERYTHING, Scope
from ingestd.runtime import metrics
from worker.jobs import notify, split
from worker.outcomes import JobStatus

PRUNE_MAX_BATCHES = 20  # batches of one prune pass
PRUNE_BATCH = 5000  # rows Queue.prune deletes at most per call
LOGGED_RESCUES = 50  # rescued jobs named in one log line


PRUNE_EVERY = 3600.0  # at start, then hourly: cheap when there is nothing to do
RESCUE_EVERY_MAX = 5.0  # and at most half a lease


class Housekeeper:
    """The process's housekeeping clocks: rescue and relay every few seconds, prune
    hourly. ``config`` and ``queue`` are read at each step (a reload changes them)."""

    def __init__(
        self,
        db: Database,
        config: Callable[[], Config],
        queue: Callable[[], Queue],
        log: FilteringBoundLogger,
    ) -> None:
        self.db, self.config, self.queue, self.log = db, config, queue, log
        now = time.monotonic()
        self.next_rescue = now
        self.next_prune = now

    def next_due(self) -> float:
        """The monotonic time of the next step."""
        return min(self.next_rescue, self.next_prune)

    def run_due(self) -> None:
        """The steps whose time has come; DatabaseError goes to the caller's backoff."""
        now = time.monotonic()
        if now >= self.next_rescue:
            self.rescue_and_relay()
        if now >= self.next_prune:
            self.next_prune = now + PRUNE_EVERY
            prune(self.queue(), self.config(), self.log)

    def rescue_and_relay(self) -> None:
        """Both now (also what --drain does before it counts what is left)."""
        config = self.config()
        self.next_rescue = time.monotonic() + min(RESCUE_EVERY_MAX, config.worker.lease_seconds / 2)
        rescue_and_relay(self.queue(), self.db, config, self.log)


def rescue_and_relay(queue: Queue, db: Database, config: Config, log: FilteringBoundLogger) -> None:
    """Expired leases taken back, then new operator events relayed: the two steps on the
    rescue's clock (and what --drain does before it counts what is left)."""
    rescue(queue, log)
    relay(db, config, log)


def rescue(queue: Queue, log: FilteringBoundLogger) -> None:
    """Take back the jobs whose lease ran out (their worker died or hangs)."""
    rows = queue.rescue()
    count_failed_rescues(rows)
    if rows:
        log.warning(
            "worker.rescued",
            count=len(rows),
            jobs=[
                {"id": r["id"], "status": r["status"], "worker": r["worker_id"]}
                for r in rows[:LOGGED_RESCUES]
            ],
        )


def relay(db: Database, config: Config, log: FilteringBoundLogger) -> None:
    """New operator events into notify jobs (the outbox's relay), at the rescue's pace."""
    try:
        notify.relay(db, config)
    except DatabaseError:
        raise  # the loop's backoff handles an outage
    except Exception:  # a bug in matching must not stop the worker's jobs
        log.exception("worker.relay_failed")


def count_failed_rescues(rows: Sequence[Mapping[str, Any]]) -> None:
    """Rescued jobs whose lease ran out once too often are failed for good: counted too."""
    for r in rows:
        if r["status"] == JobStatus.failed:
            metrics.JOBS_FAILED.labels(str(r["tenant"]), str(r["kind"])).inc()


def prune(queue: Queue, config: Config, log: FilteringBoundLogger) -> None:
    """Delete finished jobs older than worker.prune_after, a bounded number of batches
    per pass (the next pass, an hour later, goes on)."""
    total = 0
    for _ in range(PRUNE_MAX_BATCHES):
        n = queue.prune()
        total += n
        if n < PRUNE_BATCH:
            break
    if total:
        log.info("worker.pruned", jobs=total, older_than_s=config.worker.prune_after)
    prune_arrivals(queue.db, config, log)
    sweep_split_work(queue.db, config, log)


def prune_arrivals(db: Database, config: Config, log: FilteringBoundLogger) -> int:
    """Delete arrival rows older than ``[arrivals] keep_days`` (bounded batches per pass,
    like the jobs)."""
    total = 0
    for _ in range(PRUNE_MAX_BATCHES):
        with db.transaction() as tx:
            n = tx.run("arrivals_prune", {"days": config.arrivals.keep_days})
        total += n
        if n < PRUNE_BATCH:
            break
    if total:
        log.info("worker.arrivals_pruned", arrivals=total, keep_days=config.arrivals.keep_days)
    return total


def sweep_split_work(db: Database, config: Config, log: FilteringBoundLogger) -> int:
    """Remove split-batch work directories whose job is no longer queued or running (a
    lost attempt whose job then failed for good leaves its children's work files)."""
    root = config.paths.derived_dir / split.WORK_DIR
    try:
        found = {int(p.name.removeprefix("job-")): p for p in root.glob("job-*")}
    except (OSError, ValueError):
        return 0
    if not found:
        return 0
    with db.transaction() as tx:
        live = {int(r["id"]) for r in tx.all("jobs_live", {"ids": sorted(found)})}
    removed = 0
    for job_id, path in found.items():
        if job_id not in live:
            remove_tree(path)
            removed += 1
    if removed:
        log.info("worker.split_work_removed", directories=removed)
    return removed


def queue_counts(db: Database, scope: Scope = EVERYTHING) -> tuple[int, int]:
    """(ready, running) jobs of ``scope`` over all workers."""
    params = scope.params()
    with db.transaction() as tx:
        row = tx.one("scope_counts", params)
    assert row is not None  # an aggregate has a row
    return int(row["ready"]), int(row["running"])
