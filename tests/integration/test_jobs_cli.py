"""`ingestd jobs ...` and the queue part of `ingestd status`, as real processes."""

from __future__ import annotations

import json

from ingestd.config.settings import WorkerConfig
from ingestd.db.database import Database
from ingestd.queue.claims import Queue
from tests.conftest import Env, run_cli
from tests.fixtures.queue import make_jobs


def test_list_show_retry_cancel(env: Env, db: Database) -> None:
    """Failed jobs can be retried, queued ones cancelled; others are refused with exit 1."""
    ids = make_jobs(db, "acme", 3)
    q = Queue(db, WorkerConfig(max_retries=0), "w1")
    job = q.claim()
    assert job is not None and job.id == ids[0]
    q.fail(job, "tesseract exploded")

    listed = json.loads(run_cli(env, "jobs", "list", "--status", "failed", "--json").stdout)
    assert [j["id"] for j in listed] == [ids[0]]
    assert "tesseract exploded" in listed[0]["error"]
    shown = run_cli(env, "jobs", "show", str(ids[0]))
    assert "tesseract exploded" in shown.stdout

    assert run_cli(env, "jobs", "retry", str(ids[0])).returncode == 0
    assert run_cli(env, "jobs", "cancel", str(ids[1])).returncode == 0
    refused = run_cli(env, "jobs", "retry", str(ids[2]))  # queued and ready: nothing to do
    assert refused.returncode == 1 and "can be retried" in refused.stderr
    assert run_cli(env, "jobs", "show", "999999").returncode == 7

    with db.transaction() as tx:
        rows = {
            r["id"]: r
            for r in tx.raw(
                "SELECT j.id, j.status, j.retry_count, j.error_message, d.processing_status "
                "FROM processing_jobs j JOIN documents d ON d.id = j.document_id"
            )
        }
    assert (rows[ids[0]]["status"], rows[ids[0]]["retry_count"]) == ("queued", 0)
    assert rows[ids[0]]["processing_status"] == "queued"
    assert rows[ids[1]]["status"] == "failed"
    assert rows[ids[1]]["error_message"] == "cancelled by an administrator"


def test_status_shows_queue_depth_oldest_and_failures(env: Env, db: Database) -> None:
    """status lists ready/retrying/running jobs per tenant, the oldest wait, recent failures."""
    make_jobs(db, "acme", 4)
    make_jobs(db, "beta", 1)
    q = Queue(db, WorkerConfig(max_retries=0), "w1")
    running = q.claim()
    failing = q.claim()
    assert running is not None and failing is not None
    q.fail(failing, "boom")
    data = json.loads(run_cli(env, "status", "--json").stdout)
    queue = {r["tenant"]: r for r in data["queue"]}
    total_ready = sum(r["ready"] for r in queue.values())
    assert total_ready == 3 and sum(r["running"] for r in queue.values()) == 1
    assert sum(r["failed_last_hour"] for r in queue.values()) == 1
    assert all(r["oldest_ready_seconds"] is not None for r in queue.values() if r["ready"])
    text = run_cli(env, "status").stdout
    assert "QUEUE" in text and "acme" in text
