"""The queue's SQL: fair claim order, outcomes, backoff, leases, retired kinds."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ingestd.config.settings import WorkerConfig
from ingestd.db.database import Database
from ingestd.errors import DatabaseError
from ingestd.queue.claims import Queue, WorkerIdentity, WorkerIdInUse
from ingestd.queue.enqueue import JobKindRetired, enqueue
from tests.fixtures.queue import make_jobs


def tenant_of(db: Database, job_id: int) -> str:
    sql = (
        "SELECT t.name FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id "
        "WHERE j.id = %(id)s"
    )
    with db.transaction() as tx:
        return str(tx.raw(sql, {"id": job_id})[0]["name"])


def status(db: Database, job_id: int) -> dict[str, object]:
    with db.transaction() as tx:
        return tx.raw(
            "SELECT j.*, d.processing_status AS doc_status FROM processing_jobs j "
            "JOIN documents d ON d.id = j.document_id WHERE j.id = %(id)s",
            {"id": job_id},
        )[0]


def test_claim_is_round_robin_across_tenants(db: Database) -> None:
    """A big backlog does not starve small tenants: one job per tenant per round."""
    make_jobs(db, "big", 40)
    for t in ("b", "c", "d"):
        make_jobs(db, t, 3)
    q = Queue(db, WorkerConfig(), "w1")
    order = []
    while (job := q.claim()) is not None:
        order.append(job.tenant)
        q.done(job)
    assert len(order) == 49
    # Three full rounds of all four tenants, then the big tenant alone.
    for r in range(3):
        assert sorted(order[4 * r : 4 * r + 4]) == ["b", "big", "c", "d"]
    assert set(order[12:]) == {"big"}


def test_newcomer_is_served_within_one_round(db: Database) -> None:
    """A tenant whose first job arrives during another's backlog is next but one."""
    make_jobs(db, "big", 30)
    make_jobs(db, "mid", 30)
    q = Queue(db, WorkerConfig(), "w1")
    for _ in range(10):
        job = q.claim()
        assert job is not None
        q.done(job)
    make_jobs(db, "new", 1)
    served = []
    for _ in range(3):
        job = q.claim()
        assert job is not None
        served.append(job.tenant)
        q.done(job)
    assert "new" in served[:2]


def test_oldest_first_within_a_tenant_and_document_status(db: Database) -> None:
    """Jobs of one tenant run oldest first; the document follows its job."""
    ids = make_jobs(db, "acme", 3)
    q = Queue(db, WorkerConfig(), "w1")
    job = q.claim()
    assert job is not None and job.id == ids[0]
    assert status(db, ids[0])["doc_status"] == "processing"
    assert q.done(job)
    row = status(db, ids[0])
    assert (row["status"], row["doc_status"]) == ("done", "done")
    assert row["finished_at"] is not None


def test_backoff_doubles_then_fails_for_good(db: Database) -> None:
    """Six failures: retry_count 0..5 with next_attempt_at deltas 1..32 s, then failed."""
    (job_id,) = make_jobs(db, "acme", 1)
    q = Queue(db, WorkerConfig(max_retries=5), "w1")
    deltas = []
    for attempt in range(6):
        with db.transaction() as tx:
            tx.raw(
                "UPDATE processing_jobs SET next_attempt_at = now() WHERE id = %(id)s",
                {"id": job_id},
            )
        job = q.claim()
        assert job is not None and job.retry_count == attempt
        outcome = q.fail(job, f"boom {attempt}")
        assert outcome is not None
        with db.transaction() as tx:
            row = tx.raw(
                "SELECT next_attempt_at - updated_at AS d FROM processing_jobs WHERE id = %(id)s",
                {"id": job_id},
            )[0]
        deltas.append(row["d"])
    assert deltas == [timedelta(seconds=2**n) for n in range(6)]
    row = status(db, job_id)
    assert (row["status"], row["retry_count"], row["doc_status"]) == ("failed", 6, "failed")
    assert row["error_message"] == "boom 5"
    assert q.claim() is None


def test_jitter_stays_within_its_band(db: Database) -> None:
    """With retry_jitter 0.5 the first retry waits between 0.5 and 1.5 s."""
    (job_id,) = make_jobs(db, "acme", 1)
    q = Queue(db, WorkerConfig(retry_jitter=0.5), "w1")
    job = q.claim()
    assert job is not None
    q.fail(job, "x")
    with db.transaction() as tx:
        d = tx.raw(
            "SELECT extract(epoch FROM next_attempt_at - updated_at) AS d "
            "FROM processing_jobs WHERE id = %(id)s",
            {"id": job_id},
        )[0]["d"]
    assert 0.5 <= float(d) <= 1.5


def test_permanent_failure_is_not_retried(db: Database) -> None:
    """A permanent error fails the job at once, retry_count unchanged."""
    make_jobs(db, "acme", 1)
    q = Queue(db, WorkerConfig(), "w1")
    job = q.claim()
    assert job is not None
    outcome = q.fail(job, "encrypted PDF", permanent=True)
    assert outcome is not None and outcome.status == "failed" and outcome.retry_count == 0


def test_expired_lease_is_rescued_as_an_attempt(db: Database) -> None:
    """A job whose lease ran out goes back to queued, counted; the old worker loses it."""
    (job_id,) = make_jobs(db, "acme", 1)
    dead = Queue(db, WorkerConfig(), "dead")
    job = dead.claim()
    assert job is not None
    with db.transaction() as tx:
        tx.raw(
            "UPDATE processing_jobs SET lease_expires_at = now() - interval '1 s' "
            "WHERE id = %(id)s",
            {"id": job_id},
        )
    rescued = Queue(db, WorkerConfig(), "other").rescue()
    assert [(r["id"], r["status"]) for r in rescued] == [(job_id, "queued")]
    row = status(db, job_id)
    assert row["retry_count"] == 1 and "lease expired: worker dead" in str(row["error_message"])
    assert not dead.done(job)  # too late: it is not its job any more
    assert not dead.heartbeat(job)


