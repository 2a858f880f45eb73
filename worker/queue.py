"""The job queue on PostgreSQL: enqueue, claim, heartbeat, done/fail/release, rescue.

SQL lives in ``ingestd/sql`` (``ingestd_claim`` in migration 0003, the rest as named
queries). Every outcome updates the job and its document's ``processing_status`` in one
statement, and only if this worker still holds the job (``worker_id`` and status match):
a worker whose lease ran out and whose job was rescued cannot overwrite the new attempt.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ingestd.config import WorkerConfig
from ingestd.db import Database, Tx, jsonb
from ingestd.errors import IngestdError

RETIRED_KINDS = frozenset({"generate-thumbnails", "generate-ocr-text"})
NOTIFY_CHANNEL = "ingestd_jobs"


class JobKindRetired(IngestdError):
    """A retired job kind (seed 004) was enqueued; its work runs inside analyze-document."""


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
        )


@dataclass(frozen=True, slots=True)
class FailOutcome:
    status: str  # "queued" (will be retried) or "failed"
    retry_count: int
    next_attempt_at: datetime


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def enqueue(
    tx: Tx,
    *,
    tenant_id: int,
    document_id: int | None,
    kind: str,
    payload: dict[str, Any] | None = None,
    derive_title: bool = False,
) -> int:
    """Insert one job inside the caller's transaction (intake's, or an admin command's)."""
    if kind in RETIRED_KINDS:
        raise JobKindRetired(
            f"job kind {kind!r} is retired; its work runs inside analyze-document"
        )
    row = tx.one(
        "job_enqueue",
        {
            "tenant_id": tenant_id,
            "document_id": document_id,
            "kind": kind,
            "payload": jsonb(payload or {}),
            "derive_title": derive_title,
        },
    )
    assert row is not None
    return int(row["id"])


class Queue:
    """One worker's view of the queue. Thread-safe (the pool hands out connections)."""

    def __init__(self, db: Database, config: WorkerConfig, worker_id: str | None = None) -> None:
        self.db = db
        self.config = config
        self.worker_id = worker_id or default_worker_id()

    def _ids(self, job: Job) -> dict[str, Any]:
        return {"id": job.id, "worker": self.worker_id}

    def _retry(self) -> dict[str, Any]:
        cfg = self.config
        return {"max_retries": cfg.max_retries, "base": cfg.retry_base, "jitter": cfg.retry_jitter}

    def claim(self) -> Job | None:
        """The next job, fairly across tenants; marked processing with a lease."""
        cap = self.config.tenant_cap or None
        # Autocommit: the claim is one statement that commits on the server, so the
        # claim lock it takes (migration 0003) is not held across client round trips
        # (BEGIN, COMMIT): claims take turns faster (bench/queue.py: 881 -> ~1,500/s).
        with self.db.autocommit() as tx:
            row = tx.one(
                "job_claim",
                {"worker": self.worker_id, "lease": self.config.lease_seconds, "tenant_cap": cap},
            )
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
        self, job: Job, apply: Callable[[Tx, Job, dict[str, Any]], None] | None = None,
        data: dict[str, Any] | None = None,
    ) -> bool:  # fmt: skip
        """Mark the job done; with ``apply``, write its derived ``data`` in the same
        transaction, and only if the job is still ours."""
        if apply is None:
            with self.db.autocommit() as tx:
                row = tx.one("job_done", self._ids(job))
            return bool(row and row["n"])
        with self.db.transaction() as tx:
            row = tx.one("job_done", self._ids(job))
            if not (row and row["n"]):
                return False
            apply(tx, job, data or {})
        return True

    def fail(self, job: Job, error: str, *, permanent: bool = False) -> FailOutcome | None:
        """Count a failed attempt: back to queued with backoff, or failed for good."""
        params = {**self._ids(job), **self._retry(), "error": error[:4000],
                  "permanent": permanent}  # fmt: skip
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
            return tx.all("jobs_rescue", self._retry())

    def prune(self) -> int:
        with self.db.transaction() as tx:
            return tx.run("jobs_prune", {"age": self.config.prune_after})
