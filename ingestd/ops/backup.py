"""``ingestd backup DIR``: everything a new machine needs, in one directory with a manifest.

What goes in (see docs/backup.md):

- ``database.dump``: ``pg_dump --format=custom`` of the configured or embedded database,
  with the server binaries the embedded cluster uses (``pgcluster.find_bindir``);
- ``state/``: the state directory (host keys, the sealing key and its ``.pub``, the seal
  witness, bans, the derived data kept there), without the embedded cluster's data
  directory (the dump holds the database) and without the archive when it lives inside;
- ``archive/``: a local archive as a tree of hard links (same file system) or copies;
  an S3 archive as ``archive-listing.json``: every object version with its size,
  checksum and Object Lock retention; the objects stay in their locked bucket;
- ``config/``: the config file and its ``conf.d/*.toml`` drop-ins, with their modes and
  owners;
- ``manifest.json`` (written last: a directory without it is no backup): the SHA-256
  and size of every file above, and where each part came from.

Consistency: the dump is taken first, with the seal lock held so that no seal or key
rotation falls between it and the copy of the state directory (the sealing key and the
witness then match the trail in the dump); the archive is copied after. The archive is
WORM: a file a dumped row names was archived before its row was committed (invariant 2)
and is never rewritten, so the later copy finds every one of them unchanged; files
archived after the dump are copied too (nothing is lost) and a restore sets them aside.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import grp
import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingestd import __version__, durable
from ingestd.archive import sealkey
from ingestd.archive.s3 import S3Archive
from ingestd.archive.store import is_temp
from ingestd.config.settings import Config
from ingestd.db.conninfo import redact_conninfo
from ingestd.db.database import Database
from ingestd.db.pgcluster import EmbeddedPostgres, find_bindir
from ingestd.db.schema import current_version
from ingestd.errors import ExitCode, IngestdError, UsageError

MANIFEST = "manifest.json"
FORMAT = 1
DUMP = "database.dump"
STATE = "state"
ARCHIVE = "archive"
LISTING = "archive-listing.json"
CONFIG = "config"
DROPINS = "conf.d"
# Never part of the state copy: the embedded cluster (the dump holds it) and what only
# lives while a process runs.
_STATE_SKIP = {"pgdata", "pgdata.log", "pgrun", ".pgcluster.lock", "s3-staging"}
CHUNK = 1 << 20


class BackupFailed(IngestdError):
    """A backup could not be made (a program failed, a disk is full): the directory holds
    no manifest, so it is never mistaken for a backup."""

    exit_code = ExitCode.external_program


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def conninfo_of(config: Config) -> str:
    """The database the config names: its URL, or the embedded cluster's socket."""
    return config.database.url or EmbeddedPostgres(config.paths.pgdata).conninfo


def pg_program(name: str) -> str:
    return str(find_bindir() / name)


def run_program(argv: list[str], what: str, *, timeout: float = 6 * 3600) -> None:
    """Run a PostgreSQL client program; BackupFailed with its last words if it fails."""
    try:
        subprocess.run(
            argv,
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "LC_ALL": "C.UTF-8"},
        )
    except subprocess.CalledProcessError as exc:
        raise BackupFailed(
            f"{what}: {Path(argv[0]).name} failed ({exc.returncode}): {exc.stderr.strip()[-2000:]}"
        ) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackupFailed(f"{what}: {Path(argv[0]).name}: {exc}") from None


def user_of(uid: int) -> str | None:
    with contextlib.suppress(KeyError):
        return pwd.getpwuid(uid).pw_name
    return None


def group_of(gid: int) -> str | None:
    with contextlib.suppress(KeyError):
        return grp.getgrgid(gid).gr_name
    return None


def within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def config_files(config_path: Path) -> list[tuple[Path, str]]:
    """The config file and its drop-ins beside it, each with its name in the backup."""
    files = [(config_path, "ingestd.toml")]
    dropins = config_path.parent / DROPINS
    if dropins.is_dir():
        files += [(f, f"{DROPINS}/{f.name}") for f in sorted(dropins.glob("*.toml"))]
    return files


def walk_files(root: Path) -> Iterator[Path]:
    """Every regular file under ``root``, in a stable order (links are not followed)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if stat.S_ISREG(os.lstat(p).st_mode):
                yield p


@dataclass(slots=True)
class BackupReport:
    target: Path
    database_bytes: int = 0
    archive_files: int = 0
    archive_linked: int = 0
    archive_objects: int = 0
    state_files: int = 0
    config_files: int = 0
    manifest: dict[str, Any] = field(default_factory=dict)


def check_target(target: Path) -> None:
    """DIR must be new or empty: a backup never mixes with another."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target} is not an empty directory: give a new one; nothing was done")