def test_outcomes_belong_to_the_attempt_not_the_worker_name(db: Database) -> None:
    """Two claims under the same worker name: the rescued first attempt's done, fail,
    heartbeat and release change nothing; the live attempt keeps its job."""
    (job_id,) = make_jobs(db, "acme", 1)
    first = Queue(db, WorkerConfig(), "same-name")
    stale = first.claim()
    assert stale is not None and stale.attempt
    with db.transaction() as tx:
        tx.raw(
            "UPDATE processing_jobs SET lease_expires_at = now() - interval '1 s' "
            "WHERE id = %(id)s",
            {"id": job_id},
        )
    assert [r["id"] for r in first.rescue()] == [job_id]
    with db.transaction() as tx:
        tx.raw(
            "UPDATE processing_jobs SET next_attempt_at = now() WHERE id = %(id)s", {"id": job_id}
        )
    second = Queue(db, WorkerConfig(), "same-name")
    live = second.claim()
    assert live is not None and live.id == job_id and live.attempt != stale.attempt
    assert not first.heartbeat(stale)
    assert not first.done(stale)
    assert first.fail(stale, "late failure") is None
    assert not first.release(stale)
    row = status(db, job_id)
    assert (row["status"], row["worker_id"], str(row["attempt"])) == (
        "processing",
        "same-name",
        live.attempt,
    )
    assert second.heartbeat(live) and second.done(live)
    assert status(db, job_id)["status"] == "done"


def test_release_hands_back_without_an_attempt(db: Database) -> None:
    """release() puts the job back as it was, ready at once."""
    (job_id,) = make_jobs(db, "acme", 1)
    q = Queue(db, WorkerConfig(), "w1")
    job = q.claim()
    assert job is not None and q.release(job)
    row = status(db, job_id)
    assert (row["status"], row["retry_count"], row["doc_status"]) == ("queued", 0, "queued")
    assert q.claim() is not None


def test_tenant_cap_limits_jobs_in_flight(db: Database) -> None:
    """With tenant_cap 2, a third job of the same tenant waits while two run."""
    make_jobs(db, "acme", 5)
    q = Queue(db, WorkerConfig(tenant_cap=2), "w1")
    a, b = q.claim(), q.claim()
    assert a is not None and b is not None
    assert q.claim() is None
    q.done(a)
    assert q.claim() is not None


def test_retired_kinds_are_refused_at_enqueue(db: Database) -> None:
    """generate-thumbnails / generate-ocr-text cannot be enqueued, by API or by SQL."""
    (job_id,) = make_jobs(db, "acme", 1)
    doc = status(db, job_id)["document_id"]
    with db.transaction() as tx:
        tenant_id = tx.raw("SELECT id FROM tenants WHERE name = 'acme'")[0]["id"]
    with pytest.raises(JobKindRetired), db.transaction() as tx:
        enqueue(tx, tenant_id=tenant_id, document_id=doc, kind="generate-ocr-text")
    with pytest.raises(DatabaseError, match="is retired"), db.transaction() as tx:
        tx.raw(
            "INSERT INTO processing_jobs (tenant_id, document_id, kind) "
            "VALUES (%(t)s, %(d)s, 'generate-thumbnails')",
            {"t": tenant_id, "d": doc},
        )


def test_one_tenant_feeds_several_workers_at_once(db: Database) -> None:
    """Four workers claiming at once from a single tenant's backlog each get a distinct job."""
    import threading

    make_jobs(db, "solo", 8)
    got: list[int | None] = []
    lock = threading.Lock()
    go = threading.Barrier(4)

    def claim(i: int) -> None:
        go.wait(10)
        job = Queue(db, WorkerConfig(), f"w{i}").claim()
        with lock:
            got.append(job.id if job else None)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert None not in got and len(set(got)) == 4


def test_worker_id_is_free_again_the_moment_it_is_released(db: Database) -> None:
    """A worker restarted at once under its id is not refused: release gives the lock back
    before the session closes (a closed backend frees it only when it has exited)."""
    for _ in range(30):
        first = WorkerIdentity(db.conninfo, "w-restart", connect_timeout=10)
        first.acquire()
        with pytest.raises(WorkerIdInUse):
            WorkerIdentity(db.conninfo, "w-restart", connect_timeout=10).acquire()
        first.release()
        again = WorkerIdentity(db.conninfo, "w-restart", connect_timeout=10)
        again.acquire()
        again.release()


def test_an_error_quoting_a_hostile_name_is_recorded_escaped(db: Database) -> None:
    """An attention error that quotes a name with undecodable bytes and NUL is recorded
    (job, document reason and its operator event), the bytes written as escapes."""
    make_jobs(db, "acme", 1)
    q = Queue(db, WorkerConfig(), "w1")
    job = q.claim()
    assert job is not None
    name = b"Scan_\xff\x00.pdf".decode("utf-8", "surrogateescape")
    outcome = q.fail(job, f"cannot read {name}", permanent=True, attention=True)
    assert outcome is not None and outcome.status == "failed"
    row = status(db, job.id)
    assert row["error_message"] == "cannot read Scan_\\xff\\x00.pdf"
    with db.transaction() as tx:
        (event,) = tx.raw(
            "SELECT detail FROM operator_events WHERE type = 'document.needs_attention'"
        )
    assert event["detail"]["error"] == "cannot read Scan_\\xff\\x00.pdf"
