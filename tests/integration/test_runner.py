"""The worker loop in this process against a real Postgres; its job child is a real process.

Outcomes through the runner (backoff, permanent errors, refusals), a crashing or hanging
child, and sd_notify on a real AF_UNIX datagram socket.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestd import log
from ingestd.db.database import Database
from ingestd.queue.claims import NOTIFY_CHANNEL, Queue
from ingestd.runtime.sdnotify import Notifier
from tests.conftest import Env, read_events, wait_until
from tests.fixtures.queue import PLUGIN, count, create_runs_table, job_row, make_jobs, runs
from worker.child import describe_exception
from worker.runner import Runner

FAST = {"poll_interval": 0.1, "lease_seconds": 2, "retry_base": 0.05, "max_retries": 2}


@pytest.fixture
def qdb(db: Database) -> Database:
    create_runs_table(db)
    return db


@pytest.fixture
def worker_log(tmp_path: Path) -> Iterator[Path]:
    """The runner's JSON log lines go to this file for the test."""
    path = tmp_path / "worker.log"
    with open(path, "w") as stream:
        log.configure("debug", "json", stream=stream)
        try:
            yield path
        finally:
            log.configure("debug", "json")


def run_worker(
    env: Env,
    db: Database,
    *,
    drain: bool = True,
    until: Callable[[], Any] | None = None,
    timeout: float = 60,
    notifier: Notifier | None = None,
) -> int:
    """Run the loop here until drained, or until ``until`` holds (then stop() it)."""
    runner = Runner(
        env.config,
        db,
        config_path=env.config_path,
        plugins=[PLUGIN],
        worker_id="w-test",
        drain=drain,
        notifier=notifier or Notifier({}),
    )
    failure: list[BaseException] = []

    def watch() -> None:
        try:
            assert until is not None
            wait_until(until, timeout=timeout, interval=0.05)
        except BaseException as exc:
            failure.append(exc)
        finally:
            runner.stop()

    watcher = threading.Thread(target=watch, daemon=True) if until else None
    if watcher:
        watcher.start()
    code = runner.run(install_signals=False)
    if watcher:
        watcher.join(timeout)
    if failure:
        raise failure[0]
    return code


def test_retry_with_backoff_then_failed(make_env: Any, qdb: Database, worker_log: Path) -> None:
    """test-fail with max_retries 2: retried twice with backoff, then failed with the last error."""
    env = make_env(worker=FAST)
    (job_id,) = make_jobs(qdb, "acme", 1, kind="test-fail")
    code = run_worker(
        env, qdb, drain=False, until=lambda: job_row(qdb, job_id)["status"] == "failed"
    )
    assert code == 0
    row = job_row(qdb, job_id)
    assert (row["retry_count"], row["doc_status"]) == (3, "failed")
    assert str(row["error_message"]).startswith("RuntimeError: test-fail attempt 3\n")
    retries = read_events(worker_log, "job.retry")
    assert [e["attempt"] for e in retries] == [1, 2]
    assert all(e["next_attempt_at"] and e["error"].startswith("RuntimeError") for e in retries)
    (failed,) = read_events(worker_log, "job.failed")
    assert (failed["attempt"], failed["job_id"], failed["tenant"]) == (3, job_id, "acme")
    assert failed["document_id"] == row["document_id"] and failed["seconds"] >= 0


def test_permanent_error_fails_at_once(make_env: Any, qdb: Database, worker_log: Path) -> None:
    """PermanentError: failed after one attempt, retry_count 0, the handler's message kept."""
    env = make_env(worker=FAST)
    (job_id,) = make_jobs(qdb, "acme", 1, kind="test-permanent")
    assert run_worker(env, qdb) == 0
    row = job_row(qdb, job_id)
    assert (row["status"], row["retry_count"], row["doc_status"]) == ("failed", 0, "failed")
    assert row["error_message"] == "test-permanent: this input can never work"
    assert read_events(worker_log, "job.failed")[0]["permanent"] is True


