"""``ingestd restore DIR``: a backup (``ops/backup.py``) put back onto an empty machine,
then checked (``verify`` of the archive, ``audit verify``); success only when both pass.

Order, and who does what:

1. as the caller (root): every file of the backup is checked against the manifest, and
   the target is checked: a config file that differs from the backup's, a state
   directory or local archive with anything in it, a configured database with tables
   in it are refused (exit 2) unless ``--force``; nothing is written before that;
2. as root: the config (and drop-ins) is put back with its mode and owners, the state
   directory and archive are made for the service user (``INGESTD_USER``, else the
   owner the backup recorded) and filled, every file given to that user;
3. as the service user (``service_user.become``): the dump is loaded with
   ``pg_restore`` into the embedded cluster (made fresh) or the configured database;
   archive files the dump does not name (archived after the dump was taken) are moved
   aside to ``<state_dir>/restored-after-dump/``, kept for the operator to re-ingest;
4. ``ingestd verify`` and ``ingestd audit verify`` run; their exit code ends the restore
   when one of them fails (``RestoreCheckFailed`` names it).
"""

from __future__ import annotations

import contextlib
import functools
import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingestd import durable
from ingestd.config.load import load_config
from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.errors import ExitCode, IngestdError, UsageError
from ingestd.ops import backup, service_user
from ingestd.ops.backup import (
    ARCHIVE,
    CONFIG,
    DUMP,
    MANIFEST,
    STATE,
    conninfo_of,
    pg_program,
    sha256_file,
    walk_files,
    within,
)

AFTER_DUMP = "restored-after-dump"
DUMP_COPY = ".restore-database.dump"


class BackupDamaged(IngestdError):
    """The backup does not match its manifest (a file missing, altered or added without
    it): nothing was restored."""

    exit_code = ExitCode.archive_inconsistent


class RestoreCheckFailed(IngestdError):
    """The restored appliance did not pass a check; the exit code is the check's."""

    def __init__(self, check: str, code: int, output: str) -> None:
        super().__init__(f"restore: `ingestd {check}` failed (exit {code}): {output}")
        self.check = check
        self.exit_code = (
            ExitCode(code) if code in ExitCode._value2member_map_ else ExitCode.internal
        )


@dataclass(slots=True)
class RestoreReport:
    source: Path
    config_path: Path
    user: str | None = None
    state_files: int = 0
    archive_files: int = 0
    after_dump: list[str] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)


def read_manifest(source: Path) -> dict[str, Any]:
    """The manifest, after every file it names was found with its size and SHA-256 and
    no file is there that it does not name."""
    try:
        manifest: dict[str, Any] = json.loads((source / MANIFEST).read_text())
    except FileNotFoundError:
        raise BackupDamaged(
            f"{source}: no {MANIFEST}: not a backup, or an unfinished one"
        ) from None
    except (OSError, ValueError) as exc:
        raise BackupDamaged(f"{source / MANIFEST}: unreadable: {exc}") from None
    if manifest.get("format") != backup.FORMAT:
        raise BackupDamaged(f"{source}: backup format {manifest.get('format')!r} is not known")
    files: dict[str, dict[str, Any]] = manifest.get("files") or {}
    problems = []
    for rel, want in files.items():
        p = source / rel
        if not p.is_file():
            problems.append(f"{rel}: missing")
        elif p.stat().st_size != want["size"] or sha256_file(p) != want["sha256"]:
            problems.append(f"{rel}: altered (SHA-256 or size differs)")
    extra = sorted(str(f.relative_to(source)) for f in walk_files(source) if f.name != MANIFEST)
    problems += [f"{rel}: not in the manifest" for rel in extra if rel not in files]
    if problems:
        shown = "; ".join(problems[:10]) + (
            f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
        )
        raise BackupDamaged(
            f"{source}: the backup does not match its manifest: {shown}; nothing was restored"
        )
    return manifest


def _not_empty(path: Path) -> bool:
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        return any(e.name != "lost+found" for e in os.scandir(path))
    return False


def target_config(source: Path, config_path: Path) -> tuple[Config, bool]:
    """The config the restore works with: the one at ``config_path`` if it is there
    (True: it differs from the backup's), else the backup's."""
    ours = source / CONFIG / "ingestd.toml"
    if config_path.exists():
        differs = config_path.read_bytes() != ours.read_bytes()
        return load_config(config_path), differs
    return load_config(ours), False


