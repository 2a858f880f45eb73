"""/healthz and /readyz on the metrics listener of real `ingestd serve` and `ingestd
worker` processes: Postgres stopped and started, a spool directory made immutable, a hot
folder's settle loop stalled for real, and every other path 404."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.db.pgcluster import EmbeddedPostgres
from ingestd.db.schema import migrate
from ingestd.events.outbox import EventLog
from ingestd.ops.metrics_server import MetricsEndpoint
from ingestd.passwords import hash_password
from ingestd.runtime.health import Health, Loop
from ingestd.sources.hotfolders import HotFolders
from tests.conftest import Env, private_cluster, wait_until, write_config
from tests.e2e.test_serve_sftp import Serve, _free_port
from tests.fixtures.mounts import immutable

LOOPS = {
    "daemon",
    "daemon.state",
    "watch.settle",
    "watch.folders",
    "spool.intake",
    "sftp.accept",
    "sftp.processes",
}


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, the JSON body) of /healthz or /readyz."""
    status, body = get(port, path)
    return status, json.loads(body)


def _config(tmp_path: Path, db_url: str, metrics_port: int) -> Path:
    cfg = tmp_path / "ingestd.toml"
    hot = tmp_path / "hot"
    hot.mkdir(exist_ok=True)
    write_config(
        cfg,
        {
            "database": {"url": db_url, "connect_timeout": 2},
            "paths": {
                "state_dir": str(tmp_path / "state"),
                "spool": str(tmp_path / "spool"),
                "archive": str(tmp_path / "archive"),
                "derived": str(tmp_path / "derived"),
            },
            "log": {"format": "json"},
            "hotfolders": {"stable_seconds": 0.3, "retry_max_delay": 1},
            "metrics": {
                "listen": f"127.0.0.1:{metrics_port}",
                "worker_listen": f"127.0.0.1:{metrics_port + 1}",
            },
            # Two SFTP processes whatever this machine's cores: their supervisor is a loop.
            "sftp": {"listen": f"127.0.0.1:{_free_port()}", "retry_max_delay": 1, "processes": 2},
            "sftp.accounts": [
                {
                    "username": "scan1",
                    "tenant": "acme",
                    "password_hash": hash_password("pw-1", rounds=4),
                }
            ],
            "watch": [{"path": str(hot), "tenant": "acme", "failed": str(tmp_path / "failed")}],
        },
    )
    return cfg


@pytest.fixture
def own_cluster() -> Iterator[EmbeddedPostgres]:
    """A private cluster this test may stop and start."""
    with private_cluster(5463) as cluster:
        with Database(cluster.conninfo) as db:
            migrate(db)
        yield cluster


def test_readyz_follows_the_database_and_healthz_stays_up(
    own_cluster: EmbeddedPostgres, tmp_path: Path
) -> None:
    """/readyz: 200, then 503 naming the database while Postgres is down, 200 when it is
    back; /healthz names every loop of serve and stays 200 through the outage."""
    port = _free_port()
    serve = Serve(tmp_path, _config(tmp_path, own_cluster.conninfo, port))
    serve.start()
    try:
        wait_until(lambda: probe(port, "/readyz")[0] == 200, timeout=30, interval=0.3)
        status, ready = probe(port, "/readyz")
        assert ready["status"] == "ok"
        assert {n for n, c in ready["checks"].items() if c["ok"]} == {
            "database",
            "spool",
            "archive",
            "sftp",  # its processes run
        }
        status, live = probe(port, "/healthz")
        assert status == 200 and live["status"] == "ok", live
        assert set(live["checks"]) == LOOPS  # SFTP is on: its accept loop counts

        own_cluster.stop("fast")
        wait_until(lambda: probe(port, "/readyz")[0] == 503, timeout=60, interval=0.5)
        status, ready = probe(port, "/readyz")
        db = ready["checks"]["database"]
        assert ready["status"] == "fail" and not db["ok"] and "unreachable" in db["reason"]
        assert ready["checks"]["spool"]["ok"] and ready["checks"]["archive"]["ok"]
        # Down is not dead: every loop turns again while Postgres is down (none waits on
        # it), and /healthz answers 200 at each look meanwhile.
        down_at = time.monotonic()

        def all_turned_while_down() -> bool:
            status, live = probe(port, "/healthz")
            assert status == 200, live
            since = time.monotonic() - down_at
            return all(c["ok"] and c["seconds_since_turn"] < since for c in live["checks"].values())

        wait_until(all_turned_while_down, timeout=120, interval=0.5)

        own_cluster.start()
        wait_until(lambda: probe(port, "/readyz")[0] == 200, timeout=60, interval=0.5)
        assert probe(port, "/readyz")[1]["checks"]["database"] == {"ok": True}
    finally:
        assert serve.wait() == 0