def test_refused_jobs_fail_without_running(make_env: Any, qdb: Database, worker_log: Path) -> None:
    """Unknown kind, suspended tenant: failed at once, retry_count 0, handler never run."""
    env = make_env(worker=FAST)
    (unknown,) = make_jobs(qdb, "acme", 1, kind="no-such-kind")
    (ok,) = make_jobs(qdb, "acme", 1, kind="test-record")
    (suspended,) = make_jobs(qdb, "globex", 1, kind="test-record")
    (allowed,) = make_jobs(qdb, "globex", 1, kind="test-suspended-ok")
    with qdb.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'suspended' WHERE name = 'globex'")
    assert run_worker(env, qdb) == 0

    expect = {
        unknown: "unknown job kind 'no-such-kind' (known: ",
        suspended: "tenant 'globex' is suspended; test-record needs it active; not retried",
    }
    for job_id, message in expect.items():
        row = job_row(qdb, job_id)
        assert (row["status"], row["retry_count"], row["doc_status"]) == ("failed", 0, "failed")
        assert str(row["error_message"]).startswith(message)
    assert sorted(r["job_id"] for r in runs(qdb)) == [ok, allowed]  # no refused handler ran
    assert job_row(qdb, ok)["status"] == job_row(qdb, allowed)["status"] == "done"
    refused = read_events(worker_log, "job.refused")
    assert sorted(e["job_id"] for e in refused) == sorted(expect)
    assert not [e for e in read_events(worker_log, "job.started") if e["job_id"] in expect]


def test_retired_kind_row_is_refused(make_env: Any, qdb: Database, worker_log: Path) -> None:
    """An old retired-kind row fails at once unrun, and the queue behind it keeps moving."""
    env = make_env(worker=FAST)
    (first,) = make_jobs(qdb, "acme", 1, kind="test-record")
    with qdb.transaction() as tx:
        # A row from before the kind was retired: the trigger refuses new ones, so it is
        # switched off for this one insert (the state of an upgraded database).
        tx.raw("ALTER TABLE processing_jobs DISABLE TRIGGER processing_jobs_kind_not_retired")
        retired = int(
            tx.raw(
                "INSERT INTO processing_jobs (tenant_id, document_id, kind) SELECT tenant_id, "
                "document_id, 'generate-thumbnails' FROM processing_jobs WHERE id = %(id)s "
                "RETURNING id",
                {"id": first},
            )[0]["id"]
        )
        tx.raw("ALTER TABLE processing_jobs ENABLE TRIGGER processing_jobs_kind_not_retired")
    (after,) = make_jobs(qdb, "globex", 1, kind="test-record")
    run_worker(
        env,
        qdb,
        drain=False,
        timeout=60,
        until=lambda: (
            job_row(qdb, after)["status"] == "done" and job_row(qdb, retired)["status"] == "failed"
        ),
    )
    row = job_row(qdb, retired)
    assert row["retry_count"] == 0
    assert str(row["error_message"]).startswith("job kind 'generate-thumbnails' is retired")
    assert retired not in [r["job_id"] for r in runs(qdb)]


