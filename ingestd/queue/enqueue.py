"""Job kinds and the one producer of jobs: ``enqueue``, inside the caller's transaction.

Intake, the CLI, tenant commands and job appliers (deliveries) all insert jobs here (one
at a time with ``enqueue``, in bulk with ``enqueue_each``), so the retired-kind check and
the payload's correlation id are applied the same way for every producer. The one
exception to where the row is written is intake's committing statement (``intake_record``,
migration 0012), which inserts the document's job in SQL to save its round trips; its
body comes from ``job_body`` here all the same. The worker side (claim, outcomes) is
``ingestd/queue/claims.py``.
"""

from __future__ import annotations

from typing import Any

from ingestd.db.database import Tx, jsonb
from ingestd.errors import IngestdError
from ingestd.jobkinds import RETIRED_KINDS, JobKind


class JobKindRetired(IngestdError):
    """A retired job kind (seed 004) was enqueued; its work runs inside analyze-document."""


def enqueue(
    tx: Tx,
    *,
    tenant_id: int,
    kind: JobKind | str,
    payload: dict[str, Any] | None = None,
    document_id: int | None = None,
    derive_title: bool = False,
    trace: str | None = None,
) -> int:
    """Insert one job inside the caller's transaction; returns its id.

    ``trace`` (the file's correlation id) goes into the payload, so every log line of
    the job can carry it.
    """
    row = tx.one(
        "job_insert",
        {
            "tenant_id": tenant_id,
            "document_id": document_id,
            "kind": str(kind),
            "payload": jsonb(job_body(kind, payload, trace)),
            "derive_title": derive_title,
        },
    )
    assert row is not None
    return int(row["id"])


def enqueue_each(
    tx: Tx,
    query: str,
    params: dict[str, Any],
    *,
    kind: JobKind | str,
    payload: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Insert one job of ``kind`` for each document a bulk named ``query`` selects, in one
    statement (``documents analyze --all``); returns the query's one row (its counts).

    The query gets ``params`` and %(kind)s and %(payload)s, the body ``job_body`` makes
    (the retired-kind check included); it adds each document's id and trace itself.
    """
    body = job_body(kind, payload, None)
    row = tx.one(query, {**params, "kind": str(kind), "payload": jsonb(body)})
    assert row is not None
    return dict(row)


def job_body(
    kind: JobKind | str, payload: dict[str, Any] | None, trace: str | None
) -> dict[str, Any]:
    """The payload a job of ``kind`` is inserted with: ``payload`` and the correlation id;
    ``JobKindRetired`` for a retired kind."""
    if kind in RETIRED_KINDS:
        raise JobKindRetired(f"job kind {kind!r} is retired; its work runs inside analyze-document")
    body = dict(payload or {})
    if trace is not None:
        body.setdefault("trace", trace)
    return body
