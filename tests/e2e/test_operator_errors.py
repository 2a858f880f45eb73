"""What an operator sees when something is set up wrong, from real `ingestd` processes.

A permanent misconfiguration is named at once with its fix and the config exit code (3),
an unusable state directory with exit 10, an outage stays "database unavailable" (4)
with libpq's cause; every line on stderr is JSON off a TTY; a closed pipe ends a command
quietly; check-config finds what the runtime would find on this machine.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ingestd.passwords import hash_password
from tests.conftest import Env, PgServer, read_events, wait_until, write_config
from tests.fixtures.service_user import as_root_prefix

NOBODY = 65534
CLI = [sys.executable, "-m", "ingestd.cli"]


def _run(*args: str, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    # These configs use the default state directory, /var/lib/ingestd, which the package
    # tests may have given to the `ingestd` user meanwhile: stay root (INGESTD_USER) so
    # that what is checked is the message, not the machine (tests that switch set it).
    env = kwargs.pop("env", None) or dict(os.environ)
    env.setdefault("INGESTD_USER", "root")
    kwargs["env"] = env
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def _json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` as JSON (fails on the first line that is not)."""
    return [json.loads(line) for line in text.splitlines()]


def _the_error(stderr: str) -> str:
    """The one line a failed command writes: a cli.error event."""
    [line] = _json_lines(stderr)
    assert line["event"] == "cli.error" and line["level"] == "error"
    return str(line["error"])


def _config(path: Path, url: str, connect_timeout: float = 30, **sections: Any) -> Path:
    root = path.parent
    write_config(
        path,
        {
            "database": {"url": url, "connect_timeout": connect_timeout},
            "paths": {"state_dir": str(root / "state"), "spool": str(root / "spool")},
            "log": {"format": "json"},
            "metrics": {"enabled": False},
            **sections,
        },
    )
    path.chmod(0o644)
    return path


def _without_user(conninfo: str) -> str:
    params = conninfo_to_dict(conninfo)
    params.pop("user", None)
    return make_conninfo(**params)


# -- the database ----------------------------------------------------------------------------
@pytest.mark.skipif(os.geteuid() != 0, reason="libpq's default role is the login name: root")
def test_root_without_a_role_exits_3_with_the_service_user_hint_at_once(
    pg_server: PgServer, template_db: str, tmp_path: Path
) -> None:
    """As root, no user= in the URL: exit 3 naming role "root" and how to run as the service user,
    long before the pool's 30 s connect_timeout would have run out."""
    cfg = _config(tmp_path / "c.toml", _without_user(pg_server.conninfo(template_db)))
    t0 = time.monotonic()
    proc = _run("jobs", "list", "--config", str(cfg))
    assert time.monotonic() - t0 < 15
    assert proc.returncode == 3, proc.stderr
    error = _the_error(proc.stderr)
    assert 'role "root" does not exist' in error
    assert "INGESTD_USER=ingestd ingestd" in error


def test_a_wrong_database_name_exits_3_with_createdb(pg_server: PgServer, tmp_path: Path) -> None:
    """A database that does not exist: exit 3 with the createdb command, not "unavailable"."""
    cfg = _config(tmp_path / "c.toml", pg_server.conninfo("nosuchdb"))
    proc = _run("status", "--config", str(cfg))
    assert proc.returncode == 3, proc.stderr
    error = _the_error(proc.stderr)
    assert 'database "nosuchdb" does not exist' in error and "createdb -O" in error


def test_no_schema_to_work_in_exits_3(
    pg_server: PgServer, template_db: str, tmp_path: Path
) -> None:
    """A search_path without any schema: exit 3 "database schema missing", pointing at it."""
    url = make_conninfo(pg_server.conninfo(template_db), options="-csearch_path=nope")
    proc = _run("jobs", "list", "--config", str(_config(tmp_path / "c.toml", url)))
    assert proc.returncode == 3, proc.stderr
    error = _the_error(proc.stderr)
    assert error.startswith("database schema missing:") and "search_path" in error


