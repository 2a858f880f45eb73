"""`ingestd worker` with worker.concurrency lanes: several jobs at once in one process,
each in a job child of its own; signals, reloads, READY and --drain for all of them; the
short lane kept for short kinds while batches are being split."""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Any

import pikepdf

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.queue.claims import NOTIFY_CHANNEL
from tests.conftest import Env, run_cli, wait_until
from tests.e2e.test_worker import notify_socket, qdb, received, start, workers  # noqa: F401
from tests.fixtures.queue import REPO, WorkerProc, count, job_row, make_jobs, runs
from tests.integration.test_notify import Receiver, hook_secret, receiver  # noqa: F401

# Two job lanes, and the short lane every worker has by default (lane 3).
LANES = {"poll_interval": 0.2, "lease_seconds": 5, "retry_base": 0.1, "concurrency": 2}


def test_two_jobs_queued_together_run_at_once_in_two_children(
    make_env: Any,
    qdb: Database,  # noqa: F811
    workers: list[WorkerProc],  # noqa: F811
) -> None:
    """Two jobs queued together: both start before either ends, in two different job
    children of the one worker, and both end done under the worker's one id. The process
    holds one identity session and one LISTEN connection for its three slots."""
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
    # One process, three slots: one id session (named with its slots), one LISTEN.
    with qdb.transaction() as tx:
        sessions = tx.raw(
            "SELECT application_name, query FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    named = [s["application_name"] for s in sessions]
    assert [n for n in named if n.startswith("ingestd-worker:")] == ["ingestd-worker:default:2:1"]
    assert sum(1 for s in sessions if s["query"] == f"LISTEN {NOTIFY_CHANNEL}") == 1
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


def drawing_batch(path: Path, pages: int, seed: int) -> Path:
    """A batch of vector drawings (a plan set): every page is 200,000 strokes that pdfium
    renders for a second or more, so splitting it takes minutes' worth of a lane in
    seconds' worth of file (the pages share one content stream: 3 MB)."""
    rnd = random.Random(seed)
    strokes = []
    for _ in range(200_000):
        x, y = rnd.uniform(0, 590), rnd.uniform(0, 840)
        strokes.append(f"{x:.1f} {y:.1f} m {x + 3:.1f} {y + 1:.1f} l {x + 1:.1f} {y + 3:.1f} l h f")
    pdf = pikepdf.new()
    content = pdf.make_stream(("0.9 g\n" + "\n".join(strokes)).encode())
    for _ in range(pages):
        pdf.add_blank_page(page_size=(595, 842))
        pdf.pages[-1].obj.Contents = content
    pdf.save(path, compress_streams=True)
    return path


def test_provisioning_and_a_notification_stay_fast_behind_slow_batches(
    make_env: Any,
    db: Database,
    workers: list[WorkerProc],  # noqa: F811
    receiver: Receiver,  # noqa: F811
    hook_secret: Path,  # noqa: F811
) -> None:
    """Three batches that take half a minute each to split, one job lane and the short
    lane: a `tenant create` and its notification start within 15 s, before any batch is
    done, and no split-batch ever runs on the short lane (issue 29)."""
    env: Env = make_env(
        worker={**LANES, "concurrency": 1, "lease_seconds": 60, "shutdown_grace": 5},
        notify=[
            {
                "name": "ops-hook",
                "webhook": {"url": receiver.url, "secret_file": str(hook_secret)},
                "events": ["tenant.*"],
                "min_severity": "info",
            }
        ],
    )
    env.config_path.write_text(env.config_path.read_text() + "\n[split.acme]\nmax_pages = 100\n")
    env.reload()
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": "acme", "status": "active"})
    intake = make_intake(env.config, db)
    for i in range(3):
        batch = drawing_batch(env.root / f"plans{i}.pdf", pages=20, seed=i)
        item = IntakeItem(path=batch, tenant="acme", split=env.config.split_policy("acme", None))
        assert intake.ingest(item).outcome is Outcome.ingested
    splitting = (
        "SELECT count(*) AS n FROM processing_jobs WHERE kind = 'split-batch' "
        "AND status = 'processing'"
    )
    w = start(workers, env, "w1")
    wait_until(lambda: count(db, splitting) >= 1, timeout=120)
    out = run_cli(env, "tenant", "create", "newco", "--wait", "60")
    assert out.returncode == 0, out.stdout + out.stderr
    started = (
        "SELECT count(*) AS n FROM processing_jobs "
        "WHERE kind IN ('provision-tenant', 'notify') AND started_at IS NOT NULL"
    )
    wait_until(lambda: count(db, started) == 2, timeout=300)
    with db.transaction() as tx:
        short = tx.raw(
            "SELECT kind, started_at, extract(epoch FROM started_at - created_at) AS waited "
            "FROM processing_jobs WHERE kind IN ('provision-tenant', 'notify')"
        )
        (first_split_done,) = tx.raw(
            "SELECT min(finished_at) AS at FROM processing_jobs WHERE kind = 'split-batch'"
        )
    assert sorted(j["kind"] for j in short) == ["notify", "provision-tenant"]
    for job in short:
        assert job["waited"] < 15, short
        # It did not wait for a batch to end: none had when it started.
        assert first_split_done["at"] is None or first_split_done["at"] > job["started_at"]
    notified = "SELECT count(*) AS n FROM processing_jobs WHERE kind = 'notify' AND status = 'done'"
    wait_until(lambda: count(db, notified) == 1, timeout=120)
    assert len(receiver.requests) == 1
    lanes = {e["lane"]: e["serves"]["short"] for e in w.events("worker.ready")}
    assert lanes == {1: False, 2: True}
    split_lanes = {e["lane"] for e in w.events("job.started") if e["kind"] == "split-batch"}
    assert split_lanes == {1}
    assert w.stop(timeout=120) == 0
