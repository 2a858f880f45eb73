"""What the worker does between jobs: rescue expired leases, relay events, prune old jobs
and old arrivals.

Every worker does it (there is no leader to elect); each step is one short statement
that is cheap when there is nothing to do and safe when two workers do it at once. When
the runner calls them is its own business (``Runner._housekeeping``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from structlog.typing import FilteringBoundLogger

from ingestd.archive.store import remove_tree
from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.errors import DatabaseError
from ingestd.ops import metrics
from ingestd.queue.claims import Queue
from ingestd.queue.pools import EVERYTHING, Scope
from worker.jobs import notify, split
from worker.outcomes import JobStatus

PRUNE_MAX_BATCHES = 20  # batches of one prune pass
PRUNE_BATCH = 5000  # rows Queue.prune deletes at most per call
LOGGED_RESCUES = 50  # rescued jobs named in one log line


def rescue(queue: Queue, db: Database, config: Config, log: FilteringBoundLogger) -> None:
    """Take back the jobs whose lease ran out (their worker died or hangs), then relay
    new operator events into notify jobs at the same pace (the outbox's relay)."""
    rows = queue.rescue()
    count_failed_rescues(rows)
    try:
        notify.relay(db, config)
    except DatabaseError:
        raise  # the loop's backoff handles an outage
    except Exception:  # a bug in matching must not stop the worker's jobs
        log.exception("worker.relay_failed")
    if rows:
        log.warning(
            "worker.rescued",
            count=len(rows),
            jobs=[
                {"id": r["id"], "status": r["status"], "worker": r["worker_id"]}
                for r in rows[:LOGGED_RESCUES]
            ],
        )


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