def test_an_unreachable_port_is_unavailable_with_its_cause(
    pg_server: PgServer, template_db: str, tmp_path: Path
) -> None:
    """Nothing listens there: exit 4, "database unavailable" with libpq's cause; every
    line on stderr parses as JSON."""
    url = make_conninfo(pg_server.conninfo(template_db), host=str(tmp_path), port="1")
    proc = _run("jobs", "list", "--config", str(_config(tmp_path / "c.toml", url)))
    assert proc.returncode == 4, proc.stderr
    error = _the_error(proc.stderr)
    assert error.startswith("database unavailable: connection to server on socket")
    assert "No such file or directory" in error and "couldn't get a connection" not in error


def test_serve_and_worker_refused_by_the_database_exit_3_in_one_line(
    pg_server: PgServer, template_db: str, tmp_path: Path
) -> None:
    """`ingestd serve` and `ingestd worker` whose role does not exist stop at start with
    exit 3 (no restart under systemd) and one JSON line naming the role."""
    url = make_conninfo(pg_server.conninfo(template_db), user="nosuchrole")
    cfg = _config(tmp_path / "c.toml", url)
    for command in (["serve"], ["worker", "--drain"]):
        proc = _run(*command, "--config", str(cfg), timeout=60)
        assert proc.returncode == 3, (command, proc.stdout, proc.stderr)
        assert 'role "nosuchrole" does not exist' in _the_error(proc.stdout + proc.stderr)


def test_serve_with_the_database_down_logs_json_only(tmp_path: Path) -> None:
    """The daemon comes up with Postgres down; psycopg_pool's multi-line warnings arrive
    as JSON lines like ours (message in `event`, `logger` psycopg.pool)."""
    cfg = _config(tmp_path / "c.toml", f"host={tmp_path} port=1 dbname=ingestd user=ingestd")
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [*CLI, "serve", "--config", str(cfg)], stdout=out, stderr=subprocess.STDOUT
        )
        try:
            wait_until(lambda: read_events(log_path, "daemon.ready"), timeout=60)
            wait_until(
                lambda: any(e.get("logger") == "psycopg.pool" for e in read_events(log_path)),
                timeout=60,
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
    lines = _json_lines(log_path.read_text())
    pool = [e for e in lines if e.get("logger") == "psycopg.pool"]
    assert pool[0]["level"] == "warning" and "No such file or directory" in pool[0]["event"]


# -- check-config ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "postgresql://ingestd:s3cr/t@db.example/ingestd",
        "postgresql://ingestd@db.example/ingestd?password=s3cr3t",
        "host=db.example dbname=ingestd password = 's3cr3t x'",
    ],
)
def test_check_config_refuses_a_password_in_database_url(tmp_path: Path, url: str) -> None:
    """A password in database.url, as user info with a "/", a query parameter or a
    keyword: check-config exits 3 and never prints the password."""
    cfg = _config(tmp_path / "c.toml", url)
    proc = _run("check-config", str(cfg))
    assert proc.returncode == 3
    assert "database.url: must not contain a password" in proc.stdout
    assert "s3cr" not in proc.stdout + proc.stderr


