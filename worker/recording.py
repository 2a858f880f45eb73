"""Write how an attempt ended into the queue, log it and count it.

    Done                      -> Queue.done with the kind's applier (its data and the
                                 job's completion in one transaction), or a failed
                                 attempt if the applier raised
    Ended released            -> Queue.release: handed back, no attempt counted
    Ended lost                -> nothing to write: the job is another worker's now
    Ended timeout/died/limit  -> limit_rule, then as below
    Ended error/permanent/attention -> Queue.fail: retried, failed or needs attention

The database may be away for a moment while an outcome is written (``record`` retries);
if it stays away the lease runs out and another worker's rescue counts the attempt.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from structlog.typing import FilteringBoundLogger

from ingestd.errors import DatabaseUnavailable
from ingestd.jobkinds import DEFAULT_FAILED_EVENT
from ingestd.queue.claims import Job, Queue
from ingestd.runtime import metrics
from worker.jobs import Kind
from worker.outcomes import Done, Ended, Ending, JobStatus, Result, describe, elapsed, limit_rule

T = TypeVar("T")

DB_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0)


def outage_backoff(failures: int) -> float:
    """Seconds before a loop tries the database again after ``failures`` failed turns in a
    row (a slot's loop, the process's housekeeping): 1, 2, 4 ... 30 at most."""
    return min(2.0 ** min(failures, 5), 30.0)


class Observed(enum.StrEnum):
    """The ``outcome`` label of ``ingestd_job_seconds``."""

    done = "done"
    refused = "refused"
    released = "released"
    lost = "lost"
    retry = "retry"
    failed = "failed"
    attention = "attention"  # the document needs an operator (not a failed job)


def observe(job: Job, outcome: Observed, t0: float) -> None:
    metrics.JOB_SECONDS.labels(job.kind, outcome).observe(time.monotonic() - t0)
    if outcome in (Observed.failed, Observed.refused):
        metrics.JOBS_FAILED.labels(job.tenant, job.kind).inc()
    elif outcome is Observed.attention:
        metrics.JOBS_ATTENTION.labels(job.tenant, job.kind).inc()


def record(jl: FilteringBoundLogger, write: Callable[[], T]) -> T | None:
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


def record_refusal(
    queue: Queue, jl: FilteringBoundLogger, job: Job, reason: str, t0: float
) -> None:
    """A job that may not run (retired or unknown kind, the tenant's status): failed for
    good without running."""
    record(jl, lambda: queue.fail(job, reason, permanent=True, failed_event=DEFAULT_FAILED_EVENT))
    jl.warning("job.refused", error=reason, seconds=elapsed(t0))
    observe(job, Observed.refused, t0)


def record_outcome(
    queue: Queue,
    kinds: Mapping[str, Kind],
    job: Job,
    jl: FilteringBoundLogger,
    result: Result,
    t0: float,
    timeout: float,
) -> None:
    """Record what happened to ``job``'s attempt (started at ``t0``, under ``timeout``)."""
    seconds = elapsed(t0)
    registered = kinds.get(job.kind)
    if isinstance(result, Done):
        failed = _record_done(queue, registered, job, jl, result, t0)
        if failed is None:
            return
        result = failed
    if result.ending is Ending.released:
        if record(jl, lambda: queue.release(job)):
            jl.warning("job.released", seconds=seconds, reason=result.detail)
        observe(job, Observed.released, t0)
        return
    if result.ending is Ending.lost:
        jl.warning("job.lost", seconds=seconds, error=result.detail)
        return
    if result.ending is Ending.timeout:
        jl.error("job.timeout", seconds=seconds, timeout=timeout)
        result = limit_rule(job, result, timeout)
    elif result.ending is Ending.died:
        jl.error("job.child_died", seconds=seconds, error=result.detail)
        result = limit_rule(job, result, timeout)
    elif result.ending is Ending.limit:
        result = limit_rule(job, result, timeout)
    _record_failure(queue, registered, job, jl, result, t0)


def _record_done(
    queue: Queue, registered: Kind | None, job: Job, jl: FilteringBoundLogger, done: Done, t0: float
) -> Ended | None:
    """Mark the job done with its applier's writes; None once recorded, or the failed
    attempt to record instead (the applier raised)."""
    seconds = elapsed(t0)
    apply = registered.apply if registered is not None else None
    try:
        ours = record(jl, lambda: queue.done(job, apply, done.data))
    except Exception as exc:  # the applier failed: a failed attempt, not a lost job
        return Ended(Ending.error, f"writing the job's results failed: {describe(exc)}")
    if ours:
        jl.info("job.done", seconds=seconds, result=done.summary or None)
        observe(job, Observed.done, t0)
        if registered is not None and registered.count is not None:
            registered.count(job, done.summary)  # the kind's own metrics
    else:
        jl.warning(
            "job.lost",
            seconds=seconds,
            error="finished, but the job was no longer ours (lease expired)",
        )
    return None


def _record_failure(
    queue: Queue,
    registered: Kind | None,
    job: Job,
    jl: FilteringBoundLogger,
    ended: Ended,
    t0: float,
) -> None:
    """A failed attempt: queued again for a retry, failed for good, or (a document's
    job) needing attention."""
    seconds = elapsed(t0)
    detail = ended.detail
    permanent = ended.ending in (Ending.permanent, Ending.attention)
    attention = ended.ending is Ending.attention
    event = registered.failed_event if registered is not None else DEFAULT_FAILED_EVENT
    outcome = record(
        jl,
        lambda: queue.fail(
            job, detail, permanent=permanent, attention=attention, failed_event=event
        ),
    )
    if outcome is None:
        observe(job, Observed.lost, t0)
        jl.warning("job.lost", seconds=seconds, error=detail)
    elif outcome.status == JobStatus.queued:
        observe(job, Observed.retry, t0)
        jl.warning(
            "job.retry",
            seconds=seconds,
            attempt=outcome.retry_count,
            next_attempt_at=outcome.next_attempt_at.isoformat(),
            error=detail,
        )
    elif attention:
        observe(job, Observed.attention, t0)
        jl.error(
            "job.needs_attention", seconds=seconds, attempt=outcome.retry_count + 1, reason=detail
        )
    else:
        observe(job, Observed.failed, t0)
        jl.error(
            "job.failed",
            seconds=seconds,
            attempt=outcome.retry_count,
            permanent=permanent,
            error=detail,
        )