def test_readyz_names_an_unwritable_spool(tmp_path: Path, db_url: str) -> None:
    """/readyz is 503 naming the spool while its queue directory is immutable, 200 after."""
    port = _free_port()
    serve = Serve(tmp_path, _config(tmp_path, db_url, port))
    serve.start()
    try:
        wait_until(lambda: probe(port, "/readyz")[0] == 200, timeout=30, interval=0.3)
        # The directory acknowledged uploads are renamed into: root or not, nothing can
        # be created there now (the spool's root itself is only read after start).
        with immutable(tmp_path / "spool" / "queue"):
            wait_until(lambda: probe(port, "/readyz")[0] == 503, timeout=30, interval=0.3)
            _, ready = probe(port, "/readyz")
            spool = ready["checks"]["spool"]
            assert not spool["ok"] and "queue" in spool["reason"], spool
            assert "immutable" in spool["reason"]
            assert ready["checks"]["database"]["ok"] and ready["checks"]["archive"]["ok"]
            assert probe(port, "/healthz")[0] == 200  # not writable is not dead
        wait_until(lambda: probe(port, "/readyz")[0] == 200, timeout=30, interval=0.3)
    finally:
        assert serve.wait() == 0


def test_other_paths_are_404(tmp_path: Path, db_url: str) -> None:
    """The listener answers /metrics, /healthz and /readyz; every other path is 404."""
    port = _free_port()
    serve = Serve(tmp_path, _config(tmp_path, db_url, port))
    serve.start()
    try:
        status, text = get(port, "/metrics")
        assert status == 200 and b"ingestd_queue_up" in text
        for path in (
            "/",
            "/health",
            "/metrics/extra",
            "/healthz/x",
            "/readyz.json",
            "/favicon.ico",
        ):
            assert get(port, path)[0] == 404, path
    finally:
        assert serve.wait() == 0


def test_healthz_503_names_a_stuck_settle_loop(make_env: Any, tmp_path: Path, tenant: str) -> None:
    """/healthz is 503 naming watch.settle while the real settle loop cannot turn."""
    hot_dir = tmp_path / "hot"
    hot_dir.mkdir()
    env: Env = make_env(watch=[{"path": str(hot_dir), "tenant": tenant}])
    db = Database(env.db_url, max_size=2).open()
    hot = HotFolders(
        env.config, make_intake(env.config, db), events=EventLog(db, env.config.paths.state_dir)
    )
    # The daemon's Health, with a 1 s floor instead of 30 s so the test is quick.
    endpoint = MetricsEndpoint("127.0.0.1:0", health=Health([Loop("watch.settle")], floor=1.0))
    port = endpoint.address[1]
    hot.start()
    try:
        wait_until(lambda: probe(port, "/healthz")[0] == 200, timeout=10, interval=0.1)
        # A real stall of the unchanged loop: the lock every settle pass needs is held
        # elsewhere, as a deadlock would hold it (or as lstat blocks on a dead NFS mount).
        with hot.files.lock:
            wait_until(lambda: probe(port, "/healthz")[0] == 503, timeout=30, interval=0.2)
            _, live = probe(port, "/healthz")
            settle = live["checks"]["watch.settle"]
            assert live["status"] == "fail" and not settle["ok"], live
            assert "stuck" in settle["reason"] and settle["seconds_since_turn"] > 1
        wait_until(lambda: probe(port, "/healthz")[0] == 200, timeout=30, interval=0.2)
    finally:
        endpoint.close()
        hot.stop()
        db.close()


def test_worker_healthz_and_readyz(tmp_path: Path, db_url: str) -> None:
    """`ingestd worker` serves /healthz (its loop) and /readyz (database, derived) too."""
    port = _free_port()
    cfg = _config(tmp_path, db_url, port - 1)  # worker_listen = port - 1 + 1; offset 0
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ingestd.cli",
            "worker",
            "--config",
            str(cfg),
            "--metrics-offset",
            "0",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: _answers(port), timeout=60, interval=0.3)
        wait_until(lambda: probe(port, "/healthz")[0] == 200, timeout=30, interval=0.3)
        _, live = probe(port, "/healthz")
        # One loop per lane (worker.concurrency, by default one per core).
        lanes = {"worker", *(f"worker.{n}" for n in range(2, (os.cpu_count() or 1) + 1))}
        assert set(live["checks"]) == lanes and all(c["ok"] for c in live["checks"].values())
        wait_until(lambda: probe(port, "/readyz")[0] == 200, timeout=30, interval=0.3)
        _, ready = probe(port, "/readyz")
        assert set(ready["checks"]) == {"database", "derived"}
        assert get(port, "/")[0] == 404
        assert b"ingestd_build_info" in get(port, "/metrics")[1]
    finally:
        worker.terminate()
        assert worker.wait(60) == 0
        log.close()


def _answers(port: int) -> bool:
    try:
        get(port, "/metrics")
    except OSError:
        return False
    return True