def test_check_config_refuses_true_as_a_file_size(tmp_path: Path) -> None:
    """`max_file_size = true`: check-config exits 3 instead of allowing 1-byte files."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("[intake]\nmax_file_size = true\n")
    proc = _run("check-config", str(cfg))
    assert proc.returncode == 3
    assert (
        "intake.max_file_size: must be a size (e.g. 512MiB) or a number of bytes, "
        "not true/false (got True)"
    ) in proc.stdout


def _webhook_config(root: Path, hook: dict[str, str], *, in_rules_file: bool = False) -> Path:
    workflow = {
        "tenant": "acme",
        "name": "erp",
        "then": {"webhook": {"url": "https://erp.example/hook", **hook}},
    }
    cfg = root / "c.toml"
    paths = {"paths": {"state_dir": str(root / "state"), "spool": str(root / "spool")}}
    if in_rules_file:
        write_config(root / "rules.toml", {"workflows": [workflow]})
        write_config(cfg, {**paths, "analysis": {"rules_files": ["rules.toml"]}})
    else:
        write_config(cfg, {**paths, "workflows": [workflow]})
    return cfg


def test_check_config_reads_webhook_secret_files_as_the_worker_will(tmp_path: Path) -> None:
    """A webhook secret file that is missing, open to others (0644) or empty, in the config
    or in a rules file: check-config exits 3 with the key path; a 0600 one is OK."""
    secret = tmp_path / "hook.secret"
    cfg = _webhook_config(tmp_path, {"secret_file": str(secret)})
    missing = _run("check-config", str(cfg))
    assert missing.returncode == 3
    assert f"workflows[0].then.webhook.secret_file: {secret}: no such file" in missing.stdout
    secret.write_text("s3cr3t\n")
    secret.chmod(0o644)
    for config in (
        cfg,
        _webhook_config(tmp_path, {"secret_file": str(secret)}, in_rules_file=True),
    ):
        loose = _run("check-config", str(config))
        assert loose.returncode == 3
        assert f"workflows[0].then.webhook.secret_file: {secret}: mode 0644 is too open" in (
            loose.stdout
        )
    secret.chmod(0o600)
    assert _run("check-config", str(cfg)).returncode == 0
    secret.write_text("\n")
    empty = _run("check-config", str(cfg))
    assert empty.returncode == 3 and f"{secret}: is empty" in empty.stdout


def test_check_config_wants_the_secret_env_set(tmp_path: Path) -> None:
    """A webhook secret_env not set here: check-config exits 3 and says the unit must set it."""
    cfg = _webhook_config(tmp_path, {"secret_env": "INGESTD_TEST_HOOK_SECRET"})
    env = {k: v for k, v in os.environ.items() if k != "INGESTD_TEST_HOOK_SECRET"}
    unset = _run("check-config", str(cfg), env=env)
    assert unset.returncode == 3
    assert (
        "workflows[0].then.webhook.secret_env: environment variable "
        "INGESTD_TEST_HOOK_SECRET is not set" in unset.stdout
    )
    assert "systemctl edit ingestd-worker@.service" in unset.stdout
    set_ = _run("check-config", str(cfg), env={**env, "INGESTD_TEST_HOOK_SECRET": "k"})
    assert set_.returncode == 0, set_.stdout


# -- the state directory, as root and as the service user ----------------------------------------
@functools.cache
def _nobody_cannot_run_ingestd() -> str:
    """Why this machine cannot run the venv's ingestd as nobody ("" if it can)."""
    if os.geteuid() != 0:
        return "needs root to switch to nobody"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    probe = subprocess.run(
        [*_as_nobody(), sys.executable, "-c", "import ingestd.cli.main, psycopg"],
        capture_output=True,
        text=True,
        cwd="/",
        check=False,
    )
    return "" if probe.returncode == 0 else f"the venv is not usable by nobody: {probe.stderr}"


def _as_nobody() -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


