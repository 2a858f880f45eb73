"""What both sources do once a file is complete: hand it to intake and act on the outcome.

Hot folders and the SFTP spool decide differently *when* a file is complete; from then on
their path is one. ``Intake.ingest`` takes it. A refusal (the file itself is wrong) goes
to the failed folder with its note, a metric, a log line and a ``file.quarantined``
operator event. An exception says by its ``transient`` whether the file is retried
(``retry.cause_of``): a tenant that is not active, an outage or a busy source leave the
file where it is; only a bug is logged with its traceback. What a source does besides
(the hot folder's ``done`` folder and stuck files, the spool's bookkeeping) it passes in
as hooks, which run inside the same error handling.

Also here, because both sources say them: the tenant-status reason text, the tags a file
gets from its sub-folders.
"""

from __future__ import annotations

import contextlib
import enum
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import Counter

from ingestd.arrivals.record import Arrival, ArrivalOutcome
from ingestd.errors import DatabaseError, IngestdError, TenantError, TenantNotActive
from ingestd.intake.items import Disposal, IntakeItem, IntakeResult, Outcome
from ingestd.intake.tags import date_folder_flags
from ingestd.log import Logger, new_trace_id
from ingestd.runtime import metrics
from ingestd.sources import retry
from ingestd.sources.quarantine import ERROR_SUFFIX, quarantine

if TYPE_CHECKING:  # the SFTP processes import this module, and need neither
    from ingestd.events.outbox import EventLog
    from ingestd.intake.ingest import Intake

# A tenant's status when it is not in the database at all (a status of its own: its
# files wait, its logins are refused).
MISSING = "missing"


def tenant_reason(status: str) -> str:
    """The reason a login, an upload or a file is refused or kept for a tenant whose
    status is ``status`` (``tenant_suspended``, ``tenant_unknown`` ...): metric labels
    and log lines of both sources use it."""
    return "tenant_unknown" if status == MISSING else f"tenant_{status}"


_STATUS_TEXT = {
    MISSING: "does not exist (deleted, or not created yet)",
    "creating": "is not ready yet (being created)",
    "suspended": "is suspended",
    "deleting": "is being deleted",
}


def tenant_refusal_text(tenant: str, status: str) -> str:
    """What a client with the right credentials reads when ``tenant`` (status ``status``)
    takes no uploads: ``tenant acme is suspended; uploads are refused``. One wording for
    the login refusal and the refused OPEN, so a scanner's admin can search for it."""
    return f"tenant {tenant} {_STATUS_TEXT.get(status, f'is {status}')}; uploads are refused"


def tenant_status_of(exc: TenantError) -> str:
    """The status intake found for a file's tenant: its own, or ``MISSING``."""
    return exc.status if isinstance(exc, TenantNotActive) else MISSING


def subfolder_tags(
    tags: Iterable[str], subdir: str, *, enabled: bool, date_folders: bool = False
) -> tuple[str, ...]:
    """The configured ``tags`` and, if ``enabled``, the folder names of ``subdir`` ("a/b"
    below the hot folder or inbox), each once, in that order (a folder named like a
    configured tag, or twice on the path, adds nothing). Folders that only say when
    (``2026/11``, ``2026-11-30``: ``date_folder_flags``) only if ``date_folders``."""
    parts = subdir.split("/") if enabled and subdir else []
    if not date_folders:
        parts = [p for p, dated in zip(parts, date_folder_flags(parts), strict=True) if not dated]
    return tuple(dict.fromkeys([*tags, *parts]))


class Source(enum.StrEnum):
    """Which loop hands files over: the prefix of its log events, its metrics."""

    watch = "watch"
    spool = "spool"

    @property
    def retried(self) -> Counter:
        return metrics.WATCH_RETRIED if self is Source.watch else metrics.SPOOL_RETRIED

    @property
    def quarantined(self) -> Counter:
        return metrics.WATCH_QUARANTINED if self is Source.watch else metrics.SPOOL_QUARANTINED


class Step(enum.Enum):
    """What became of one attempt to hand a file over."""

    committed = "committed"  # ingested or a duplicate (and the ``committed`` hook ran)
    quarantined = "quarantined"  # refused for what it is: in the failed folder now
    gone = "gone"  # the file vanished (a user moved it; intake finished it before a crash)
    retry = "retry"  # left where it is, to be tried again for ``cause``
    protected = "protected"  # never to be touched again (the ``protected`` hook decided)


@dataclass(frozen=True)
class Attempt:
    step: Step
    cause: retry.Cause | None = None  # set for Step.retry
    detail: str = ""


# Causes a file waits for that its arrival row names (a file still being written does not
# wait for anything an operator could fix; a bug is in the log).
WAITING_CAUSES = frozenset(
    {retry.Cause.tenant_inactive, retry.Cause.database, retry.Cause.archive, retry.Cause.source}
)
# Files whose waiting cause was recorded, remembered at most (the oldest are forgotten).
MAX_WAITING_REMEMBERED = 10_000


