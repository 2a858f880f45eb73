"""How one attempt at a job ended: the typed hand-off from the job child to the runner.

The child answers ``Done`` (the handler returned) or ``Ended`` with ``Ending.error``,
``permanent`` or ``attention`` (it raised); the runner itself finds the endings the child
cannot report (``died``, ``timeout``, ``released``, ``lost``). Both travel pickled over
the child's pipe, so they hold plain data only. ``limit_rule`` decides what a timeout or
a dead child means for the job's retries; the recording of all of it is
``worker/recording.py``.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from ingestd.errors import IngestdError
from ingestd.queue.claims import Job


class Ending(enum.Enum):
    """Why an attempt did not end ``Done``."""

    # Reported by the child (the handler raised):
    error = "error"  # anything else: a failed attempt, retried on the ladder
    permanent = "permanent"  # PermanentError: failed at once, not retried
    attention = "attention"  # NeedsAttention: the document waits for an operator
    limit = "limit"  # LimitReached: a limit that may be the machine's moment (limit_rule)
    # Found by the runner:
    died = "died"  # the child exited mid-job (OOM killer, a crash in a C library)
    timeout = "timeout"  # the kind's time limit ran out; the child was killed
    released = "released"  # a stop's shutdown grace ran out: handed back, not failed
    lost = "lost"  # the lease was lost (another worker rescued the job)


@dataclass(frozen=True)
class Done:
    """The handler returned: its summary for the log line and what its applier writes."""

    summary: dict[str, Any] = field(default_factory=dict)
    data: object = field(default_factory=dict)  # the kind's own type (JobContext.data)


@dataclass(frozen=True)
class Ended:
    """The attempt ended otherwise; ``detail`` says why, for the log and the job row."""

    ending: Ending
    detail: str
    # Ending.limit: how the reason ends when the limit is reached again after the retry.
    again: str = ""


Result = Done | Ended


class JobStatus(enum.StrEnum):
    """The job statuses the runner reads back from the queue (``FailOutcome.status``, a
    rescued row's ``status``). The queue spells them as text; named here so the runner
    compares members, not literals."""

    queued = "queued"  # failed this time, queued again for a retry
    failed = "failed"  # failed for good


def limit_rule(job: Job, ended: Ended, timeout: float) -> Ended:
    """The one retry-once rule, for every limit that may be the machine's moment rather
    than the file's: a job killed at its time limit, a child that died (the OOM killer, a
    crash in a C library), a limit a job reports itself (``LimitReached``: OCR past
    ``analysis.ocr_timeout``). The first time it is retried: the machine may have been
    busy, or short of memory for a moment. The second time it is the file: a document's
    job ends needing attention with the limit named, any other job fails for good; no
    more blind retries, each of which would take the same time or memory again."""
    assert ended.ending in (Ending.timeout, Ending.died, Ending.limit)
    if job.retry_count < 1:
        return Ended(Ending.error, ended.detail)
    if ended.ending is Ending.limit:
        tail = ended.again
    elif ended.ending is Ending.timeout:
        limit = f"worker.timeouts.{job.kind} ({number(timeout)} s)"
        tail = f"again after a retry: it exceeds the limit {limit}"
    else:
        tail = "again after a retry: it exceeds the memory or the program it needs (the child died)"
    detail = f"{ended.detail}; {tail}"
    return Ended(Ending.attention if job.document_id is not None else Ending.permanent, detail)


def describe(exc: BaseException) -> str:
    """'ExcType: message', at most 2,000 characters (our errors' message without the
    exit code's decoration)."""
    message = exc.message if isinstance(exc, IngestdError) else str(exc)
    return f"{type(exc).__name__}: {message}"[:2000]


def elapsed(t0: float) -> float:
    """Seconds since the monotonic ``t0``, to the millisecond (log lines)."""
    return round(time.monotonic() - t0, 3)


def number(x: float) -> str:
    """A limit as the config spells it: 30, not 30.0."""
    return f"{x:g}"
