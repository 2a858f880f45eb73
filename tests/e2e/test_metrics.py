"""The Prometheus endpoints of `ingestd serve` and `ingestd worker`, as real processes:
files arrive over SFTP and a hot folder, a worker runs their jobs, and every metric the
issue names is read back from /metrics."""

from __future__ import annotations

import contextlib
import json
import platform
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import paramiko
import pytest

import ingestd
from ingestd.config.settings import WorkerConfig
from ingestd.db.database import Database
from ingestd.db.pgcluster import EmbeddedPostgres
from ingestd.db.schema import migrate
from ingestd.errors import ExitCode
from ingestd.passwords import hash_password
from ingestd.queue.claims import Queue
from tests.conftest import Env, private_cluster, read_events, run_cli, wait_until, write_config
from tests.e2e.test_serve_sftp import Serve, _free_port
from tests.fixtures.files import pdf_bytes
from tests.fixtures.queue import PLUGIN, make_jobs
from tests.fixtures.sftp import sftp_upload


def _scrapes(port: int) -> bool:
    """Whether the listener at ``port`` answers /metrics yet."""
    try:
        _scrape(port)
    except OSError:
        return False
    return True


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def _value(text: str, name: str, **labels: str) -> float:
    """The sample ``name{labels...}`` (labels may be a subset), summed; 0 if absent."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def test_serve_and_worker_metrics(tmp_path: Path, db_url: str) -> None:
    """Intake files/bytes/refusals by tenant, source and reason; SFTP logins ok/failed and
    bans; queue depth by tenant and state; oldest ready job; job duration by kind and
    outcome; OCR pages: all served and counting what happened."""
    sftp_port, serve_metrics, worker_metrics = _free_port(), _free_port(), _free_port()
    hot = tmp_path / "hot"
    hot.mkdir()
    cfg = tmp_path / "ingestd.toml"
    write_config(
        cfg,
        {
            "database": {"url": db_url},
            "paths": {
                "state_dir": str(tmp_path / "state"),
                "spool": str(tmp_path / "spool"),
                "archive": str(tmp_path / "archive"),
                "derived": str(tmp_path / "derived"),
            },
            "log": {"format": "json"},
            "hotfolders": {"stable_seconds": 0.3, "poll_interval": 0.3, "retry_max_delay": 1},
            "metrics": {
                "listen": f"127.0.0.1:{serve_metrics}",
                "worker_listen": f"127.0.0.1:{worker_metrics - 1}",
            },
            "worker": {"poll_interval": 0.2},
            "analysis": {"jobs": 1},
            "sftp": {"listen": f"127.0.0.1:{sftp_port}", "retry_max_delay": 1},
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
    env = Env(tmp_path, cfg, None, db_url)  # type: ignore[arg-type]
    assert run_cli(env, "tenant", "create", "acme").returncode == 0
    assert run_cli(env, "worker", "--drain").returncode == 0  # provision: active
    serve = Serve(tmp_path, cfg)
    serve.start()
    worker = None
    try:
        scan = pdf_bytes("Betreff: Miete", seed=1)
        sftp_upload(sftp_port, "scan1", "pw-1", "Scan_0001.pdf", scan)
        with pytest.raises(paramiko.AuthenticationException):
            sftp_upload(sftp_port, "scan1", "wrong", "x.pdf", b"")
        (hot / "Rechnung.pdf").write_bytes(pdf_bytes("Rechnung", seed=2))
        (hot / "evil.pdf").write_bytes(b"MZ\x90\x00" + b"\0" * 64)  # refused: not a PDF

        def serve_counts() -> bool:
            text = _scrape(serve_metrics)
            return (
                _value(text, "ingestd_intake_files_total", outcome="ingested") >= 2
                and _value(text, "ingestd_intake_refused_total") >= 1
                # Counted in an SFTP process, reported to the daemon once a second.
                and _value(text, "ingestd_sftp_auth_failures_total") >= 1
                and _value(text, "ingestd_sftp_logins_total") >= 1
            )

        wait_until(serve_counts, timeout=60, interval=0.3)
        text = _scrape(serve_metrics)
        assert (
            _value(
                text, "ingestd_intake_files_total", tenant="acme", source="sftp", outcome="ingested"
            )
            == 1
        )
        assert (
            _value(
                text,
                "ingestd_intake_files_total",
                tenant="acme",
                source="watch",
                outcome="ingested",
            )
            == 1
        )
        assert _value(text, "ingestd_intake_refused_total", tenant="acme", source="watch") == 1
        wait_until(
            lambda: (
                _value(
                    _scrape(serve_metrics),
                    "ingestd_watch_quarantined_total",
                    tenant="acme",
                    reason="bad_type",
                )
                == 1
            ),
            30,
        )
        assert _value(text, "ingestd_intake_bytes_total", tenant="acme") > 0
        assert _value(text, "ingestd_sftp_logins_total", tenant="acme", method="password") == 1
        assert _value(text, "ingestd_sftp_auth_failures_total") >= 1
        assert "ingestd_sftp_bans_total" in text
        assert _value(text, "ingestd_queue_up") == 1
        assert _value(text, "ingestd_queue_jobs", tenant="acme", state="ready") == 2
        assert _value(text, "ingestd_queue_oldest_ready_seconds", tenant="acme") >= 0
        assert 'ingestd_queue_oldest_ready_seconds{tenant="acme"}' in text

        # A long-running worker (as ingestd-worker@1) with its own endpoint.
        worker_log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - closed below
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ingestd.cli",
                "worker",
                "--config",
                str(cfg),
                "--metrics-offset",
                "1",
            ],
            stdout=worker_log,
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: len(read_events(tmp_path / "worker.log", "job.done")) >= 2, 120)
        wtext = _scrape(worker_metrics)
        assert (
            _value(
                wtext, "ingestd_job_duration_seconds_count", kind="analyze-document", outcome="done"
            )
            == 2
        )
        # Both files are born digital (demo/samples.py: a text layer): analysed without
        # OCR, so no page was OCRed and no engine loaded its models.
        assert 'ingestd_ocr_pages_total{tenant="acme"} 0.0' in wtext
        assert _value(wtext, "ingestd_ocr_engine_loads_total") == 0
        wait_until(
            lambda: (
                _value(_scrape(serve_metrics), "ingestd_queue_jobs", tenant="acme", state="ready")
                == 0
            ),
            30,
        )
        for scraped in (_scrape(serve_metrics), _scrape(worker_metrics)):
            assert _class_names(scraped) == set()
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(60)
            worker_log.close()
        assert serve.wait() == 0


def _class_names(text: str) -> set[str]:
    """Label values that look like Python class names (PermissionError, OSError, ...)."""
    values = re.findall(
        r'="([^"]*)"', "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
    )
    return {v for v in values if re.fullmatch(r"[A-Z]\w*(Error|Exception|Warning)", v)}


def _serve_config(tmp_path: Path, db_url: str, metrics_port: int, **extra: Any) -> Path:
    cfg = tmp_path / "ingestd.toml"
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
            "metrics": {
                "listen": f"127.0.0.1:{metrics_port}",
                "worker_listen": f"127.0.0.1:{metrics_port + 1}",
            },
            "worker": {"poll_interval": 0.2, "max_retries": 0},
            **extra,
        },
    )
    return cfg


def test_no_created_series_build_info_and_no_windowed_state(tmp_path: Path, db_url: str) -> None:
    """/metrics has no *_created series, has ingestd_build_info with the versions, and no
    failed_last_hour state in the queue gauge."""
    port = _free_port()
    hot = tmp_path / "hot"
    hot.mkdir()
    cfg = _serve_config(
        tmp_path,
        db_url,
        port,
        hotfolders={"stable_seconds": 0.3},
        watch=[{"path": str(hot), "tenant": "acme"}],
    )
    env = Env(tmp_path, cfg, None, db_url)  # type: ignore[arg-type]
    assert run_cli(env, "tenant", "create", "acme").returncode == 0
    assert run_cli(env, "worker", "--drain").returncode == 0
    serve = Serve(tmp_path, cfg)
    serve.start()
    try:
        # Labelled counters have children (and so had *_created samples) only once used.
        (hot / "Rechnung.pdf").write_bytes(pdf_bytes("Rechnung", seed=3))
        wait_until(
            lambda: _value(_scrape(port), "ingestd_intake_files_total", outcome="ingested") == 1, 60
        )
        text = _scrape(port)
        assert "ingestd_intake_bytes_total{" in text and "ingestd_sftp_bans_total" in text
        assert "_created" not in text
        build = [ln for ln in text.splitlines() if ln.startswith("ingestd_build_info{")]
        assert len(build) == 1 and build[0].endswith(" 1.0"), build
        for key, want in (
            ("version", ingestd.__version__),
            ("python", platform.python_version()),
            ("paramiko", version("paramiko")),
        ):
            assert f'{key}="{want}"' in build[0], build
        assert 'ocrmypdf="' in build[0]
        assert "failed_last_hour" not in text
        assert _value(text, "ingestd_queue_up") == 1
    finally:
        assert serve.wait() == 0


def test_verify_metrics_after_a_real_verify(tmp_path: Path, db_url: str) -> None:
    """`ingestd verify` records its end, checked count and problems; the daemon exports
    them as ingestd_verify_last_* (0 problems, then one orphaned file)."""
    port = _free_port()
    cfg = _serve_config(tmp_path, db_url, port)
    env = Env(tmp_path, cfg, None, db_url)  # type: ignore[arg-type]
    assert run_cli(env, "tenant", "create", "acme").returncode == 0
    assert run_cli(env, "worker", "--drain").returncode == 0
    scan = tmp_path / "Rechnung.pdf"
    scan.write_bytes(pdf_bytes("Rechnung", seed=4))
    assert run_cli(env, "ingest", "--tenant", "acme", str(scan)).returncode == 0
    serve = Serve(tmp_path, cfg)
    serve.start()
    try:
        assert _value(_scrape(port), "ingestd_verify_last_run_timestamp_seconds") == 0
        assert "ingestd_verify_last_problems" not in _scrape(port)  # never ran: no claim
        t0 = time.time()
        assert run_cli(env, "verify").returncode == 0
        text = _scrape(port)
        at = _value(text, "ingestd_verify_last_run_timestamp_seconds")
        assert t0 <= at <= time.time()
        assert _value(text, "ingestd_verify_last_checked_documents") == 1
        assert _value(text, "ingestd_verify_last_problems") == 0
        for kind in ("missing", "altered", "orphaned", "temp", "mode"):
            assert f'ingestd_verify_last_problems{{kind="{kind}"}} 0.0' in text

        month = next((tmp_path / "archive" / "acme").glob("*/*"))
        (month / ("0" * 64 + ".pdf")).write_bytes(b"%PDF-1.4 nobody's")
        done = run_cli(env, "verify")
        assert done.returncode == ExitCode.archive_inconsistent, done.stderr
        text = _scrape(port)
        assert _value(text, "ingestd_verify_last_problems", kind="orphaned") == 1
        assert _value(text, "ingestd_verify_last_problems") == 1
        assert _value(text, "ingestd_verify_last_run_timestamp_seconds") >= at
        record = json.loads((tmp_path / "state" / "verify" / "last.json").read_text())
        assert record["problems"] == 1 and record["checked"] == 1 and record["rehash"] is True
    finally:
        assert serve.wait() == 0


@pytest.fixture
def own_cluster() -> Iterator[EmbeddedPostgres]:
    """A private cluster this test may stop and start, with an active tenant acme."""
    with private_cluster(5464) as cluster:
        with Database(cluster.conninfo) as db:
            migrate(db)
            with db.transaction() as tx:
                tx.one("tenant_insert", {"name": "acme", "status": "active"})
        yield cluster


def test_spool_backlog_gauge_counts_uploads_waiting_for_the_database(
    own_cluster: EmbeddedPostgres, tmp_path: Path
) -> None:
    """ingestd_spool_pending_uploads/_bytes count uploads spooled while Postgres is down,
    and fall to 0 once they are ingested."""
    port, sftp_port = _free_port(), _free_port()
    cfg = _serve_config(
        tmp_path,
        own_cluster.conninfo,
        port,
        **{
            "sftp": {"listen": f"127.0.0.1:{sftp_port}", "retry_max_delay": 1},
            "sftp.accounts": [
                {
                    "username": "scan1",
                    "tenant": "acme",
                    "password_hash": hash_password("pw-1", rounds=4),
                }
            ],
        },
    )
    serve = Serve(tmp_path, cfg)
    serve.start()
    try:
        assert _value(_scrape(port), "ingestd_spool_pending_uploads") == 0
        own_cluster.stop("fast")
        scans = [pdf_bytes(f"Scan {i}", seed=10 + i) for i in range(2)]
        for i, data in enumerate(scans):
            sftp_upload(sftp_port, "scan1", "pw-1", f"Scan_{i:04d}.pdf", data)
        text = _scrape(port)
        assert _value(text, "ingestd_spool_pending_uploads") == 2
        assert _value(text, "ingestd_spool_pending_bytes") == sum(len(d) for d in scans)
        own_cluster.start()
        wait_until(
            lambda: _value(_scrape(port), "ingestd_spool_pending_uploads") == 0,
            timeout=90,
            interval=0.5,
        )
        assert _value(_scrape(port), "ingestd_spool_pending_bytes") == 0
    finally:
        assert serve.wait() == 0


@contextlib.contextmanager
def _worker(tmp_path: Path, cfg: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`ingestd worker` with its /metrics on worker_listen (offset 0), its log in
    tmp_path/worker.log; on leaving it is stopped with SIGTERM and must exit 0."""
    with open(tmp_path / "worker.log", "ab") as log:
        argv = [sys.executable, "-m", "ingestd.cli", "worker", "--config", str(cfg)]
        worker = subprocess.Popen(
            [*argv, "--metrics-offset", "0", "--plugin", PLUGIN],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield worker
        finally:
            worker.terminate()
            code = worker.wait(60)
        assert code == 0, (tmp_path / "worker.log").read_text()[-3000:]


def test_jobs_failed_counter_by_tenant_and_kind(tmp_path: Path, db_url: str) -> None:
    """A job failed for good counts in the worker's ingestd_jobs_failed_total{tenant,kind};
    the worker's /metrics has no *_created series either."""
    port = _free_port()
    cfg = _serve_config(tmp_path, db_url, port - 1)  # worker_listen: port (offset 0)
    with Database(db_url) as db:
        make_jobs(db, "acme", 1, kind="test-permanent")
    with _worker(tmp_path, cfg):
        wait_until(lambda: read_events(tmp_path / "worker.log", "job.failed"), 60)
        text = _scrape(port)
        assert _value(text, "ingestd_jobs_failed_total", tenant="acme", kind="test-permanent") == 1
        assert (
            _value(
                text, "ingestd_job_duration_seconds_count", kind="test-permanent", outcome="failed"
            )
            == 1
        )
        assert "_created" not in text


def test_job_failed_by_a_rescue_is_counted_and_the_rescuer_lives_on(
    tmp_path: Path, db_url: str
) -> None:
    """A job whose lease ran out once too often is failed by another worker's rescue: that
    worker counts it in ingestd_jobs_failed_total{tenant,kind} and keeps running."""
    port = _free_port()
    cfg = _serve_config(tmp_path, db_url, port - 1)  # max_retries 0: one lease is all
    with Database(db_url) as db:
        (job_id,) = make_jobs(db, "acme", 1, kind="test-record")
        assert Queue(db, WorkerConfig(), "dead").claim() is not None  # it never comes back
        with db.transaction() as tx:
            tx.raw(
                "UPDATE processing_jobs SET lease_expires_at = now() - interval '1 s' "
                "WHERE id = %(id)s",
                {"id": job_id},
            )
    with _worker(tmp_path, cfg) as worker:
        wait_until(lambda: read_events(tmp_path / "worker.log", "worker.rescued"), 60)
        # Its metrics listener may come up a moment after the rescue on a busy machine.
        wait_until(lambda: _scrapes(port), 60)
        text = _scrape(port)
        assert _value(text, "ingestd_jobs_failed_total", tenant="acme", kind="test-record") == 1
        assert worker.poll() is None