def make_backup(config: Config, config_path: Path, db: Database, target: Path) -> BackupReport:
    """Write the backup of ``config``'s appliance into ``target`` (new or empty)."""
    check_target(target)
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    report = BackupReport(target)
    paths = config.paths
    schema = current_version(db)
    # Dump and state under the seal lock: no seal and no key rotation in between.
    with sealkey.seal_lock(db):
        dump = target / DUMP
        dump_argv = [pg_program("pg_dump"), "--format=custom", f"--file={dump}"]
        run_program([*dump_argv, "--no-password", f"--dbname={conninfo_of(config)}"], "the dump")
        report.database_bytes = dump.stat().st_size
        skip = {paths.pgdata, paths.archive_dir, paths.state_dir / "pgrun"}
        report.state_files = _copy_tree(paths.state_dir, target / STATE, skip=skip)
    if not within(paths.derived_dir, paths.state_dir) and paths.derived_dir.is_dir():
        report.state_files += _copy_tree(paths.derived_dir, target / "derived", skip=set())
    archive: dict[str, Any]
    if config.archive.backend == "s3" and config.archive.s3 is not None:
        from ingestd.archive.backends import make_archive

        store = make_archive(config)
        assert isinstance(store, S3Archive)
        listing = s3_listing(store)
        (target / LISTING).write_text(json.dumps(listing, indent=1, default=str) + "\n")
        report.archive_objects = len(listing["versions"])
        archive = {"backend": "s3", "bucket": store.bucket, "prefix": store.prefix}
    else:
        report.archive_files, report.archive_linked = _link_archive(
            paths.archive_dir, target / ARCHIVE
        )
        archive = {"backend": "local", "path": str(paths.archive_dir)}
    configs = []
    for src, name in config_files(config_path):
        dest = target / CONFIG / name
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        st = src.stat()
        configs.append(
            {
                "name": name,
                "path": str(src),
                "mode": stat.S_IMODE(st.st_mode),
                "owner": user_of(st.st_uid),
                "group": group_of(st.st_gid),
            }
        )
    report.config_files = len(configs)
    try:
        state_owner = user_of(paths.state_dir.stat().st_uid)
    except FileNotFoundError:  # nothing made it yet (no key, no host keys)
        state_owner = None
    manifest = {
        "format": FORMAT,
        "ingestd": __version__,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "schema_version": schema,
        "database": {
            "embedded": not config.database.url,
            "url": redact_conninfo(config.database.url) if config.database.url else None,
            "dump": DUMP,
        },
        "state_dir": str(paths.state_dir),
        "state_owner": state_owner,
        "archive": archive,
        "config": configs,
        "files": {
            str(f.relative_to(target)): {"sha256": sha256_file(f), "size": f.stat().st_size}
            for f in walk_files(target)
        },
    }
    # Last and durable: a manifest only once everything it names is there.
    durable.replace_whole(
        target / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode(), 0o640
    )
    report.manifest = manifest
    return report


def _copy_tree(src: Path, dest: Path, *, skip: set[Path]) -> int:
    """Copy the regular files under ``src`` (modes kept), leaving out the ``skip``
    directories and the names in _STATE_SKIP at its top; the number copied."""
    n = 0
    if not src.is_dir():
        return 0
    for dirpath, dirnames, filenames in os.walk(src):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames if here / d not in skip and not (here == src and d in _STATE_SKIP)
        )
        os.makedirs(dest / here.relative_to(src), mode=0o700, exist_ok=True)
        for name in sorted(filenames):
            p = here / name
            if (here == src and name in _STATE_SKIP) or not stat.S_ISREG(os.lstat(p).st_mode):
                continue  # sockets, links, the cluster's lock
            shutil.copy2(p, dest / p.relative_to(src), follow_symlinks=False)
            n += 1
    return n


def _link_archive(root: Path, dest: Path) -> tuple[int, int]:
    """Every archived file (not the temp files of intake at work) under ``dest``: a hard
    link where ``dest`` is on the same file system (cheap, and WORM files never change),
    else a copy. (files, of which linked)."""
    files = linked = 0
    for f in walk_files(root) if root.is_dir() else iter(()):
        rel = f.relative_to(root)
        if is_temp(str(rel)):
            continue
        out = dest / rel
        out.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            os.link(f, out)
            linked += 1
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
            shutil.copy2(f, out)
        files += 1
    return files, linked


def s3_listing(store: S3Archive) -> dict[str, Any]:
    """Every version of every object under the archive's prefix, with its checksum and
    Object Lock as HEAD reports them: the proof of what the bucket held."""
    client = store.client
    versions: list[dict[str, Any]] = []
    pages = client.get_paginator("list_object_versions").paginate(
        Bucket=store.bucket, Prefix=store.prefix
    )
    for page in pages:
        for v in page.get("Versions", []):
            head = client.head_object(
                Bucket=store.bucket, Key=v["Key"], VersionId=v["VersionId"], ChecksumMode="ENABLED"
            )
            versions.append(
                {
                    "key": v["Key"],
                    "version": v["VersionId"],
                    "latest": bool(v.get("IsLatest")),
                    "size": int(v.get("Size", 0)),
                    "etag": v.get("ETag"),
                    "last_modified": v.get("LastModified"),
                    "checksum_sha256": head.get("ChecksumSHA256"),
                    "lock_mode": head.get("ObjectLockMode"),
                    "retain_until": head.get("ObjectLockRetainUntilDate"),
                    "legal_hold": head.get("ObjectLockLegalHoldStatus"),
                }
            )
        for m in page.get("DeleteMarkers", []):
            versions.append(
                {"key": m["Key"], "version": m["VersionId"], "delete_marker": True}
                | {"latest": bool(m.get("IsLatest"))}
            )
    return {"bucket": store.bucket, "prefix": store.prefix, "versions": versions}
