"""Configured paths never alias (invariant 8) with a real database, real symlinks, real
bind mounts and a real `ingestd serve`: refused at load, start and reload, and intake
never removes a file from the archive whatever the config said."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from ingestd.config.load import load_config
from ingestd.daemon.state import read_state
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.errors import ConfigError, SourceProtected
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.sources.hotfolders import HotFolders
from tests.conftest import Env, read_events, run_cli, wait_until
from tests.fixtures.bindmounts import BindMounts, bind
from tests.fixtures.files import pdf_bytes, write

__all__ = ["bind"]  # the fixture, used by name

FAST = {"stable_seconds": 0.5, "rescan_interval": 60, "poll_interval": 0.3, "retry_max_delay": 2}


def _count(db: Database) -> int:
    with db.transaction() as tx:
        return int(tx.raw("SELECT count(*) AS n FROM documents")[0]["n"])


def _archived(env: Env) -> dict[Path, str]:
    """Every file in the archive with its SHA-256."""
    root = env.config.paths.archive_dir
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


def _ingest_some(env: Env, db: Database, n: int = 2) -> dict[Path, str]:
    inbox = env.root / "inbox"
    intake = make_intake(env.config, db)
    for i in range(n):
        res = intake.ingest(
            IntakeItem(path=write(inbox / f"s{i}.pdf", pdf_bytes(seed=i)), tenant="acme")
        )
        assert res.outcome is Outcome.ingested
    return _archived(env)


# -- at load ------------------------------------------------------------------------------
def test_load_config_refuses_a_hot_folder_symlinked_into_the_archive(
    make_env: Any, tmp_path: Path
) -> None:
    """load_config (check-config, start, reload) raises ConfigError listing the alias."""
    (tmp_path / "archive" / "acme").mkdir(parents=True)
    link = tmp_path / "hot"
    link.symlink_to(tmp_path / "archive" / "acme")
    env: Env = make_env(watch=[{"path": str(link), "tenant": "acme"}])  # text check passes
    with pytest.raises(ConfigError) as exc:
        load_config(env.config_path)
    assert exc.value.problems == [
        f"watch[0].path ({link}) is inside paths.archive ({tmp_path / 'archive'}) "
        f"through a symlink ({link} -> {tmp_path / 'archive' / 'acme'})"
    ]


@pytest.mark.parametrize("how", ["symlink", "bind mount"])
def test_check_config_exits_3_naming_both_keys(
    make_env: Any, tmp_path: Path, bind: BindMounts, how: str
) -> None:
    """`ingestd check-config` exits 3 and names watch[0].path, paths.archive and the alias."""
    (tmp_path / "archive" / "acme").mkdir(parents=True)
    hot = tmp_path / "hot"
    if how == "symlink":
        hot.symlink_to(tmp_path / "archive" / "acme")
    else:
        bind(tmp_path / "archive" / "acme", hot)
    env: Env = make_env(watch=[{"path": str(hot), "tenant": "acme"}])
    proc = run_cli(env, "check-config")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    archive = tmp_path / "archive"
    assert f"watch[0].path ({hot}) is inside paths.archive ({archive}) through a {how}" in (
        proc.stdout
    )


def test_serve_does_not_start_with_an_aliasing_config(make_env: Any, tmp_path: Path) -> None:
    """`ingestd serve` refuses to start (exit 3) when a hot folder resolves into the spool."""
    (tmp_path / "spool" / "in").mkdir(parents=True)
    link = tmp_path / "hot"
    link.symlink_to(tmp_path / "spool" / "in")
    env: Env = make_env(watch=[{"path": str(link), "tenant": "acme"}], metrics={"enabled": False})
    proc = run_cli(env, "serve")
    assert proc.returncode == 3
    assert "watch[0].path" in proc.stdout + proc.stderr
    assert "paths.spool" in proc.stdout + proc.stderr


# -- intake's own guard -------------------------------------------------------------------
def test_ingest_cli_never_deletes_an_archived_file(env: Env, db: Database, tenant: str) -> None:
    """`ingestd ingest` of a file inside the archive (a duplicate) refuses to remove it."""
    archived = _ingest_some(env, db, n=1)
    [path] = archived
    proc = run_cli(env, "ingest", "--tenant", tenant, str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "inside paths.archive" in proc.stdout
    assert _archived(env) == archived


def test_intake_refuses_a_source_behind_a_bind_mount(
    env: Env, db: Database, tenant: str, tmp_path: Path, bind: BindMounts
) -> None:
    """A file reached through a bind mount of the archive is refused, not unlinked."""
    archived = _ingest_some(env, db)
    view = bind(env.config.paths.archive_dir / tenant, tmp_path / "view")
    path = view / next(iter(archived)).relative_to(env.config.paths.archive_dir / tenant)
    with pytest.raises(SourceProtected, match=r"inside paths\.archive .* through a bind mount"):
        make_intake(env.config, db).ingest(IntakeItem(path=path, tenant=tenant))
    assert _archived(env) == archived
    assert _count(db) == 2


def test_owned_files_are_removed_only_from_the_spool(
    make_env: Any, db: Database, tenant: str, tmp_path: Path
) -> None:
    """With the spool inside state_dir, intake removes its own spool file, but an owned
    file elsewhere in state_dir stays (recorded, not removed)."""
    env: Env = make_env(paths={"spool": str(tmp_path / "state" / "spool")})
    intake = make_intake(env.config, db)
    spooled = write(tmp_path / "state" / "spool" / "queue" / "1.data", pdf_bytes(seed=1))
    res = intake.ingest(IntakeItem(path=spooled, tenant=tenant, filename="a.pdf", owned=True))
    assert res.outcome is Outcome.ingested and not spooled.exists()
    stray = write(tmp_path / "state" / "keys" / "2.data", pdf_bytes(seed=2))
    with pytest.raises(SourceProtected, match=r"inside paths\.state_dir"):
        intake.ingest(IntakeItem(path=stray, tenant=tenant, filename="b.pdf", owned=True))
    assert stray.exists()


@pytest.mark.parametrize("done", [False, True], ids=["delete", "move-to-done"])
def test_hot_folder_bind_mounted_onto_the_archive_is_never_emptied(
    make_env: Any, db: Database, tenant: str, tmp_path: Path, bind: BindMounts, done: bool
) -> None:
    """The archive mounted over a running hot folder: every archived file is refused once
    (watch.source_protected), none is removed, moved to done or retried."""
    hot = tmp_path / "hot"
    hot.mkdir()
    watch = {"path": str(hot), "tenant": tenant, "failed": str(tmp_path / "failed")}
    if done:
        watch["done"] = str(tmp_path / "done")
    env: Env = make_env(watch=[watch], hotfolders=FAST)
    archived = _ingest_some(env, db)
    own = Database(env.db_url, max_size=4).open()
    folders = HotFolders(env.config, make_intake(env.config, own))
    try:
        folders.start()
        bind(env.config.paths.archive_dir / tenant, hot)
        with capture_logs() as logs:
            [folder] = folders.folders()
            assert folders.scan_tree(folder, hot) == len(archived)

            def refused() -> set[str]:
                return {e["filename"] for e in logs if e["event"] == "watch.source_protected"}

            wait_until(lambda: refused() == {p.name for p in archived}, timeout=60)
            wait_until(folders.idle, timeout=60)  # a retry would keep it pending
        assert folders.snapshot() == {"pending": 0, "inflight": 0}
        assert not [e for e in logs if e["event"] in ("watch.retry", "watch.intake_error")]
        [entry] = [e for e in logs if e["event"] == "watch.source_protected"][:1]
        assert entry["log_level"] == "error" and entry["tenant"] == tenant
        assert entry["folder"] == str(hot) and "inside paths.archive" in entry["detail"]
        assert _archived(env) == archived
        assert not (tmp_path / "done").exists() or not any((tmp_path / "done").rglob("*.pdf"))
    finally:
        folders.stop()
        own.close()


# -- a real daemon ------------------------------------------------------------------------
class Daemon:
    """`ingestd serve` on ``env``'s config, its JSON log in serve.log."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.log_path = env.root / "serve.log"
        self.log = open(self.log_path, "w+b")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ingestd.cli", "serve", "--config", str(env.config_path)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: self.events("daemon.ready"), timeout=60)

    def events(self, name: str) -> list[dict[str, Any]]:
        return read_events(self.log_path, name)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.log.close()
        return code


