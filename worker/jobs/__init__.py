"""Job kinds and their handlers: one module per kind, registered by name.

A handler runs in the worker's child process with a ``JobContext``. It returns normally
on success, raises ``PermanentError`` for a failure no retry can fix (an encrypted PDF,
a malformed payload), and any other exception for a failure worth retrying.

A kind may also have an *applier*: what the handler derived (``ctx.data``) travels back to
the worker, which writes it with the applier in the same transaction that marks the job
done. So derived data and the job's completion commit together or not at all, and only
while the job is still this worker's (a rescued attempt's results are never written).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ingestd.config.settings import Config
from ingestd.db.database import Database, Tx
from ingestd.errors import IngestdError
from ingestd.jobkinds import DEFAULT_FAILED_EVENT, RETIRED_KINDS
from ingestd.log import Logger
from ingestd.queue.claims import Job
from ingestd.states import TenantStatus


class PermanentError(IngestdError):
    """A failure retrying cannot fix: the job goes to ``failed`` at once."""

    transient = False


class LimitReached(IngestdError):
    """A limit that may be the machine's moment rather than the file's (OCR past its
    time on a busy machine): the attempt fails and is retried once, like a job killed at
    its time limit (worker/outcomes.py, ``limit_rule``); reached again, the document
    needs attention (any other job fails for good), its reason ending with ``again``."""

    transient = True

    def __init__(self, message: str, *, again: str) -> None:
        super().__init__(message)
        self.again = again


class NeedsAttention(PermanentError):
    """The document itself cannot be handled (encrypted, damaged, over a limit,
    unsupported): it stays archived and ends in ``attention`` with this reason, for an
    operator to re-queue or mark done without text."""

    attention = True


@dataclass
class JobContext:
    job: Job
    config: Config
    db: Database
    log: Logger
    # A short summary for the log line of the outcome (counts, names; not the text).
    result: dict[str, Any] = field(default_factory=dict)
    # What the kind's applier writes when the job is marked done (may be large: OCR text),
    # of the kind's own type (``Analysis`` for analyze-document; a small dict for others).
    # It crosses the child's pipe, so it is plain, picklable data.
    data: object = field(default_factory=dict)


Handler = Callable[[JobContext], None]
# (transaction, job, ctx.data) -> None; runs in the worker, inside the done transaction.
# The data's type is each kind's own: the registry of all kinds cannot name it, so this
# one seam says Any and every applier declares the type it takes.
Applier = Callable[[Tx, Job, Any], None]
# (job, ctx.result) -> None; runs in the worker once the job is recorded done: the kind's
# own metrics (pages OCRed, batches split), so the generic recorder names no kind.
Counter = Callable[[Job, Mapping[str, Any]], None]


@dataclass(frozen=True)
class Kind:
    name: str
    handler: Handler
    # The tenant statuses a job of this kind may run under (seed 004: analyze and purge
    # need an active tenant; provision runs while "creating", delete while "deleting").
    tenant_status: frozenset[str]
    apply: Applier | None = None
    # The operator event written when a job of this kind fails for good (None: none); a
    # built-in kind's is ingestd.jobkinds.FAILED_EVENTS (a test holds them equal).
    failed_event: str | None = DEFAULT_FAILED_EVENT
    count: Counter | None = None


REGISTRY: dict[str, Kind] = {}
BUILTIN_MODULES = (
    "worker.jobs.analyze",
    "worker.jobs.split",
    "worker.jobs.tenants",
    "worker.jobs.purge",
    "worker.jobs.deliveries",
    "worker.jobs.notify",
)


def register(
    name: str,
    *,
    tenant_status: Iterable[str] = (TenantStatus.active,),
    apply: Applier | None = None,
    failed_event: str | None = DEFAULT_FAILED_EVENT,
    count: Counter | None = None,
) -> Callable[[Handler], Handler]:
    if name in RETIRED_KINDS:
        raise ValueError(f"{name!r} is a retired job kind")

    def decorate(fn: Handler) -> Handler:
        REGISTRY[name] = Kind(name, fn, frozenset(tenant_status), apply, failed_event, count)
        return fn

    return decorate


def load(plugins: Iterable[str] = ()) -> dict[str, Kind]:
    """Import the built-in kinds and any plugin modules (tests, benchmarks, site code)."""
    for module in (*BUILTIN_MODULES, *plugins):
        importlib.import_module(module)
    return REGISTRY


def refusal(job: Job) -> str | None:
    """Why ``job`` must fail at once without running, or None if it may run."""
    if job.kind in RETIRED_KINDS:
        return (
            f"job kind {job.kind!r} is retired (its work runs inside analyze-document); not retried"
        )
    kind = REGISTRY.get(job.kind)
    if kind is None:
        known = ", ".join(sorted(REGISTRY)) or "none"
        return f"unknown job kind {job.kind!r} (known: {known}); not retried"
    if job.tenant_status not in kind.tenant_status:
        allowed = "/".join(sorted(kind.tenant_status))
        return (
            f"tenant {job.tenant!r} is {job.tenant_status}; {job.kind} needs it {allowed}; "
            "not retried"
        )
    return None