@dataclass(frozen=True)
class Handoff:
    """One source's hand-off to intake (its events log: quarantined files are operator
    events; quarantined and waiting files are arrivals written through it)."""

    source: Source
    events: EventLog | None = None
    # trace id -> the waiting reason last recorded: once per file and cause, not per retry.
    _waiting: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def attempt(
        self,
        intake: Intake,
        item: IntakeItem,
        *,
        failed_dir: Path,
        log: Logger,
        attempts: int,
        disposal: Disposal = Disposal.delete,
        before_quarantine: Callable[[], None] | None = None,
        committed: Callable[[IntakeResult], None] | None = None,
        tenant_waiting: Callable[[TenantError], None] | None = None,
        protected: Callable[[str], None] | None = None,
    ) -> Attempt:
        """Ingest ``item`` (tried ``attempts`` times before) and act on the outcome.

        Hooks: ``before_quarantine`` may refuse the move to ``failed_dir`` by raising;
        ``committed`` deals with the source of a committed file; ``tenant_waiting``
        reports a file kept for its tenant; ``protected`` takes a file that retrying
        cannot help (``retry.cause_of`` is None) out of the loop. Without it such a file
        is retried as a bug: the spool's own files are never in the archive.
        """
        try:
            result = intake.ingest(item, disposal=disposal)
            if result.outcome is Outcome.refused:
                if before_quarantine is not None:
                    before_quarantine()
                moved_to = self._quarantine(item, result, failed_dir, log)
                self._arrival(
                    intake,
                    item,
                    ArrivalOutcome.quarantined,
                    str(result.reason),
                    result.detail,
                    location=moved_to,
                )
                return Attempt(Step.quarantined)
            if committed is not None:
                committed(result)
            return Attempt(Step.committed)
        except FileNotFoundError:
            return Attempt(Step.gone)
        except TenantError as exc:
            if tenant_waiting is not None:
                tenant_waiting(exc)
            self._waiting_arrival(intake, item, tenant_reason(tenant_status_of(exc)), exc.message)
            return Attempt(Step.retry, retry.Cause.tenant_inactive, exc.message)
        except Exception as exc:
            cause = retry.cause_of(exc)
            detail = exc.message if isinstance(exc, IngestdError) else str(exc)
            if cause is None and protected is not None:
                protected(detail)
                return Attempt(Step.protected, None, detail)
            cause = cause or retry.Cause.internal
            if cause in WAITING_CAUSES:
                self._waiting_arrival(intake, item, f"{cause}_unavailable", detail)
            if cause is retry.Cause.internal:
                log.exception(f"{self.source}.intake_error")
            else:
                log.warning(
                    f"{self.source}.retry", cause=str(cause), attempt=attempts + 1, detail=detail
                )
            return Attempt(Step.retry, cause, detail)

    def count_retry(self, tenant: str, cause: str) -> None:
        self.source.retried.labels(tenant, cause).inc()

    def _waiting_arrival(self, intake: Intake, item: IntakeItem, reason: str, detail: str) -> None:
        """The file waits where it is for ``reason``: its arrival row says so, once per
        file and reason (a retry every few seconds writes nothing new)."""
        key = item.trace or ""
        if self._waiting.get(key) == reason:
            return
        self._waiting[key] = reason
        if len(self._waiting) > MAX_WAITING_REMEMBERED:
            self._waiting.pop(next(iter(self._waiting)))
        self._arrival(intake, item, ArrivalOutcome.waiting, reason, detail)

    def _arrival(
        self,
        intake: Intake,
        item: IntakeItem,
        outcome: ArrivalOutcome,
        reason: str,
        detail: str,
        *,
        location: str | None = None,
    ) -> None:
        """Record the arrival of ``item`` as ``outcome``: through the event log (kept on
        disk while the database is down), or straight into the database without one."""
        if outcome is not ArrivalOutcome.waiting:
            self._waiting.pop(item.trace or "", None)
        size: int | None = None
        with contextlib.suppress(OSError):  # where the file is now: its size, if a file
            st = os.lstat(location or item.path)
            size = st.st_size if stat.S_ISREG(st.st_mode) else None
        arrival = Arrival(
            trace_id=item.trace or new_trace_id(),
            tenant=item.tenant,
            source=item.source,
            name=item.name,
            outcome=outcome,
            subdir=item.subdir,
            size=size,
            arrived_at=item.arrived,
            reason=reason,
            detail=detail,
            location=location,
        )
        if self.events is not None:
            try:
                self.events.emit(
                    arrival.event_type(),
                    "info",
                    item.tenant,
                    arrival.event_detail(),
                    trace_id=arrival.trace_id,
                )
            except ValueError:  # not a tenant name the event log takes: write it here
                pass
            else:
                return
        with contextlib.suppress(DatabaseError), intake.db.transaction() as tx:
            tx.one("arrival_note", arrival.params())

    def _quarantine(
        self, item: IntakeItem, result: IntakeResult, failed_dir: Path, log: Logger
    ) -> str:
        """A permanent refusal: to the failed folder with its note, and tell someone."""
        reason = str(result.reason)
        note = quarantine(
            item.path,
            failed_dir,
            subdir=item.subdir,
            tenant=item.tenant,
            reason=reason,
            detail=result.detail,
            # A file ingestd wrote itself (the spool's) sits under an internal name: the
            # note and the failed folder use the name the client gave it.
            name=item.filename if item.owned else None,
        )
        self.source.quarantined.labels(item.tenant, reason).inc()
        log.warning(f"{self.source}.quarantined", reason=reason, note=str(note))
        if self.events is not None:
            self.events.emit(
                "file.quarantined",
                "warning",
                item.tenant,
                {
                    "filename": item.name,
                    "source": item.source,
                    "reason": reason,
                    "detail": result.detail,
                    "moved_to": str(note).removesuffix(ERROR_SUFFIX),
                },
                trace_id=item.trace,
            )
        return str(note).removesuffix(ERROR_SUFFIX)
