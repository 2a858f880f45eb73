"""The job queue on PostgreSQL: enqueue, claim, heartbeat, done/fail/release, rescue.

SQL lives in ``ingestd/db/sql`` (``ingestd_claim`` in migrations 0003/0008, the rest as
named queries). Every outcome updates the job and its document's ``processing_status`` in
one statement, and only if this attempt still holds the job: each claim makes a new
attempt token, and heartbeat, done, fail and release match on it. A worker whose lease ran
out and whose job was rescued (or a second worker with the same name) changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from ingestd.config.settings import DeliveriesConfig as RetryPolicy
from ingestd.config.settings import WorkerConfig
from ingestd.db import sql
from ingestd.db.database import Database, Tx, connect_once
from ingestd.errors import DatabaseUnavailable, ExitCode, IngestdError
from ingestd.jobkinds import DEFAULT_FAILED_EVENT, JobKind
from ingestd.queue.pools import EVERYTHING, Scope, worker_application_name
from ingestd.textsafe import recordable_text

NOTIFY_CHANNEL = "ingestd_jobs"
# Deliveries retry on their own ladder ([deliveries]): a receiver may be down for hours.
DELIVERY_KINDS = frozenset({JobKind.deliver_webhook, JobKind.notify})


_Data = TypeVar("_Data")  # what a kind's applier writes: that kind's own type


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    tenant_id: int
    tenant: str
    tenant_status: str
    document_id: int | None
    kind: str
    payload: dict[str, Any]
    retry_count: int
    derive_title: bool
    started_at: datetime | None
    created_at: datetime
    attempt: str = ""  # this claim's token (migration 0008)

    @property
    def trace(self) -> str | None:
        """The file's correlation id, carried from its arrival (None for tenant jobs)."""
        value = self.payload.get("trace")
        return str(value) if value else None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        return cls(
            id=int(row["id"]),
            tenant_id=int(row["tenant_id"]),
            tenant=str(row["tenant"]),
            tenant_status=str(row["tenant_status"]),
            document_id=row["document_id"],
            kind=str(row["kind"]),
            payload=dict(row["payload"] or {}),
            retry_count=int(row["retry_count"]),
            derive_title=bool(row["derive_title"]),
            started_at=row["started_at"],
            created_at=row["created_at"],
            attempt=str(row["attempt"]) if row.get("attempt") else "",
        )


@dataclass(frozen=True, slots=True)
class FailOutcome:
    status: str  # "queued" (will be retried) or "failed"
    retry_count: int
    next_attempt_at: datetime


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class WorkerIdInUse(IngestdError):
    """Another live worker runs with this --worker-id."""

    exit_code = ExitCode.usage


