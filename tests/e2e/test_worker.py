"""`ingestd worker` as real processes on a real Postgres: exactly-once under concurrency,
fairness, a SIGKILLed worker, SIGTERM with and without grace, SIGHUP, --drain."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestd.db.database import Database
from tests.conftest import Env, run_cli, wait_until
from tests.fixtures.queue import (
    REPO,
    WorkerProc,
    count,
    create_runs_table,
    file_runs,
    job_row,
    make_jobs,
    pid_gone,
    runs,
)

# One lane (no short lane either): these tests pin what one runner does with its job and
# its child (which job runs, what is logged once); tests/e2e/test_lanes.py runs several
# lanes in one worker, tests/e2e/test_pools.py pools and their short lanes.
FAST = {
    "poll_interval": 0.2,
    "lease_seconds": 2,
    "retry_base": 0.1,
    "max_retries": 2,
    "concurrency": 1,
    "short_lanes": 0,
}


@pytest.fixture
def qdb(db: Database) -> Database:
    create_runs_table(db)
    return db


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProc]]:
    """Started workers; any still running at the end are killed (a failed test)."""
    started: list[WorkerProc] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            w.kill()


def start(
    workers: list[WorkerProc], env: Env, name: str, *args: str, ready: bool = True, **kw: Any
) -> WorkerProc:
    w = WorkerProc(env.config_path, env.root / f"{name}.log", "--worker-id", name, *args, **kw)
    workers.append(w)
    if ready:
        w.wait_ready()
    return w


def not_done(db: Database) -> int:
    return count(db, "SELECT count(*) AS n FROM processing_jobs WHERE status <> 'done'")


def test_ten_thousand_jobs_four_workers_exactly_once(
    make_env: Any, qdb: Database, workers: list[WorkerProc]
) -> None:
    """10,000 jobs, 4 draining workers: every job starts exactly once, all end done."""
    env = make_env(worker=FAST)
    record = {"file": str(env.root / "runs.txt")}
    ids = make_jobs(qdb, "acme", 7000, kind="test-record", payload=record)
    ids += make_jobs(qdb, "globex", 2000, kind="test-record", payload=record)
    ids += make_jobs(qdb, "initech", 1000, kind="test-record", payload=record)
    procs = [start(workers, env, f"w{i}", "--drain", ready=False) for i in range(4)]
    codes = [w.wait(timeout=240) for w in procs]
    assert codes == [0, 0, 0, 0]
    assert not_done(qdb) == 0
    started = [r["job_id"] for r in file_runs(env.root / "runs.txt")]
    assert len(started) == 10_000 and sorted(started) == sorted(ids)  # each exactly once
    assert len(file_runs(env.root / "runs.txt", "end")) == 10_000
    assert count(qdb, "SELECT count(*) AS n FROM documents WHERE processing_status <> 'done'") == 0
    per_worker = [len(w.events("job.done")) for w in procs]
    assert sum(per_worker) == 10_000 and all(n > 0 for n in per_worker), per_worker


SMALL = set("bcdefghij")
ALL_TEN = {"a", *SMALL}


def fair_scenario(
    env: Env, qdb: Database, workers: list[WorkerProc], big: int, *, newcomer: bool
) -> tuple[list[dict[str, Any]], int, int | None]:
    """4 workers on tenant a's backlog of ``big`` jobs and b..j's 50 each; optionally
    tenant k enqueues one job after 150 starts. Returns the claim order (until b..j are
    done), the number of claims before k's job was enqueued, and k's job id.

    Claim order, from ``started_at`` (stamped by the claim on the server's clock), not the
    order the job children got going: on a busy machine that also depends on which worker
    process the OS ran first, which is not what fairness is about."""
    runs_file = env.root / "runs.txt"
    record = {"file": str(runs_file)}
    make_jobs(qdb, "a", big, kind="test-record", payload=record)
    for t in sorted(SMALL):
        make_jobs(qdb, t, 50, kind="test-record", payload=record)
    procs = [start(workers, env, f"w{i}", ready=False) for i in range(4)]
    before, k_job, k_visible = 0, None, None
    if newcomer:
        wait_until(lambda: len(file_runs(runs_file)) >= 150, timeout=60)
        before = len(file_runs(runs_file))
        (k_job,) = make_jobs(qdb, "k", 1, kind="test-record", payload=record)
        with qdb.transaction() as tx:  # committed by now: the claims could see it from here
            k_visible = tx.raw("SELECT clock_timestamp() AS t")[0]["t"]
    small_done = (
        "SELECT count(*) AS n FROM processing_jobs j JOIN tenants t "
        "ON t.id = j.tenant_id WHERE t.name <> 'a' AND j.status = 'done'"
    )
    wait_until(lambda: count(qdb, small_done) == 450 + newcomer, timeout=240)
    assert [w.stop() for w in procs] == [0, 0, 0, 0]
    assert count(qdb, "SELECT count(*) AS n FROM processing_jobs WHERE status = 'processing'") == 0
    with qdb.transaction() as tx:
        claims = tx.raw(
            "SELECT j.id AS job_id, t.name AS tenant, j.created_at, j.started_at "
            "FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id "
            "WHERE j.started_at IS NOT NULL ORDER BY j.started_at, j.id"
        )
    if k_job is not None:
        # Claims before k's job could be claimed: its COMMIT (seen right after, on the
        # server's clock), not its created_at, which is its transaction's start: on a busy
        # machine dozens of claims ran between the two while k was not yet visible.
        before = sum(1 for c in claims if c["started_at"] < k_visible)
    return claims, before, k_job


def test_fair_start_order_with_real_workers(
    make_env: Any, qdb: Database, workers: list[WorkerProc]
) -> None:
    """Backlog a + b..j, 4 workers: each tenant served in every 4 rounds; newcomer k within 14."""
    env = make_env(worker=FAST)
    started, before, k_job = fair_scenario(env, qdb, workers, 5000, newcomer=True)
    slack = 4  # workers
    order = [r["tenant"] for r in started]
    assert set(order[:40]) == ALL_TEN
    # Until b..j run out (~500 starts) all ten wait. Strict rounds (every 10 starts) are
    # test_no_tenant_runs_twice_per_round's; with the claim race it documents, a tenant can
    # lose a turn or two, so this pins what holds today: nobody waits 4 rounds, the shares
    # stay even, and a newcomer is served at once.
    window = order[:400]
    for i in range(len(window) - 40 + 1):
        assert set(window[i : i + 40]) - {"k"} == ALL_TEN, (i, window[i : i + 40])
    shares = {t: window.count(t) for t in ALL_TEN}
    assert all(40 - 6 <= n <= 40 + 6 for n in shares.values()), shares
    k_pos = next(i for i, r in enumerate(started) if r["job_id"] == k_job)
    assert before < 400  # k came while all ten tenants were waiting
    assert k_pos - before < 10 + slack, (before, k_pos)


def test_no_tenant_runs_twice_per_round(
    make_env: Any, qdb: Database, workers: list[WorkerProc]
) -> None:
    """Strict round-robin: each tenant's n-th claim lies in round n, slack 4 workers."""
    env = make_env(worker=FAST)
    fair_scenario(env, qdb, workers, 1000, newcomer=False)
    # The claim order (started_at is set by the claim), not the order the children got
    # going: that also depends on which worker process the OS ran first.
    with qdb.transaction() as tx:
        rows = tx.raw(
            "SELECT t.name FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id "
            "ORDER BY j.started_at, j.id LIMIT 400"
        )
    order = [r["name"] for r in rows]
    slack = 4
    nth: dict[str, int] = dict.fromkeys(ALL_TEN, 0)
    off_round = []
    for pos, tenant in enumerate(order):
        n = nth[tenant]
        nth[tenant] += 1
        if not 10 * n - slack <= pos < 10 * n + 10 + slack:
            off_round.append((tenant, n, pos))
    assert not off_round, off_round[:10]


def test_killed_worker_job_is_rescued_and_completes_once(
    make_env: Any, qdb: Database, workers: list[WorkerProc]
) -> None:
    """SIGKILLed worker: its job is rescued by another after the lease, finishes once."""
    env = make_env(worker=FAST)
    w1, w2 = start(workers, env, "w1"), start(workers, env, "w2")
    (job_id,) = make_jobs(
        qdb, "acme", 1, kind="test-record", payload={"first_attempt_seconds": 300}
    )
    wait_until(lambda: len(runs(qdb)) == 1)
    holder = job_row(qdb, job_id)["worker_id"]
    victim, survivor = (w1, w2) if holder == "w1" else (w2, w1)
    child_pid = runs(qdb)[0]["pid"]
    victim.proc.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    wait_until(lambda: pid_gone(child_pid))  # no orphan finishing the first attempt
    wait_until(lambda: job_row(qdb, job_id)["status"] == "done", timeout=60)
    assert survivor.stop() == 0
    row = job_row(qdb, job_id)
    assert (row["retry_count"], row["doc_status"]) == (1, "done")
    assert [r["attempt"] for r in runs(qdb, "start")] == [0, 1]
    assert [r["attempt"] for r in runs(qdb, "end")] == [1]
    rescued = survivor.events("worker.rescued")
    assert rescued and rescued[0]["jobs"][0]["id"] == job_id
    assert rescued[0]["jobs"][0]["worker"] == victim_id(victim)


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_first_child_is_forked_a_replacement_is_spawned(
    make_env: Any, qdb: Database, workers: list[WorkerProc]
) -> None:
    """`ingestd worker` forks its first job child before it has threads (no second round of
    imports); the child that replaces a crashed one is spawned; jobs run in both."""
    env = make_env(worker={**FAST, "max_retries": 0})
    w = start(workers, env, "w1")
    first = w.events("worker.ready")[0]["child_pid"]
    # A fork runs the worker's own command line; a spawned child runs spawn_main.
    assert "spawn_main" not in _cmdline(first) and " worker " in _cmdline(first)
    (crash,) = make_jobs(qdb, "acme", 1, kind="test-crash")
    (after,) = make_jobs(qdb, "acme", 1, kind="test-record")
    wait_until(lambda: job_row(qdb, after)["status"] == "done", timeout=60)
    assert job_row(qdb, crash)["error_message"] == "worker child died (signal 9)"
    (restarted,) = w.events("worker.child_started")
    assert restarted["child_pid"] != first and "spawn_main" in _cmdline(restarted["child_pid"])
    assert runs(qdb)[0]["pid"] == restarted["child_pid"]
    assert w.stop() == 0


def victim_id(w: WorkerProc) -> str:
    return str(w.proc.args[w.proc.args.index("--worker-id") + 1])  # type: ignore[union-attr]


def test_job_that_kills_its_worker_ends_failed(
    make_env: Any, qdb: Database, workers: list[WorkerProc]
) -> None:
    """A job that SIGKILLs every worker running it ends failed with a lease-expired error."""
    env = make_env(worker=FAST)
    (job_id,) = make_jobs(qdb, "acme", 1, kind="test-kill-worker")
    codes = []
    for i in range(6):  # max_retries 2: three attempts, each kills one worker
        if job_row(qdb, job_id)["status"] == "failed":
            break
        w = start(workers, env, f"w{i}", ready=False)  # it may die before we see it ready
        wait_until(
            lambda w=w: w.proc.poll() is not None or job_row(qdb, job_id)["status"] == "failed",
            timeout=60,
        )
        if w.proc.poll() is None:
            w.wait_ready()  # a SIGTERM before its handlers are in place is not the point here
        codes.append(w.stop())
    row = job_row(qdb, job_id)
    assert (row["status"], row["retry_count"], row["doc_status"]) == ("failed", 3, "failed")
    assert str(row["error_message"]).startswith("lease expired: worker w2 stopped heartbeating")
    assert codes == [-signal.SIGKILL] * 3 + [0], w.log_path.read_text()[-3000:]
    assert len(runs(qdb)) == 3


def test_sigterm_lets_the_running_job_finish(
    make_env: Any, qdb: Database, workers: list[WorkerProc]
) -> None:
    """SIGTERM with a long shutdown_grace: the running job finishes done, exit 0."""
    env = make_env(worker={**FAST, "shutdown_grace": 60})
    (job_id,) = make_jobs(qdb, "acme", 1, kind="test-record", payload={"seconds": 1.5})
    (waiting,) = make_jobs(qdb, "acme", 1, kind="test-record")
    w = start(workers, env, "w1")
    wait_until(lambda: len(runs(qdb)) == 1)
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert job_row(qdb, job_id)["status"] == "done"
    assert [r["job_id"] for r in runs(qdb, "end")] == [job_id]
    assert job_row(qdb, waiting)["status"] == "queued"
    names = [e["event"] for e in w.events() if e["event"].startswith(("job.", "worker.stop"))]
    assert names == ["job.started", "worker.stopping", "job.done", "worker.stopped"]


def test_sigterm_past_the_grace_hands_the_job_back(
    make_env: Any, qdb: Database, workers: list[WorkerProc]
) -> None:
    """SIGTERM past shutdown_grace: child killed, job queued again uncounted, exit 0."""
    env = make_env(worker={**FAST, "shutdown_grace": 0.5})
    (job_id,) = make_jobs(qdb, "acme", 1, kind="test-record", payload={"seconds": 300})
    w = start(workers, env, "w1")
    wait_until(lambda: len(runs(qdb)) == 1)
    child_pid = runs(qdb)[0]["pid"]
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    row = job_row(qdb, job_id)
    assert (row["status"], row["retry_count"], row["doc_status"]) == ("queued", 0, "queued")
    assert row["worker_id"] is None and row["lease_expires_at"] is None
    assert pid_gone(child_pid)
    (released,) = w.events("job.released")
    assert released["job_id"] == job_id and "grace" in released["reason"]


def test_sighup_reloads_the_config(make_env: Any, qdb: Database, workers: list[WorkerProc]) -> None:
    """SIGHUP logs worker.reloaded with new values; a broken file keeps the old config."""
    env = make_env(worker=FAST, log={"level": "info"})
    w = start(workers, env, "w1")
    make_env(worker={**FAST, "poll_interval": 0.3}, log={"level": "debug"})
    w.signal(signal.SIGHUP)
    wait_until(lambda: w.events("worker.reloaded"))
    (reloaded,) = w.events("worker.reloaded")
    assert (reloaded["poll_interval"], reloaded["log_level"]) == (0.3, "debug")
    env.config_path.write_text(env.config_path.read_text() + "\n[worker]\nbogus = 1\n")
    w.signal(signal.SIGHUP)
    wait_until(lambda: w.events("worker.reload_failed"))
    (job_id,) = make_jobs(qdb, "acme", 1, kind="test-record")
    wait_until(lambda: job_row(qdb, job_id)["status"] == "done")
    assert w.stop() == 0


@contextlib.contextmanager
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    tmp = tempfile.mkdtemp(prefix="sdn-")
    path = os.path.join(tmp, "notify")
    sock.bind(path)
    try:
        yield sock, path
    finally:
        sock.close()
        os.unlink(path)
        os.rmdir(tmp)


def received(sock: socket.socket, most: int = 1000) -> list[str]:
    """The datagrams the worker sent to the notify socket, in order (it has exited)."""
    sock.setblocking(False)
    got: list[str] = []
    with contextlib.suppress(BlockingIOError):
        for _ in range(most):
            got.append(sock.recv(4096).decode())
    return got


def test_drain_on_an_empty_queue_exits_0(
    make_env: Any, qdb: Database, workers: list[WorkerProc]
) -> None:
    """The `ingestd` script's worker --drain, empty queue: READY, STOPPING, exit 0."""
    env = make_env(worker=FAST)
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
        assert w.wait() == 0
        got = received(sock)
    assert got[0].startswith("READY=1") and got[-1].startswith("STOPPING=1")
    assert [e["reason"] for e in w.events("worker.stopping")] == ["drained"]


def test_second_live_worker_with_the_same_id_is_refused(
    make_env: Any, qdb: Database, workers: list[WorkerProc]
) -> None:
    """A second `ingestd worker --worker-id X` while X runs exits 2 with a clear message
    and claims nothing; once the first is gone the id is free again."""
    env = make_env(worker=FAST)
    first = start(workers, env, "twin")
    second = WorkerProc(env.config_path, env.root / "twin-2.log", "--worker-id", "twin")
    workers.append(second)
    assert second.wait(timeout=60) == 2
    text = second.log_path.read_text()
    assert "worker id 'twin' is in use by another live worker" in text
    assert not second.events("worker.ready") and not second.events("job.started")
    assert first.proc.poll() is None  # the first one is untouched
    assert first.stop() == 0
    again = WorkerProc(env.config_path, env.root / "twin-3.log", "--worker-id", "twin", "--drain")
    workers.append(again)
    assert again.wait(timeout=60) == 0


def test_unknown_plugin_is_a_usage_error(make_env: Any) -> None:
    """`ingestd worker --plugin no.such.module` exits 2 naming the module, before any job."""
    env = make_env()
    proc = run_cli(env, "worker", "--plugin", "no.such.module")
    assert proc.returncode == 2
    assert "cannot import job kinds from --plugin 'no'" in proc.stderr
