"""`ingestd account add|remove` and `ingestd watch add|remove` as real processes: one
conf.d drop-in each (0640, atomic), checked like check-config and undone when the check
fails, no plaintext password anywhere, and a running `ingestd serve` reloaded."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import bcrypt

from ingestd.config.load import load_config
from ingestd.db.database import Database
from ingestd.errors import ExitCode
from tests.conftest import read_events, wait_until, write_config
from tests.fixtures.files import pdf_bytes, write

PASSWORD = "scanner-pw-4711"


def _config(tmp_path: Path, db_url: str = "postgresql:///unused") -> Path:
    cfg = tmp_path / "etc" / "ingestd.toml"
    cfg.parent.mkdir()
    write_config(
        cfg,
        {
            "database": {"url": db_url, "connect_timeout": 2},
            "paths": {
                "state_dir": str(tmp_path / "state"),
                "archive": str(tmp_path / "archive"),
                "derived": str(tmp_path / "derived"),
                "spool": str(tmp_path / "spool"),
            },
            "log": {"format": "json", "level": "info"},
            "hotfolders": {"stable_seconds": 0.5, "retry_max_delay": 3, "workers": 2},
        },
    )
    return cfg


def _ingestd(cfg: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ingestd.cli", *args, "--config", str(cfg)],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
    )


def _dropins(cfg: Path) -> dict[str, str]:
    directory = cfg.parent / "conf.d"
    return {p.name: p.read_text() for p in directory.iterdir()} if directory.is_dir() else {}


def test_account_add_writes_a_checked_dropin_without_the_password(tmp_path: Path) -> None:
    """`account add --password-stdin` writes conf.d/account-NAME.toml (mode 0640) holding a
    bcrypt hash of the password read from stdin, never the password; the account is in
    the loaded config; with no daemon it says the change takes effect at start."""
    cfg = _config(tmp_path)
    main_before = cfg.read_bytes()
    result = _ingestd(
        cfg,
        "account",
        "add",
        "scan-2og",
        "--tenant",
        "acme",
        "--password-stdin",
        "--rounds",
        "4",
        stdin=PASSWORD + "\n",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    dropin = cfg.parent / "conf.d" / "account-scan-2og.toml"
    assert f"account scan-2og (tenant acme) added: {dropin}" in result.stdout
    assert "not running; the change takes effect at its start" in result.stdout
    assert stat.S_IMODE(dropin.stat().st_mode) == 0o640
    assert list(_dropins(cfg)) == ["account-scan-2og.toml"]  # no temporary file left
    assert PASSWORD not in dropin.read_text() and PASSWORD not in result.stdout
    assert cfg.read_bytes() == main_before
    [account] = load_config(cfg).sftp.accounts
    assert (account.username, account.tenant) == ("scan-2og", "acme")
    assert account.password_hash is not None
    assert bcrypt.checkpw(PASSWORD.encode(), account.password_hash.encode())
    check = _ingestd(cfg, "check-config")
    assert check.returncode == 0 and f"{cfg}: OK" in check.stdout

    removed = _ingestd(cfg, "account", "remove", "scan-2og")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert not dropin.exists() and load_config(cfg).sftp.accounts == []
    again = _ingestd(cfg, "account", "remove", "scan-2og")
    assert again.returncode == ExitCode.not_found


def test_account_add_with_key_and_refusals(tmp_path: Path) -> None:
    """`--key FILE` puts the file's public keys in the drop-in; an existing name, a bad
    name, a too-short password and no password at all without a terminal are refused with
    their reason and leave conf.d/ as it was."""
    cfg = _config(tmp_path)
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq3Mo4Z0bC1W3xOa1E0mJc5Qm3FQmC9ycFqJ1rQd2Zr scan"
    key_file = tmp_path / "scanner.pub"
    key_file.write_text(f"# the scanner's key\n{key}\n")
    result = _ingestd(cfg, "account", "add", "keyed", "--tenant", "acme", "--key", str(key_file))
    assert result.returncode == 0, result.stdout + result.stderr
    [account] = load_config(cfg).sftp.accounts
    assert account.authorized_keys == [key] and account.password_hash is None
    before = _dropins(cfg)

    exists = _ingestd(cfg, "account", "add", "keyed", "--tenant", "acme", "--key", str(key_file))
    assert exists.returncode == ExitCode.config_invalid
    assert "account keyed exists already" in exists.stderr
    bad_name = _ingestd(
        cfg, "account", "add", "../etc", "--tenant", "acme", "--password-stdin", stdin=PASSWORD
    )
    assert bad_name.returncode == ExitCode.usage and "is not an account name" in bad_name.stderr
    short = _ingestd(
        cfg, "account", "add", "short", "--tenant", "acme", "--password-stdin", stdin="abc\n"
    )
    assert short.returncode == ExitCode.usage and "too short" in short.stderr
    no_password = _ingestd(cfg, "account", "add", "nopw", "--tenant", "acme")
    assert no_password.returncode == ExitCode.usage
    assert "--password-stdin" in no_password.stderr
    assert _dropins(cfg) == before


def test_a_change_that_fails_check_config_is_undone(tmp_path: Path) -> None:
    """An account for a tenant name the schema refuses: exit 3 with the problem naming the
    drop-in, and the drop-in is removed again (conf.d/ and the config as before)."""
    cfg = _config(tmp_path)
    result = _ingestd(
        cfg,
        "account",
        "add",
        "scan1",
        "--tenant",
        "Not A Tenant",
        "--password-stdin",
        "--rounds",
        "4",
        stdin=PASSWORD + "\n",
    )
    assert result.returncode == ExitCode.config_invalid, result.stdout + result.stderr
    assert "the change was undone" in result.stderr
    assert "account-scan1.toml" in result.stderr and "sftp.accounts[0].tenant" in result.stderr
    assert _dropins(cfg) == {}
    assert load_config(cfg).sftp.accounts == []


def test_watch_add_and_remove(tmp_path: Path) -> None:
    """`watch add PATH --tenant T --tag X` writes conf.d/watch-<slug>.toml; a folder inside
    the archive is refused by the check and undone; `watch remove PATH` deletes it."""
    cfg = _config(tmp_path)
    folder = tmp_path / "hot" / "Buchhaltung"
    folder.mkdir(parents=True)
    result = _ingestd(
        cfg, "watch", "add", str(folder), "--tenant", "acme", "--tag", "Buchhaltung", "--tag", "x"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [name] = _dropins(cfg)
    assert name.startswith("watch-") and name.endswith("-hot-buchhaltung.toml")
    [watch] = load_config(cfg).watch
    assert (watch.path, watch.tenant, watch.tags) == (folder, "acme", ["Buchhaltung", "x"])
    twice = _ingestd(cfg, "watch", "add", str(folder), "--tenant", "acme")
    assert twice.returncode == ExitCode.config_invalid and "hot folder already" in twice.stderr

    inside = tmp_path / "archive" / "acme"
    inside.mkdir(parents=True)
    refused = _ingestd(cfg, "watch", "add", str(inside), "--tenant", "acme")
    assert refused.returncode == ExitCode.config_invalid, refused.stdout + refused.stderr
    assert "the change was undone" in refused.stderr
    assert list(_dropins(cfg)) == [name]

    removed = _ingestd(cfg, "watch", "remove", str(folder))
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert _dropins(cfg) == {} and load_config(cfg).watch == []


def _activate(db_url: str, *names: str) -> None:
    with Database(db_url) as db, db.transaction() as tx:
        for name in names:
            tx.one("tenant_insert", {"name": name, "status": "active"})


def _documents(db_url: str) -> list[dict[str, Any]]:
    with Database(db_url) as db, db.transaction() as tx:
        return list(tx.raw("SELECT original_filename AS name FROM documents ORDER BY id"))


def test_watch_add_reloads_the_running_daemon(tmp_path: Path, db_url: str) -> None:
    """With `ingestd serve` running, `watch add` signals it (its pid from the state
    directory) and the new folder is served without a restart; `watch remove` reloads it
    again and the folder is no longer served."""
    _activate(db_url, "acme")
    cfg = _config(tmp_path, db_url)
    folder = tmp_path / "hot-new"
    folder.mkdir()
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "ingestd.cli", "serve", "--config", str(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: read_events(log_path, "daemon.ready"), timeout=60)
            result = _ingestd(cfg, "watch", "add", str(folder), "--tenant", "acme")
            assert result.returncode == 0, result.stdout + result.stderr
            # The command returns once the daemon finished the reload, not when it was asked.
            assert f"ingestd serve (pid {serve.pid}) reloaded its config" in result.stdout
            assert read_events(log_path, "daemon.reloaded")[-1]["hot_folders"] == 1
            write(folder / "Rechnung_dropin.pdf", pdf_bytes(seed=30))
            wait_until(lambda: len(_documents(db_url)) == 1, timeout=60, interval=0.2)

            removed = _ingestd(cfg, "watch", "remove", str(folder))
            assert removed.returncode == 0, removed.stdout + removed.stderr
            assert "reloaded its config" in removed.stdout
            assert len(read_events(log_path, "daemon.reloaded")) == 2
            assert read_events(log_path, "daemon.reloaded")[-1]["hot_folders"] == 0
        finally:
            if serve.poll() is None:
                serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=60) == 0
    assert os.path.exists(folder)