class WorkerIdentity:
    """The worker id as a session-level advisory lock on a connection of its own.

    Outcomes are safe without it (attempt tokens), but two workers under one name make
    every log line and ``jobs list`` ambiguous, and the second one was a mistake: it is
    refused at start. Should the session be lost (Postgres restarted), the id is taken
    again before the next claim; if someone else took it meanwhile, this worker stops.
    """

    def __init__(
        self,
        conninfo: str,
        worker_id: str,
        connect_timeout: float,
        application_name: str | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.worker_id = worker_id
        self.connect_timeout = connect_timeout
        # The session is also how `status` and /metrics count a pool's live lanes on every
        # host (pg_stat_activity; ingestd.queue.pools.worker_application_name).
        self.application_name = application_name or worker_application_name(EVERYTHING.pool, 1, 0)
        self._conn: Any = None

    @property
    def held(self) -> bool:
        return self._conn is not None

    def acquire(self) -> None:
        """Take the id; WorkerIdInUse if a live worker has it, DatabaseUnavailable if the
        database cannot be reached (try again later)."""
        self.release()
        conn = connect_once(
            self.conninfo, autocommit=True, timeout=self.connect_timeout, name=self.application_name
        )
        try:
            row = conn.execute(sql.query("worker_id_lock"), {"worker": self.worker_id}).fetchone()
        except Exception as exc:  # the session broke at once: a transient failure
            conn.close()
            raise DatabaseUnavailable(f"database unavailable: {exc}".strip()) from exc
        if not row["locked"]:
            conn.close()
            raise WorkerIdInUse(
                f"worker id {self.worker_id!r} is in use by another live worker; give this one "
                "another --worker-id (or leave it out: the default is HOST:PID)"
            )
        self._conn = conn

    def check(self) -> None:
        """Still held? A lost session is re-acquired (same errors as ``acquire``)."""
        if self._conn is not None:
            try:
                self._conn.execute("SELECT 1")
                return
            except Exception:  # the session is gone, and the lock with it
                self.release()
        self.acquire()

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken session has lost the lock already
                conn.execute(sql.query("worker_id_unlock"), {"worker": self.worker_id})
            with contextlib.suppress(Exception):  # a broken connection: nothing to close
                conn.close()


class Queue:
    """One worker's view of the queue. Thread-safe (the pool hands out connections)."""

    def __init__(
        self,
        db: Database,
        config: WorkerConfig,
        worker_id: str | None = None,
        deliveries: RetryPolicy | None = None,
        scope: Scope = EVERYTHING,
    ) -> None:
        self.db = db
        self.config = config
        self.deliveries = deliveries
        self.worker_id = worker_id or default_worker_id()
        self.scope = scope  # which tenants and kinds this lane claims (ingestd.queue.pools)

    def _ids(self, job: Job) -> dict[str, Any]:
        return {"id": job.id, "attempt": job.attempt}

    def _retry(self, kind: str | None = None) -> dict[str, Any]:
        cfg = self.config
        if kind in DELIVERY_KINDS and self.deliveries is not None:
            d = self.deliveries
            return {"max_retries": d.max_retries, "base": d.retry_base, "jitter": d.retry_jitter}
        return {"max_retries": cfg.max_retries, "base": cfg.retry_base, "jitter": cfg.retry_jitter}

    def claim(self) -> Job | None:
        """The next job of this queue's scope, by the tenants' weighted shares and within
        their caps (migration 0014); marked processing with a lease."""
        cap = self.config.tenant_cap or None
        params = {
            "worker": self.worker_id,
            "lease": self.config.lease_seconds,
            "tenant_cap": cap,
            **self.scope.params(),
        }
        # Autocommit: the claim is one statement that commits on the server, so the
        # claim lock it takes (migration 0003) is not held across client round trips
        # (BEGIN, COMMIT): claims take turns faster (bench/queue.py: 881 -> ~1,500/s).
        with self.db.autocommit() as tx:
            row = tx.one("job_claim", params)
            if row is None:
                return None
            if row["tenant"] is None:  # created after the claim statement began
                tenant = tx.one("job_tenant", {"tenant_id": row["tenant_id"]})
                assert tenant is not None  # tenants are never deleted while they have jobs
                row = {**row, **tenant}
        return Job.from_row(row)

    def heartbeat(self, job: Job) -> bool:
        """Extend the lease; False if the job is no longer ours (rescued meanwhile)."""
        # Each outcome is one statement (job and document together): autocommit saves
        # the BEGIN and COMMIT round trips of an explicit transaction.
        with self.db.autocommit() as tx:
            n = tx.run("job_heartbeat", {**self._ids(job), "lease": self.config.lease_seconds})
        return n == 1

    def done(
        self,
        job: Job,
        apply: Callable[[Tx, Job, _Data], None] | None = None,
        data: _Data | None = None,
    ) -> bool:
        """Mark the job done; with ``apply``, write its derived ``data`` (of the type the
        applier takes) in the same transaction, and only if the job is still ours."""
        if apply is None:
            with self.db.autocommit() as tx:
                row = tx.one("job_done", self._ids(job))
            return bool(row and row["n"])
        with self.db.transaction() as tx:
            row = tx.one("job_done", self._ids(job))
            if not (row and row["n"]):
                return False
            if data is None:
                raise TypeError("an applier needs the data it writes")
            apply(tx, job, data)
        return True

    def fail(
        self,
        job: Job,
        error: str,
        *,
        permanent: bool = False,
        attention: bool = False,
        failed_event: str | None = "job.failed",
    ) -> FailOutcome | None:
        """Count a failed attempt: back to queued with backoff, or failed for good.

        ``attention``: failed for a reason of the document itself (with ``permanent``);
        its document ends in ``attention`` with ``error`` as the reason. Failed for good,
        ``failed_event`` (or ``document.needs_attention``) is written as an operator
        event in the same statement; None writes none.
        """
        params = {
            **self._ids(job),
            **self._retry(job.kind),
            # An error may quote a file name or document text: its undecodable bytes and
            # NUL escaped (ingestd/textsafe.py), or the failure itself could not be recorded.
            "error": recordable_text(error)[:4000],
            "permanent": permanent or attention,
            "attention": attention,
            "failed_event": failed_event,
        }
        with self.db.autocommit() as tx:
            row = tx.one("job_fail", params)
        if row is None:
            return None
        return FailOutcome(str(row["status"]), int(row["retry_count"]), row["next_attempt_at"])

    def release(self, job: Job) -> bool:
        """Hand the job back without counting an attempt (shutdown past the grace period)."""
        with self.db.autocommit() as tx:
            row = tx.one("job_release", self._ids(job))
        return bool(row and row["n"])

    def rescue(self) -> list[dict[str, Any]]:
        """Jobs whose lease ran out go back to queued (or failed), counted as an attempt."""
        with self.db.transaction() as tx:
            # A kind without a job_kinds row (a plugin's) fails with the default event.
            return tx.all("jobs_rescue", {**self._retry(), "failed_event": DEFAULT_FAILED_EVENT})

    def prune(self) -> int:
        with self.db.transaction() as tx:
            return tx.run("jobs_prune", {"age": self.config.prune_after})
