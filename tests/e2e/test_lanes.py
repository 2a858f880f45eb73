"""`ingestd worker` with worker.concurrency lanes: several jobs at once in one process,
each in a job child of its own; signals, reloads, READY and --drain for all of them."""

from __future__ import annotations

import signal
from typing import Any

from ingestd.db.database import Database
from tests.conftest import wait_until
from tests.e2e.test_worker import notify_socket, qdb, received, start, workers  # noqa: F401
from tests.fixtures.queue import REPO, WorkerProc, job_row, make_jobs, runs

# Two job lanes, and the short lane every worker has by default (lane 3).
LANES = {"poll_interval": 0.2, "lease_seconds": 5, "retry_base": 0.1, "concurrency": 2}


def test_two_jobs_queued_together_run_at_once_in_two_children(
    make_env: Any,
    qdb: Database,  # noqa: F811
    workers: list[WorkerProc],  # noqa: F811
) -> None:
    """Two jobs queued together: both start before either ends, in two different job
    children of the one worker, and both end done under the worker's one id."""
    env = make_env(worker=LANES)
    ids = make_jobs(qdb, "acme", 2, kind="test-record", payload={"seconds": 4})
    w = start(workers, env, "w1")
    wait_until(lambda: all(job_row(qdb, i)["status"] == "done" for i in ids), timeout=120)
    starts, ends = runs(qdb, "start"), runs(qdb, "end")
    assert len(starts) == 2 and len(ends) == 2
    assert max(r["at"] for r in starts) < min(r["at"] for r in ends)  # they overlapped
    assert len({r["pid"] for r in starts}) == 2
    assert {job_row(qdb, i)["worker_id"] for i in ids} <= {"w1", None}
    ready = w.events("worker.ready")
    assert sorted(e["lane"] for e in ready) == [1, 2, 3]
    assert [e["serves"]["short"] for e in sorted(ready, key=lambda e: e["lane"])] == [
        False,
        False,
        True,
    ]
    assert len({e["child_pid"] for e in ready}) == 3
    assert w.stop() == 0


def test_sigterm_lets_every_lane_finish_its_job(
    make_env: Any,
    qdb: Database,  # noqa: F811
    workers: list[WorkerProc],  # noqa: F811
) -> None:
    """SIGTERM while two lanes run a job each: both finish done, a third job stays
    queued, exit 0."""
    env = make_env(worker={**LANES, "shutdown_grace": 60})
    running = make_jobs(qdb, "acme", 2, kind="test-record", payload={"seconds": 2})
    w = start(workers, env, "w1")
    wait_until(lambda: len(runs(qdb)) == 2)
    (waiting,) = make_jobs(qdb, "acme", 1, kind="test-record")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert [job_row(qdb, i)["status"] for i in running] == ["done", "done"]
    assert job_row(qdb, waiting)["status"] == "queued"
    assert sorted(e["lane"] for e in w.events("worker.stopped")) == [1, 2, 3]


def test_sighup_reaches_every_lane(
    make_env: Any,
    qdb: Database,  # noqa: F811
    workers: list[WorkerProc],  # noqa: F811
) -> None:
    """SIGHUP: each lane reloads the config (one worker.reloaded per lane, new values)."""
    env = make_env(worker=LANES, log={"level": "info"})
    w = start(workers, env, "w1")
    make_env(worker={**LANES, "poll_interval": 0.3}, log={"level": "info"})
    w.signal(signal.SIGHUP)
    wait_until(lambda: len(w.events("worker.reloaded")) == 3)
    assert {(e["lane"], e["poll_interval"]) for e in w.events("worker.reloaded")} == {
        (1, 0.3),
        (2, 0.3),
        (3, 0.3),
    }
    (job_id,) = make_jobs(qdb, "acme", 1, kind="test-record")
    wait_until(lambda: job_row(qdb, job_id)["status"] == "done")
    assert w.stop() == 0


def test_drain_with_lanes_sends_ready_first_and_exits_0(
    make_env: Any,
    qdb: Database,  # noqa: F811
    workers: list[WorkerProc],  # noqa: F811
) -> None:
    """--drain with two lanes: every job done, READY first and STOPPING last, exit 0."""
    env = make_env(worker=LANES)
    ids = make_jobs(qdb, "acme", 6, kind="test-record")
    with notify_socket() as (sock, address):
        w = start(
            workers,
            env,
            "w1",
            "--drain",
            ready=False,
            extra_env={"NOTIFY_SOCKET": address, "PYTHONPATH": str(REPO)},
            script=True,
        )
        assert w.wait(timeout=120) == 0
        got = received(sock)
    assert all(job_row(qdb, i)["status"] == "done" for i in ids)
    assert got[0].startswith("READY=1") and got[-1].startswith("STOPPING=1"), got
    assert sum(m.startswith("READY=1") for m in got) == 1
