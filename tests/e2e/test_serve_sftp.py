"""`ingestd serve` with SFTP as a real process: SIGKILL after CLOSE, restart, status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from ingestd.db.database import Database
from ingestd.passwords import hash_password
from tests.conftest import Env, private_cluster, read_events, run_cli, wait_until, write_config
from tests.fixtures.files import pdf_bytes

SSH = [
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "BatchMode=yes",
    "-o",
    "IdentitiesOnly=yes",
]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """`ingestd serve` as a child process; every run appends to one log file."""

    def __init__(self, root: Path, config: Path) -> None:
        self.root, self.config = root, config
        self.log_path = root / "serve.log"

    def start(self) -> None:
        """Start the daemon and return once THIS run reported daemon.ready (its listener
        bound). The log is appended to across restarts: a daemon.ready of an earlier run
        does not count, or a restart would return before the new daemon listens."""
        before = len(self.events("daemon.ready")) if self.log_path.exists() else 0
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ingestd.cli", "serve", "--config", str(self.config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(
            lambda: len(self.events("daemon.ready")) > before or self.proc.poll() is not None,
            timeout=60,
        )
        assert self.proc.poll() is None, self.log_path.read_text(errors="replace")[-2000:]

    def events(self, name: str) -> list[dict[str, Any]]:
        return read_events(self.log_path, name)

    def wait(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        self.log.close()
        return code


def test_sigkill_after_close_loses_nothing(tmp_path: Path, db_url: str) -> None:
    """Uploads acknowledged just before a SIGKILL are ingested when serve comes back."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    port = _free_port()
    cfg = tmp_path / "ingestd.toml"

    def config(url: str) -> None:
        write_config(
            cfg,
            {
                "database": {"url": url, "connect_timeout": 1},
                "paths": {
                    "state_dir": str(tmp_path / "state"),
                    "spool": str(tmp_path / "spool"),
                    "archive": str(tmp_path / "archive"),
                },
                "log": {"format": "json"},
                "sftp": {"listen": f"127.0.0.1:{port}", "retry_max_delay": 1},
                "sftp.accounts": [
                    {
                        "username": "scan1",
                        "tenant": "acme",
                        "password_hash": hash_password("pw-1", rounds=4),
                        "authorized_keys": [key.with_suffix(".pub").read_text().strip()],
                    }
                ],
            },
        )

    config(db_url)
    env = Env(tmp_path, cfg, None, db_url)  # type: ignore[arg-type]
    assert run_cli(env, "tenant", "create", "acme").returncode == 0
    assert run_cli(env, "worker", "--drain").returncode == 0  # provision-tenant: active
    # The daemon's database is unreachable: uploads are accepted and stay in the spool.
    config("host=127.0.0.1 port=1 dbname=ingestd")
    serve = Serve(tmp_path, cfg)
    serve.start()
    up = tmp_path / "up"
    up.mkdir()
    for i in range(5):
        (up / f"k{i}.pdf").write_bytes(pdf_bytes(f"kill {i}", pad_to=50_000, seed=900 + i))
    batch = tmp_path / "batch"
    batch.write_text("".join(f"put k{i}.pdf\n" for i in range(5)))
    result = subprocess.run(
        ["sftp", "-b", str(batch), "-P", str(port), "-i", str(key), *SSH, "scan1@127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=up,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert serve.wait(signal.SIGKILL) == -signal.SIGKILL

    assert len(list((tmp_path / "spool" / "queue").glob("*.data"))) == 5
    config(db_url)
    status = run_cli(env, "status", "--json")
    assert json.loads(status.stdout)["spool"]["pending"] == 5
    serve.start()
    try:

        def count() -> int:
            with Database(db_url) as db, db.transaction() as tx:
                return int(tx.raw("SELECT count(*) AS n FROM documents")[0]["n"])

        wait_until(lambda: count() == 5, timeout=60)
        # The host key is the one made at first start; hostkeys prints what clients see.
        keys = json.loads(run_cli(env, "hostkeys", "--json").stdout)
        scan = subprocess.run(
            ["ssh-keyscan", "-T", "30", "-p", str(port), "-t", "ed25519", "127.0.0.1"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        listed = subprocess.run(
            ["ssh-keygen", "-lf", "-"],
            input=scan.stdout,
            capture_output=True,
            text=True,
            check=True,
        )
        assert keys[0]["sha256"] in listed.stdout
        assert oct(os.stat(keys[0]["path"]).st_mode & 0o777) == "0o600"
    finally:
        assert serve.wait() == 0
    assert serve.events("spool.recovered")


def test_serve_starts_with_postgres_down(tmp_path: Path) -> None:
    """serve comes up without its database, spools an upload, migrates and ingests later."""
    with private_cluster(5435) as cluster:
        cluster.stop("fast")  # initialised and empty, and down
        key = tmp_path / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        port = _free_port()
        cfg = tmp_path / "ingestd.toml"
        write_config(
            cfg,
            {
                "database": {"url": cluster.conninfo, "connect_timeout": 1},
                "paths": {
                    "state_dir": str(tmp_path / "state"),
                    "spool": str(tmp_path / "spool"),
                    "archive": str(tmp_path / "archive"),
                },
                "log": {"format": "json"},
                "sftp": {"listen": f"127.0.0.1:{port}", "retry_max_delay": 1},
                "sftp.accounts": [
                    {
                        "username": "scan1",
                        "tenant": "acme",
                        "authorized_keys": [key.with_suffix(".pub").read_text().strip()],
                    }
                ],
            },
        )
        serve = Serve(tmp_path, cfg)
        serve.start()
        try:
            wait_until(lambda: serve.events("daemon.database_unavailable"), timeout=30)
            up = tmp_path / "up"
            up.mkdir()
            (up / "early.pdf").write_bytes(pdf_bytes("early", pad_to=20_000, seed=77))
            batch = tmp_path / "batch"
            batch.write_text("put early.pdf\n")
            result = subprocess.run(
                [
                    "sftp",
                    "-b",
                    str(batch),
                    "-P",
                    str(port),
                    "-i",
                    str(key),
                    *SSH,
                    "scan1@127.0.0.1",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=up,
                stdin=subprocess.DEVNULL,
            )
            assert result.returncode == 0, result.stderr
            cluster.start()
            env = Env(tmp_path, cfg, None, cluster.conninfo)  # type: ignore[arg-type]
            assert run_cli(env, "tenant", "create", "acme").returncode == 0
            assert run_cli(env, "worker", "--drain").returncode == 0  # provisions acme

            def count() -> int:
                with Database(cluster.conninfo) as db, db.transaction() as tx:
                    return int(tx.raw("SELECT count(*) AS n FROM documents")[0]["n"])

            wait_until(lambda: count() == 1, timeout=90, interval=0.5)
        finally:
            assert serve.wait() == 0


def test_one_id_follows_an_upload_from_arrival_to_its_last_job(tmp_path: Path, db_url: str) -> None:
    """The upload's spool id is its trace: `grep ID` finds sftp.upload_complete, the spool
    and intake lines of the daemon and every job line of the worker, and the document."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    port = _free_port()
    cfg = tmp_path / "ingestd.toml"
    write_config(
        cfg,
        {
            "database": {"url": db_url, "connect_timeout": 2},
            "paths": {
                "state_dir": str(tmp_path / "state"),
                "spool": str(tmp_path / "spool"),
                "archive": str(tmp_path / "archive"),
            },
            "log": {"format": "json"},
            "worker": {"poll_interval": 0.2},
            "analysis": {"jobs": 1},
            "sftp": {"listen": f"127.0.0.1:{port}", "retry_max_delay": 1},
            "sftp.accounts": [
                {
                    "username": "scan1",
                    "tenant": "acme",
                    "password_hash": hash_password("pw-1", rounds=4),
                    "authorized_keys": [key.with_suffix(".pub").read_text().strip()],
                }
            ],
        },
    )
    env = Env(tmp_path, cfg, None, db_url)  # type: ignore[arg-type]
    assert run_cli(env, "tenant", "create", "acme").returncode == 0
    assert run_cli(env, "worker", "--drain").returncode == 0  # provision-tenant: active
    serve = Serve(tmp_path, cfg)
    serve.start()
    try:
        up = tmp_path / "up"
        up.mkdir()
        (up / "Scan_0001.pdf").write_bytes(pdf_bytes("trace me", seed=77))
        batch = tmp_path / "batch"
        batch.write_text("put Scan_0001.pdf\n")
        result = subprocess.run(
            ["sftp", "-b", str(batch), "-P", str(port), "-i", str(key), *SSH, "scan1@127.0.0.1"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=up,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, result.stderr
        wait_until(lambda: serve.events("intake.ingested"), timeout=60)
    finally:
        assert serve.wait() == 0
    [upload] = serve.events("sftp.upload_complete")
    trace = upload["trace"]
    assert trace == upload["spool_id"]
    worker = run_cli(env, "worker", "--drain")
    assert worker.returncode == 0, worker.stderr[-2000:]

    daemon_lines = [e for e in read_events(serve.log_path) if trace in json.dumps(e)]
    assert {"sftp.upload_complete", "intake.ingested"} <= {e["event"] for e in daemon_lines}
    worker_lines = [json.loads(line) for line in worker.stderr.splitlines() if trace in line]
    assert {"job.started", "job.done"} <= {e["event"] for e in worker_lines}
    assert all(e.get("trace") == trace for e in worker_lines)
    with Database(db_url) as db, db.transaction() as tx:
        doc = tx.raw("SELECT trace_id, processing_status FROM documents")[0]
    assert (doc["trace_id"], doc["processing_status"]) == (trace, "done")