@pytest.fixture
def serve(make_env: Any, tenant: str, tmp_path: Path) -> Iterator[tuple[Env, Daemon, Path]]:
    """A running daemon with one hot folder (rescanned every second) that took 3 files."""
    hot = tmp_path / "hot"
    hot.mkdir()
    env: Env = make_env(
        watch=[{"path": str(hot), "tenant": tenant}],
        hotfolders={"stable_seconds": 0.5, "rescan_interval": 1, "retry_max_delay": 3},
        metrics={"enabled": False},
    )
    daemon = Daemon(env)
    try:
        for i in range(3):
            write(hot / f"scan-{i}.pdf", pdf_bytes(seed=10 + i))
        wait_until(lambda: len(daemon.events("intake.ingested")) == 3, timeout=60)
        wait_until(lambda: not any(hot.iterdir()), timeout=60)
        yield env, daemon, hot
    finally:
        daemon.stop()


def _seen_by_rescans(daemon: Daemon, event: str, name: str, times: int = 2) -> bool:
    return sum(1 for e in daemon.events(event) if e.get("filename") == name) >= times


def test_daemon_with_hot_folder_swapped_for_a_symlink_into_the_archive(
    serve: tuple[Env, Daemon, Path], db: Database
) -> None:
    """A hot folder swapped for a symlink into the archive after start: the SIGHUP reload
    is refused (old config kept), rescans take nothing, no archived file is removed and
    `ingestd verify` exits 0."""
    env, daemon, hot = serve
    archive = env.config.paths.archive_dir
    archived = _archived(env)
    assert len(archived) == 3
    hot.rename(hot.with_name("hot.old"))
    hot.symlink_to(archive / "acme")
    stray = write(hot / "dropped-there.pdf", pdf_bytes(seed=99))  # lands in the archive
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: daemon.events("daemon.reload_failed"), timeout=60)
    [failed] = daemon.events("daemon.reload_failed")
    assert any(
        "watch[0].path" in p and "paths.archive" in p and "through a symlink" in p
        for p in failed["problems"]
    )
    wait_until(lambda: _seen_by_rescans(daemon, "watch.escape_refused", stray.name), timeout=60)
    assert not daemon.events("daemon.reloaded")
    assert len(daemon.events("intake.ingested")) == 3 and not daemon.events("intake.duplicate")
    assert _count(db) == 3
    assert {p: h for p, h in _archived(env).items() if p.name != stray.name} == archived
    # The operator undoes the swap and takes back the file dropped into the archive.
    stray.unlink()
    hot.unlink()
    hot.with_name("hot.old").rename(hot)
    assert daemon.stop() == 0
    proc = run_cli(env, "verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_daemon_with_archive_bind_mounted_over_a_hot_folder(
    serve: tuple[Env, Daemon, Path], db: Database, bind: BindMounts
) -> None:
    """The archive bind-mounted over a running hot folder: every archived file is refused
    by intake's guard before it is read (watch.source_protected once, no retry, not read
    again by later rescans), none is removed, `status` lists them, verify exits 0."""
    env, daemon, hot = serve
    archived = _archived(env)
    mount = bind(env.config.paths.archive_dir / "acme", hot)
    for path in archived:
        wait_until(
            lambda p=path: _seen_by_rescans(daemon, "watch.source_protected", p.name, 1), timeout=60
        )
    state_dir = env.config.paths.state_dir

    def kept() -> set[str]:
        stuck = ((read_state(state_dir) or {}).get("hotfolders") or {}).get("stuck") or []
        return {Path(s["path"]).name for s in stuck if s["action"] == "keep"}

    wait_until(lambda: kept() == {p.name for p in archived}, timeout=60)
    marked = time.time()
    # Several rescans later (one a second), still one line per file: not read again.
    wait_until(
        lambda: (read_state(state_dir) or {}).get("updated_epoch", 0) > marked + 3, timeout=60
    )
    for path in archived:
        assert _seen_by_rescans(daemon, "watch.source_protected", path.name, 1)
        assert not _seen_by_rescans(daemon, "watch.source_protected", path.name, 2)
    assert not daemon.events("intake.duplicate")
    assert not daemon.events("watch.retry")
    assert len(daemon.events("intake.ingested")) == 3 and _count(db) == 3
    assert _archived(env) == archived
    bind.unmount(mount)
    assert daemon.stop() == 0
    proc = run_cli(env, "verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