def test_crash_and_timeout_do_not_stop_the_worker(
    make_env: Any, qdb: Database, worker_log: Path
) -> None:
    """A killed, exiting or timed-out child fails its job; the next job still runs."""
    env = make_env(worker={**FAST, "max_retries": 0, "timeout_default": 1})
    (killed,) = make_jobs(qdb, "acme", 1, kind="test-crash")
    (exited,) = make_jobs(qdb, "acme", 1, kind="test-crash", payload={"how": "exit"})
    (hung,) = make_jobs(qdb, "acme", 1, kind="test-sleep", payload={"seconds": 120})
    (after,) = make_jobs(qdb, "acme", 1, kind="test-record")
    assert run_worker(env, qdb) == 0
    assert job_row(qdb, killed)["error_message"] == "worker child died (signal 9)"
    assert job_row(qdb, exited)["error_message"] == "worker child died (exit code 3)"
    assert job_row(qdb, hung)["error_message"] == "timed out after 1 s"
    for job_id in (killed, exited, hung):
        row = job_row(qdb, job_id)
        # A retryable failure: counted as an attempt (max_retries 0 makes it final).
        assert (row["status"], row["retry_count"]) == ("failed", 1)
    assert job_row(qdb, after)["status"] == "done"
    assert [e["job_id"] for e in read_events(worker_log, "job.child_died")] == [killed, exited]
    (timeout,) = read_events(worker_log, "job.timeout")
    assert timeout["job_id"] == hung and timeout["timeout"] == 1
    # One child at the start, a new one after each of the three.
    assert len(read_events(worker_log, "worker.child_started")) == 3


def test_child_that_keeps_dying_ends_failed(make_env: Any, qdb: Database, worker_log: Path) -> None:
    """A job whose child dies on every attempt is retried once, not max_retries times:
    the second death is the file's, its document needs attention with the reason."""
    env = make_env(worker={**FAST, "max_retries": 5})
    (job_id,) = make_jobs(qdb, "acme", 1, kind="test-crash")
    (other,) = make_jobs(qdb, "globex", 1, kind="test-record")
    run_worker(env, qdb, drain=False, until=lambda: job_row(qdb, job_id)["status"] == "failed")
    row = job_row(qdb, job_id)
    assert row["retry_count"] == 1
    assert str(row["error_message"]).startswith(
        "worker child died (signal 9); again after a retry: it exceeds the memory"
    )
    with qdb.transaction() as tx:
        doc = tx.raw(
            "SELECT processing_status, attention_reason FROM documents WHERE id = %(d)s",
            {"d": row["document_id"]},
        )[0]
    assert doc["processing_status"] == "attention"
    assert doc["attention_reason"] == row["error_message"]
    assert job_row(qdb, other)["status"] == "done"
    assert len(read_events(worker_log, "job.child_died")) == 2


def test_drain_exits_when_nothing_is_ready(make_env: Any, qdb: Database, worker_log: Path) -> None:
    """--drain runs what is ready, then returns 0; on an empty queue at once."""
    env = make_env(worker=FAST)
    ids = make_jobs(qdb, "acme", 5, kind="test-record")
    assert run_worker(env, qdb) == 0
    assert sorted(r["job_id"] for r in runs(qdb)) == ids
    assert count(qdb, "SELECT count(*) AS n FROM processing_jobs WHERE status <> 'done'") == 0
    assert run_worker(env, qdb) == 0
    stopping = read_events(worker_log, "worker.stopping")
    assert [e["reason"] for e in stopping] == ["drained", "drained"]
    assert len(read_events(worker_log, "worker.stopped")) == 2


def test_heartbeat_keeps_the_lease_of_a_long_job(
    make_env: Any, qdb: Database, worker_log: Path
) -> None:
    """A job running twice its lease is not rescued: the heartbeat renews the lease."""
    env = make_env(worker=FAST)  # lease 2 s, renewed every 2/3 s
    (job_id,) = make_jobs(qdb, "acme", 1, kind="test-record", payload={"seconds": 4})
    rescuer = Queue(qdb, env.config.worker, "other")
    rescued: list[Any] = []

    def done_while_rescuing() -> bool:
        rescued.extend(rescuer.rescue())
        return job_row(qdb, job_id)["status"] == "done"

    run_worker(env, qdb, drain=False, until=done_while_rescuing)
    assert rescued == [] and job_row(qdb, job_id)["retry_count"] == 0
    assert [r["phase"] for r in runs(qdb, "end")] == ["end"]


