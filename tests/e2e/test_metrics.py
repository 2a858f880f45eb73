"""The Prometheus endpoints of `ingestd serve` and `ingestd worker`, as real processes:
files arrive over SFTP and a hot folder, a worker runs their jobs, and every metric the
issue names is read back from /metrics."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import paramiko
import pytest

from ingestd.sftp.accounts import hash_password
from tests.conftest import Env, read_events, run_cli, wait_until, write_config
from tests.e2e.test_serve_sftp import Serve, _free_port
from tests.fixtures.files import pdf_bytes
from tests.fixtures.sftp import sftp_upload


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
    write_config(cfg, {
        "database": {"url": db_url},
        "paths": {"state_dir": str(tmp_path / "state"), "spool": str(tmp_path / "spool"),
                  "archive": str(tmp_path / "archive"), "derived": str(tmp_path / "derived")},
        "log": {"format": "json"},
        "hotfolders": {"stable_seconds": 0.3, "poll_interval": 0.3, "retry_max_delay": 1},
        "metrics": {"listen": f"127.0.0.1:{serve_metrics}",
                    "worker_listen": f"127.0.0.1:{worker_metrics - 1}"},
        "worker": {"poll_interval": 0.2},
        "analysis": {"jobs": 1},
        "sftp": {"listen": f"127.0.0.1:{sftp_port}", "retry_max_delay": 1},
        "sftp.accounts": [{"username": "scan1", "tenant": "acme",
                           "password_hash": hash_password("pw-1", rounds=4)}],
        "watch": [{"path": str(hot), "tenant": "acme", "failed": str(tmp_path / "failed")}],
    })  # fmt: skip
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
            return _value(text, "ingestd_intake_files_total", outcome="ingested") >= 2 and \
                _value(text, "ingestd_intake_refused_total") >= 1
        wait_until(serve_counts, timeout=60, interval=0.3)
        text = _scrape(serve_metrics)
        assert _value(text, "ingestd_intake_files_total", tenant="acme", source="sftp",
                      outcome="ingested") == 1  # fmt: skip
        assert _value(text, "ingestd_intake_files_total", tenant="acme", source="watch",
                      outcome="ingested") == 1  # fmt: skip
        assert _value(text, "ingestd_intake_refused_total", tenant="acme", source="watch") == 1
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
            [sys.executable, "-m", "ingestd.cli", "worker", "--config", str(cfg),
             "--metrics-offset", "1"], stdout=worker_log, stderr=subprocess.STDOUT)  # fmt: skip
        wait_until(lambda: len(read_events(tmp_path / "worker.log", "job.done")) >= 2, 120)
        wtext = _scrape(worker_metrics)
        assert _value(wtext, "ingestd_job_duration_seconds_count", kind="analyze-document",
                      outcome="done") == 2  # fmt: skip
        assert _value(wtext, "ingestd_ocr_pages_total", tenant="acme") == 2
        wait_until(lambda: _value(_scrape(serve_metrics), "ingestd_queue_jobs", tenant="acme",
                                  state="ready") == 0, 30)  # fmt: skip
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(60)
            worker_log.close()
        assert serve.wait() == 0
