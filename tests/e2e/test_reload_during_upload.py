"""SIGHUP on a running `ingestd serve` (systemctl reload) while a scanner is mid-upload:
the new account and the new hot folder work, and the running upload completes."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
from pathlib import Path
from typing import Any

import paramiko

from ingestd.db.database import Database
from ingestd.passwords import hash_password
from tests.conftest import Env, run_cli, wait_until, write_config
from tests.e2e.test_serve_sftp import Serve, _free_port
from tests.fixtures.files import pdf_bytes
from tests.fixtures.sftp import sftp_upload

CHUNK = 32 * 1024


def _docs(db_url: str) -> list[dict[str, Any]]:
    with Database(db_url) as db, db.transaction() as tx:
        return tx.raw("SELECT original_filename, source, sha256 FROM documents ORDER BY id")


def test_sighup_adds_account_and_hot_folder_during_an_upload(tmp_path: Path, db_url: str) -> None:
    """An upload is half written when SIGHUP reloads a config with a new account and a new
    hot folder: the upload completes and is ingested whole, the new account logs in and
    uploads, and a file dropped into the new hot folder is ingested."""
    port = _free_port()
    cfg = tmp_path / "ingestd.toml"
    hot = tmp_path / "hot-new"
    hot.mkdir()
    base: dict[str, Any] = {
        "database": {"url": db_url},
        "paths": {
            "state_dir": str(tmp_path / "state"),
            "spool": str(tmp_path / "spool"),
            "archive": str(tmp_path / "archive"),
        },
        "log": {"format": "json"},
        "metrics": {"enabled": False},
        "hotfolders": {"stable_seconds": 0.3, "poll_interval": 0.3},
        "sftp": {"listen": f"127.0.0.1:{port}", "retry_max_delay": 1},
        "sftp.accounts": [
            {
                "username": "scan1",
                "tenant": "acme",
                "password_hash": hash_password("pw-1", rounds=4),
            }
        ],
    }
    write_config(cfg, base)
    env = Env(tmp_path, cfg, None, db_url)  # type: ignore[arg-type]
    assert run_cli(env, "tenant", "create", "acme").returncode == 0
    assert run_cli(env, "worker", "--drain").returncode == 0  # provision: active
    serve = Serve(tmp_path, cfg)
    serve.start()
    big = pdf_bytes("long upload", pad_to=2_000_000, seed=7)
    half = threading.Event()
    resume = threading.Event()
    errors: list[BaseException] = []

    def slow_upload() -> None:
        try:
            transport = paramiko.Transport(("127.0.0.1", port))
            transport.connect(username="scan1", password="pw-1")
            sftp = paramiko.SFTPClient.from_transport(transport)
            assert sftp is not None
            with sftp.open("Long.pdf", "wb") as f:
                for i in range(0, len(big), CHUNK):
                    f.write(big[i : i + CHUNK])
                    if i >= len(big) // 2 and not half.is_set():
                        half.set()
                        assert resume.wait(60)
            sftp.close()
            transport.close()
        except BaseException as exc:
            errors.append(exc)

    uploader = threading.Thread(target=slow_upload)
    uploader.start()
    try:
        assert half.wait(60)
        write_config(
            cfg,
            {
                **base,
                "sftp.accounts": [
                    *base["sftp.accounts"],
                    {
                        "username": "scan2",
                        "tenant": "acme",
                        "password_hash": hash_password("pw-2", rounds=4),
                    },
                ],
                "watch": [{"path": str(hot), "tenant": "acme", "failed": str(tmp_path / "failed")}],
            },
        )
        os.kill(serve.proc.pid, signal.SIGHUP)
        wait_until(lambda: serve.events("daemon.reloaded"), timeout=30)
        resume.set()
        uploader.join(60)
        assert not errors, errors

        sftp_upload(port, "scan2", "pw-2", "Second.pdf", pdf_bytes("second account", seed=8))
        (hot / "Dropped.pdf").write_bytes(pdf_bytes("new hot folder", seed=9))

        wait_until(lambda: len(_docs(db_url)) == 3, timeout=60)
    finally:
        resume.set()
        uploader.join(60)
        assert serve.wait() == 0
    docs = {d["original_filename"]: d for d in _docs(db_url)}
    assert docs["Long.pdf"]["sha256"] == hashlib.sha256(big).hexdigest()
    assert docs["Long.pdf"]["source"] == "sftp:scan1"
    assert docs["Second.pdf"]["source"] == "sftp:scan2"
    assert docs["Dropped.pdf"]["source"].startswith("watch:")