def refusals(config: Config, config_path: Path, differs: bool, tables: int | None) -> list[str]:
    """Why the target is not empty (what ``--force`` would overwrite)."""
    found = []
    if differs:
        found.append(f"the config {config_path} differs from the backup's")
    if _not_empty(config.paths.state_dir):
        found.append(f"the state directory {config.paths.state_dir} is not empty")
    if config.archive.backend == "local" and _not_empty(config.paths.archive_dir):
        found.append(f"the archive {config.paths.archive_dir} is not empty")
    if tables:
        found.append(f"the database holds {tables} tables")
    return found


def service_target(manifest: dict[str, Any], config: Config) -> service_user.Target | None:
    """Whom the restored appliance belongs to (root running restore becomes it)."""
    if os.geteuid() != 0:
        return None
    to = service_user.target(config.paths.state_dir)
    if to is not None or os.environ.get(service_user.ENV_USER):
        return to
    name = manifest.get("state_owner")
    if not name or name == "root":
        return None
    try:
        user = pwd.getpwnam(str(name))
    except KeyError:
        raise service_user.NoSuchUser(
            f"the backup's state directory belonged to {name}, which is no user on this host: "
            f"create it (the package does: apt install ingestd) or set {service_user.ENV_USER}"
        ) from None
    return service_user.Target(user, f"owner of {config.paths.state_dir} in the backup")