def test_lost_lease_stops_the_attempt(make_env: Any, qdb: Database, worker_log: Path) -> None:
    """A job rescued from under its worker: the next heartbeat notices, the child is killed."""
    env = make_env(worker=FAST)
    (job_id,) = make_jobs(
        qdb, "acme", 1, kind="test-record", payload={"first_attempt_seconds": 300}
    )
    rescuer = Queue(qdb, env.config.worker, "other")
    taken: list[Any] = []

    def take_it_away() -> bool:
        if not taken and runs(qdb):
            with qdb.transaction() as tx:
                tx.raw(
                    "UPDATE processing_jobs SET lease_expires_at = now() - interval '1 s' "
                    "WHERE id = %(id)s",
                    {"id": job_id},
                )
            taken.extend(rescuer.rescue())
        return job_row(qdb, job_id)["status"] == "done"

    run_worker(env, qdb, drain=False, until=take_it_away)
    assert [r["id"] for r in taken] == [job_id]
    assert job_row(qdb, job_id)["retry_count"] == 1
    assert [r["attempt"] for r in runs(qdb)] == [0, 1]
    assert [r["attempt"] for r in runs(qdb, "end")] == [1]  # the first never finished
    (lost,) = read_events(worker_log, "job.lost")
    assert lost["job_id"] == job_id and "lease" in lost["error"]


def test_finished_jobs_are_pruned(make_env: Any, qdb: Database, worker_log: Path) -> None:
    """Jobs finished longer ago than prune_after are deleted; newer and open ones stay."""
    env = make_env(worker={**FAST, "prune_after": 86400})
    old, recent, queued = make_jobs(qdb, "acme", 3, kind="test-record")
    with qdb.transaction() as tx:
        tx.raw(
            "UPDATE processing_jobs SET status = 'done', finished_at = now() - "
            "CASE WHEN id = %(old)s THEN interval '2 days' ELSE interval '1 hour' END "
            "WHERE id IN (%(old)s, %(recent)s)",
            {"old": old, "recent": recent},
        )
    assert run_worker(env, qdb) == 0
    left = count(qdb, "SELECT count(*) AS n FROM processing_jobs WHERE id = %(id)s", {"id": old})
    assert left == 0
    assert job_row(qdb, recent)["status"] == job_row(qdb, queued)["status"] == "done"
    assert read_events(worker_log, "worker.pruned")[0]["jobs"] == 1


def test_handler_error_names_type_message_and_place() -> None:
    """A handler error reads 'ExcType: message' plus file:line of the last frames."""

    def inner() -> None:
        raise ValueError("bad page 3")

    try:
        inner()
    except ValueError as exc:
        text = describe_exception(exc)
    head, *tail = text.splitlines()
    assert head == "ValueError: bad page 3"
    assert tail[-1].startswith("  at integration/test_runner.py:") and tail[-1].endswith("inner")


# -- sd_notify ---------------------------------------------------------------------------
@contextlib.contextmanager
def notify_socket(abstract: bool = False) -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket like systemd's: a short path, or a name in the abstract namespace."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    tmp = tempfile.mkdtemp(prefix="sdn-")
    try:
        if abstract:
            name = f"ingestd-test-{os.getpid()}-{os.path.basename(tmp)}"
            sock.bind("\0" + name)
            yield sock, "@" + name
        else:
            path = os.path.join(tmp, "notify")
            sock.bind(path)
            yield sock, path
    finally:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(tmp, "notify"))
        os.rmdir(tmp)


def received(sock: socket.socket) -> list[str]:
    sock.setblocking(False)
    out = []
    for _ in range(10_000):
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            break
    return out


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_notifier_sends_datagrams(abstract: bool) -> None:
    """READY/STATUS/WATCHDOG/STOPPING reach a path socket and an @abstract one."""
    with notify_socket(abstract) as (sock, address):
        n = Notifier({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "3000000"})
        assert n.enabled and n.watchdog_interval == 1.5
        assert n.ready("idle") and n.status("job 1 x tenant y") and n.watchdog()
        assert n.stopping()
        n.close()
        assert received(sock) == [
            "READY=1\nSTATUS=idle",
            "STATUS=job 1 x tenant y",
            "WATCHDOG=1",
            "STOPPING=1",
        ]