@contextlib.contextmanager
def _serving_as_nobody(cfg: Path, root: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``ingestd serve`` as nobody, its output in ``root``/serve.log; on the way out it is
    stopped with SIGTERM and must exit 0."""
    log_path = root / "serve.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [*_as_nobody(), *CLI, "serve", "--config", str(cfg)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
        try:
            yield proc, log_path
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log_path.read_text()


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A directory nobody can enter (pytest's tmp_path is root's, mode 0700)."""
    base = Path(tempfile.mkdtemp(prefix="ingestd-test-nobody-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _nobody_install(root: Path, connect_timeout: float = 30) -> Path:
    """A config whose state dir and spool belong to nobody, with one SFTP account (so the
    daemon needs host keys) and a database that is down (the daemon comes up anyway)."""
    for d in ("state", "spool"):
        (root / d).mkdir()
        os.chown(root / d, NOBODY, NOBODY)
    account = {
        "username": "scan1",
        "tenant": "acme",
        "password_hash": hash_password("pw-1", rounds=4),
    }
    return _config(
        root / "c.toml",
        f"host={root} port=1 dbname=ingestd user=ingestd",
        connect_timeout,
        sftp={"listen": "127.0.0.1:0"},
        **{"sftp.accounts": [account]},
    )


def test_root_commands_leave_the_state_dir_to_its_owner(shared_root: Path) -> None:
    """`ingestd hostkeys` and `ingestd sftp unban` as root on a state dir owned by nobody:
    everything they made belongs to nobody, and `ingestd serve` as nobody then starts,
    loads the keys and applies the unban request."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    cfg = _nobody_install(shared_root, connect_timeout=2)  # the database is down: ready soon
    state = shared_root / "state"
    # As root, ingestd becomes nobody (the state dir's owner) first (issue 30); the
    # prefix lets nobody import from an interpreter under a directory closed to it.
    as_root = as_root_prefix(shared_root)
    for args in (["hostkeys"], ["sftp", "unban", "192.0.2.7"]):
        done = subprocess.run(
            [*as_root, *CLI, *args, "--config", str(cfg)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=shared_root,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "running as nobody" in done.stderr
    made = [p for p in state.rglob("*")]
    assert len(made) >= 5  # hostkeys/, its 2 keys, sftp-unban/, the request
    assert {(p.relative_to(state).as_posix(), p.lstat().st_uid) for p in made} == {
        (p.relative_to(state).as_posix(), NOBODY) for p in made
    }
    if why := _nobody_cannot_run_ingestd():
        pytest.skip(why)
    # The ban the request lifts, as the server (running as nobody) wrote it.
    bans = state / "sftp-bans.json"
    bans.write_text(
        json.dumps(
            {
                "version": 1,
                "ips": {
                    "192.0.2.7": {"until": time.time() + 3600, "bans": 1, "last_ban": time.time()}
                },
            }
        )
    )
    os.chown(bans, NOBODY, NOBODY)
    with _serving_as_nobody(cfg, shared_root) as (proc, log_path):
        wait_until(
            lambda: read_events(log_path, "daemon.ready") or proc.poll() is not None, timeout=60
        )
        assert proc.poll() is None, log_path.read_text()
        [unbanned] = read_events(log_path, "sftp.unbanned")
        assert unbanned["remote_ip"] == "192.0.2.7" and unbanned["was_banned"] is True
        assert not (state / "sftp-unban" / "192.0.2.7").exists()


def test_a_daemon_that_cannot_use_its_state_dir_exits_10_in_one_line(shared_root: Path) -> None:
    """Host keys dir owned by root (0700), daemon run as nobody: exit 10 with one JSON line
    naming the directory and the chown that fixes it; no traceback."""
    if why := _nobody_cannot_run_ingestd():
        pytest.skip(why)
    cfg = _nobody_install(shared_root)
    (shared_root / "state" / "hostkeys").mkdir(mode=0o700)  # as root: root's
    proc = subprocess.run(
        [*_as_nobody(), *CLI, "serve", "--config", str(cfg)],
        capture_output=True,
        text=True,
        cwd=shared_root,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 10, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    error = _the_error(proc.stdout + proc.stderr)
    assert f"{shared_root}/state/hostkeys: user nobody cannot read/write/enter it" in error
    assert "owner root:root, mode 0700" in error and "chown -R nobody:nogroup" in error


def test_a_hot_folder_the_daemon_may_not_list_is_reported_then_watched_once_fixed(
    shared_root: Path,
) -> None:
    """A hot folder of a group the daemon's user is not in (yet): `watch.folder_unreadable`
    names the folder's owner and mode, the user and groups the daemon runs as and the fix,
    once; fixed, it is watched (`watch.folder_back`) without a restart."""
    if why := _nobody_cannot_run_ingestd():
        pytest.skip(why)
    hot = shared_root / "hot"
    hot.mkdir(mode=0o770)  # root:root: closed to nobody
    hot.chmod(0o770)
    cfg = _nobody_install(shared_root, connect_timeout=2)  # the database is down: ready soon
    with open(cfg, "a") as f:
        f.write(f'\n[[watch]]\npath = "{hot}"\ntenant = "acme"\n')
    with _serving_as_nobody(cfg, shared_root) as (_, log_path):
        wait_until(lambda: read_events(log_path, "watch.folder_unreadable"), timeout=60)
        [line] = read_events(log_path, "watch.folder_unreadable")
        assert line["folder"] == str(hot) and line["tenant"] == "acme"
        assert line["cannot"] == ["read", "enter", "remove files from"]
        assert line["folder_owner"] == "root:root drwxrwx---"
        assert line["running_as"].startswith("nobody (groups ")
        assert "restarts" in line["fix"]
        assert read_events(log_path, "watch.added") == []
        hot.chmod(0o777)  # what a chgrp to the daemon's group does for it
        wait_until(lambda: read_events(log_path, "watch.folder_back"), timeout=60)
        assert len(read_events(log_path, "watch.folder_unreadable")) == 1  # once


def test_check_config_as_root_checks_the_service_user_can_read_secrets(shared_root: Path) -> None:
    """Root can read a 0600 root:root secret, the workers (the state dir's owner) cannot:
    check-config as root says so; root:<their group> 0640 is OK."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    (shared_root / "state").mkdir()
    os.chown(shared_root / "state", NOBODY, NOBODY)
    secret = shared_root / "hook.secret"
    secret.write_text("s3cr3t\n")
    secret.chmod(0o600)
    cfg = _webhook_config(shared_root, {"secret_file": str(secret)})
    proc = _run("check-config", str(cfg))
    assert proc.returncode == 3
    assert f"{secret}: the service user nobody (owner of paths.state_dir) cannot read it" in (
        proc.stdout
    )
    os.chown(secret, 0, NOBODY)
    secret.chmod(0o640)
    assert _run("check-config", str(cfg)).returncode == 0


# -- closed pipes --------------------------------------------------------------------------------
def test_a_closed_stdout_ends_a_command_quietly(env: Env) -> None:
    """`ingestd jobs list | head -1`, `ingestd status --json | head -c 10`: nothing on
    stderr; with the reader gone before the first write, exit 141 like SIGPIPE."""
    cfg = str(env.config_path)
    for pipeline in (
        f"jobs list --config {cfg} | head -1",
        f"status --json --config {cfg} | head -c 10",
    ):
        proc = subprocess.run(
            ["sh", "-c", f"{sys.executable} -m ingestd.cli {pipeline}"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.stderr == "", (pipeline, proc.stderr)
    reader_gone = subprocess.Popen(
        [*CLI, "jobs", "list", "--config", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert reader_gone.stdout is not None and reader_gone.stderr is not None
    reader_gone.stdout.close()
    stderr = reader_gone.stderr.read()
    assert reader_gone.wait(timeout=120) == 128 + signal.SIGPIPE
    assert stderr == b""


def test_ingest_as_root_leaves_archive_files_the_service_user_can_read(
    tmp_path: Path, db_url: str
) -> None:
    """Root running `ingestd ingest` as root (INGESTD_USER=root) on an archive owned by the
    service user: the month directories and the archived file belong to that user, who
    can read them."""
    import pwd

    from ingestd.db.database import Database
    from tests.conftest import run_cli
    from tests.fixtures.files import pdf_bytes

    nobody = pwd.getpwnam("nobody")
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, nobody.pw_uid, nobody.pw_gid)
    cfg = tmp_path / "ingestd.toml"
    write_config(
        cfg,
        {
            "database": {"url": db_url},
            "paths": {"state_dir": str(state), "spool": str(tmp_path / "spool")},
        },
    )
    env = Env(tmp_path, cfg, None, db_url)  # type: ignore[arg-type]
    with Database(db_url) as db, db.transaction() as tx:
        tx.one("tenant_insert", {"name": "acme", "status": "active"})
    src = tmp_path / "Rechnung.pdf"
    src.write_bytes(pdf_bytes(seed=808))
    # Root kept as root (INGESTD_USER=root; else it would become nobody, who cannot
    # reach this test's database): what it makes is still given to the owner.
    proc = run_cli(env, "ingest", "--tenant", "acme", str(src), extra_env={"INGESTD_USER": "root"})
    assert proc.returncode == 0, proc.stderr
    made = [p for p in (state / "archive").rglob("*")]
    assert made and all(p.stat().st_uid == nobody.pw_uid for p in made), [
        (str(p), p.stat().st_uid) for p in made
    ]