def database_tables(config: Config, to: service_user.Target | None) -> int | None:
    """Tables in a configured database (None: embedded, made fresh with the state
    directory); asked as the service user (a child process that becomes it), since a
    ``peer`` login knows that user and not root."""
    if not config.database.url:
        return None
    if to is None:
        return _count_tables(config.database.url)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the user, ask, answer on the pipe
        os.close(read)
        code = 0
        try:
            os.setgid(to.user.pw_gid)
            os.initgroups(to.user.pw_name, to.user.pw_gid)
            os.setuid(to.user.pw_uid)
            answer: dict[str, Any] = {"n": _count_tables(config.database.url)}
        except IngestdError as exc:
            answer = {"error": exc.message, "code": int(exc.exit_code)}
        except BaseException as exc:
            answer = {"error": str(exc), "code": int(ExitCode.internal)}
        with contextlib.suppress(OSError):
            os.write(write, json.dumps(answer).encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    answer = json.loads(data or b'{"error": "the check ended without an answer", "code": 15}')
    if "error" in answer:
        err = IngestdError(f"the database {config.database.url!r}: {answer['error']}")
        err.exit_code = ExitCode(answer["code"])
        raise err
    return int(answer["n"])


def _count_tables(url: str) -> int:
    db = Database(url, min_size=1, max_size=1, connect_timeout=10, name="ingestd-restore")
    with db.open(), db.transaction() as tx:
        row = tx.one("restore_tables_in_use")
    return int(row["n"]) if row else 0


def put_config(source: Path, manifest: dict[str, Any], config_path: Path) -> None:
    """The backup's config files at ``config_path`` (and its conf.d/), modes and owners
    as they were where those owners exist here."""
    for item in manifest.get("config") or []:
        dest = config_path if item["name"] == "ingestd.toml" else config_path.parent / item["name"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        durable.copy_whole(
            source / CONFIG / item["name"], dest, prepare=functools.partial(_own, item=item)
        )


def _own(path: Path, item: dict[str, Any]) -> None:
    """A restored config file gets the mode, and as root the owner and group, it had."""
    os.chmod(path, int(item["mode"]))
    if os.geteuid() == 0:
        uid = _id(pwd.getpwnam, item.get("owner"), 0)
        gid = _id(grp.getgrnam, item.get("group"), 0)
        os.chown(path, uid, gid)


def _id(lookup: Any, name: str | None, default: int) -> int:
    if not name:
        return default
    try:
        entry = lookup(name)
    except KeyError:
        return default
    return int(entry[2])


def put_files(
    source: Path, config: Config, to: service_user.Target | None, report: RestoreReport
) -> None:
    """State, derived data, a local archive and the dump (for the service user to read)
    into place, every file and directory made given to the service user."""
    owner = (to.user.pw_uid, to.user.pw_gid) if to else None
    paths = config.paths
    _make_dir(paths.state_dir, 0o750, owner)
    report.state_files = _put_tree(source / STATE, paths.state_dir, owner, archive=False)
    if (source / "derived").is_dir():
        _make_dir(paths.derived_dir, 0o750, owner)
        report.state_files += _put_tree(source / "derived", paths.derived_dir, owner, archive=False)
    if config.archive.backend == "local":
        _make_dir(paths.archive_dir, 0o750, owner)
        report.archive_files = _put_tree(source / ARCHIVE, paths.archive_dir, owner, archive=True)
    dump = paths.state_dir / DUMP_COPY
    dump.unlink(missing_ok=True)
    shutil.copyfile(source / DUMP, dump)
    os.chmod(dump, 0o600)
    if owner:
        os.chown(dump, *owner)


def _make_dir(path: Path, mode: int, owner: tuple[int, int] | None) -> None:
    if not path.exists():
        path.mkdir(mode=mode, parents=True)
        if owner:
            os.chown(path, *owner)


def _put_tree(src: Path, dest: Path, owner: tuple[int, int] | None, *, archive: bool) -> int:
    """Copy (archive: hard-link where possible) ``src`` under ``dest``. An archive file
    already there is never rewritten: the same bytes are fine, others are a refusal."""
    n = 0
    if not src.is_dir():
        return 0
    for f in walk_files(src):
        out = dest / f.relative_to(src)
        for d in reversed([p for p in out.parents if within(p, dest) and p != dest]):
            _make_dir(d, 0o750 if archive else 0o700, owner)
        if archive and out.exists():
            if sha256_file(out) != sha256_file(f):
                raise BackupDamaged(
                    f"{out} is in the archive with other bytes than the backup's: an archived "
                    "file is never rewritten; nothing of it was changed"
                )
            continue
        durable.copy_whole(f, out, prepare=(lambda tmp: os.chown(tmp, *owner)) if owner else None)
        n += 1
    return n


def load_dump(config: Config, *, force: bool) -> None:
    """``pg_restore`` of the copied dump into the database (as the service user)."""
    from ingestd.daemon.wiring import open_database

    dump = config.paths.state_dir / DUMP_COPY
    with open_database(config, migrate_schema=False, name="ingestd-restore"):
        argv = [pg_program("pg_restore"), "--no-owner", "--no-privileges", "--exit-on-error"]
        if force:
            argv += ["--clean", "--if-exists"]
        backup.run_program(
            [*argv, "--no-password", f"--dbname={conninfo_of(config)}", str(dump)],
            "loading the database dump",
        )
    dump.unlink()


def set_aside_after_dump(config: Config, report: RestoreReport) -> None:
    """Archive files no restored row names (archived after the dump was taken) moved to
    ``<state_dir>/restored-after-dump/`` with their archive path: kept, not orphans."""
    from ingestd.daemon.wiring import open_database

    if config.archive.backend != "local":
        return
    with open_database(config, name="ingestd-restore") as db, db.transaction() as tx:
        named = {str(r["archive_path"]) for r in tx.all("backup_archive_paths")}
    root = config.paths.archive_dir
    for f in list(walk_files(root)):
        rel = str(f.relative_to(root))
        if rel in named:
            continue
        out = config.paths.state_dir / AFTER_DUMP / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(f, out)
        report.after_dump.append(rel)


def run_checks(config_path: Path, report: RestoreReport) -> None:
    """``ingestd verify`` and ``ingestd audit verify`` on the restored appliance."""
    for check in (["verify"], ["audit", "verify"]):
        done = subprocess.run(
            [sys.executable, "-m", "ingestd.cli", *check, "--config", str(config_path), "--json"],
            capture_output=True,
            text=True,
            check=False,
            timeout=6 * 3600,
        )
        name = " ".join(check)
        try:
            out = json.loads(done.stdout)
        except ValueError:
            out = {"output": done.stdout[-2000:]}
        report.checks[name] = {"exit": done.returncode, **out}
        if done.returncode != 0:
            why = "; ".join(str(p.get("detail") or p) for p in (out.get("problems") or [])[:5]) or (
                done.stderr.strip()[-1000:] or "no output"
            )
            raise RestoreCheckFailed(name, done.returncode, why)


def restore(source: Path, config_path: Path, *, force: bool) -> RestoreReport:
    """The whole restore (see the module doc); the caller may be root."""
    source = source.absolute()
    manifest = read_manifest(source)
    config, differs = target_config(source, config_path)
    to = service_target(manifest, config)
    found = refusals(config, config_path, differs, database_tables(config, to))
    if found and not force:
        raise UsageError(
            "restore refused: " + "; ".join(found) + ": restore onto an empty machine, or "
            "add --force to overwrite; nothing was done"
        )
    report = RestoreReport(source, config_path, user=to.user.pw_name if to else None)
    put_config(source, manifest, config_path)
    config = load_config(config_path)
    put_files(source, config, to, report)
    if to is not None:
        service_user.become(to)
    load_dump(config, force=force)
    set_aside_after_dump(config, report)
    run_checks(config_path, report)
    return report