def test_notifier_without_systemd_is_a_no_op() -> None:
    """No NOTIFY_SOCKET: nothing sent; a watchdog for another pid is ignored."""
    n = Notifier({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert not n.enabled and not n.ready() and n.watchdog_interval is None
    gone = Notifier({"NOTIFY_SOCKET": "/nonexistent/notify"})
    assert gone.enabled and not gone.status("idle")  # an error is False, never raised


def test_runner_talks_to_systemd(make_env: Any, qdb: Database, worker_log: Path) -> None:
    """READY, STATUS per job and idle, WATCHDOG while busy and idle, then STOPPING."""
    env = make_env(worker={**FAST, "poll_interval": 5})
    (job_id,) = make_jobs(qdb, "acme", 1, kind="test-sleep", payload={"seconds": 0.5})
    with notify_socket() as (sock, address):
        notifier = Notifier({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "100000"})
        seen: list[str] = []

        def watchdogs_after_idle() -> bool:
            seen.extend(received(sock))
            return (
                "STATUS=idle" in seen and seen[seen.index("STATUS=idle") :].count("WATCHDOG=1") >= 3
            )

        run_worker(env, qdb, drain=False, until=watchdogs_after_idle, notifier=notifier)
        seen.extend(received(sock))
    assert seen[0] == "READY=1\nSTATUS=idle"
    status = f"STATUS=job {job_id} test-sleep tenant acme"
    assert status in seen and seen.index(status) < seen.index("STATUS=idle", 1)
    # The job ran 0.5 s with pings due every 0.05 s: the main loop kept pinging meanwhile.
    during = seen[seen.index(status) : seen.index("STATUS=idle", 1)]
    assert during.count("WATCHDOG=1") >= 2
    assert seen[-1].startswith("STOPPING=1")


def test_a_drained_slot_stays_pokable_until_its_process_ends(
    make_env: Any, qdb: Database, worker_log: Path
) -> None:
    """--drain with lanes: the short lane (no short job queued) ends at once while a job
    lane still runs; the process goes on poking every slot on each notification until the
    last one ended, so a slot's wake-up pipe stays open until the process closes them all
    (a poke into a closed, maybe reused, descriptor was `--drain` exiting 15 with EBADF)."""
    from worker.lanes import Lanes

    env = make_env(worker={**FAST, "concurrency": 2})
    make_jobs(qdb, "acme", 1, kind="test-record", payload={"seconds": 3})
    lanes = Lanes(env.config, qdb, config_path=env.config_path, plugins=[PLUGIN], drain=True)
    assert lanes.services is not None and any(r.scope.short for r in lanes.runners)
    done = threading.Event()

    def notify_meanwhile() -> None:
        for _ in range(600):  # 60 s at most; the job takes 3
            if done.wait(0.1):
                return
            with contextlib.suppress(Exception), qdb.transaction() as tx:
                tx.raw("SELECT pg_notify(%(c)s, 'acme')", {"c": NOTIFY_CHANNEL})

    notifier = threading.Thread(target=notify_meanwhile, daemon=True)
    notifier.start()
    try:
        assert lanes.run() == 0
    finally:
        done.set()
        notifier.join(10)
    stopping = read_events(worker_log, "worker.stopping")
    assert [e["reason"] for e in stopping].count("drained") == len(lanes.runners)
    for r in lanes.runners:
        r.flags.poke()  # closed by the process now: a no-op, never a write into a reused fd
    assert count(qdb, "SELECT count(*) AS n FROM processing_jobs WHERE status <> 'done'") == 0
