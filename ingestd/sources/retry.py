"""The one retry ladder of the hot folders and the spool: what is worth retrying, and when.

Both loops hand a file to intake and get back an outcome or an exception. A refusal
(the file itself is wrong) is final and the file is quarantined; everything that is
about the environment (database down, archive disk full, descriptors exhausted, the
tenant suspended, a writer still at work) leaves the file where it is, to be tried again
after 1, 2, 4 ... seconds up to the configured maximum.
"""

from __future__ import annotations

import enum

from ingestd.errors import (
    ArchiveError,
    DatabaseError,
    IngestdError,
    SourceUnavailable,
    StateUnusable,
    TenantError,
)

# A file waiting for its tenant is looked at again at least this often, so it goes as soon
# as the tenant is active again.
TENANT_RECHECK = 30.0


class Cause(enum.StrEnum):
    """Why a file is retried (the ``cause`` label of the retried metrics)."""

    tenant_inactive = "tenant_inactive"
    database = "database"
    archive = "archive"
    source = "source"  # the source file could not be read now (EMFILE, EIO, EACCES ...)
    changed = "changed"  # a writer is still at work
    internal = "internal"  # a bug: logged with its traceback, retried all the same


def cause_of(exc: BaseException) -> Cause | None:
    """The retry cause of ``exc``, or None for an error that retrying cannot fix. Decided
    by ``transient`` alone (an exception that is not ours, a bug or an OSError, is
    retried); the class only names the cause for the logs and metrics."""
    if isinstance(exc, IngestdError) and not exc.transient:
        return None
    if isinstance(exc, TenantError):
        return Cause.tenant_inactive
    if isinstance(exc, DatabaseError):
        # Also a refused login or a missing schema: the daemon keeps the file and keeps
        # trying (the schema thread creates a missing schema; an operator fixes a role).
        return Cause.database
    if isinstance(exc, ArchiveError):
        return Cause.archive
    if isinstance(exc, SourceUnavailable | OSError | StateUnusable):
        return Cause.source
    if isinstance(exc, IngestdError):
        return Cause.changed
    return Cause.internal


def delay(attempts: int, max_delay: float, cause: Cause) -> float:
    """Seconds before attempt ``attempts + 1``: 2^attempts, at most ``max_delay``."""
    limit = min(max_delay, TENANT_RECHECK) if cause is Cause.tenant_inactive else max_delay
    return float(min(2.0 ** min(attempts, 20), limit))
