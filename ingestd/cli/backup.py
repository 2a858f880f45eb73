"""``ingestd backup DIR`` and ``ingestd restore DIR``: the appliance in one directory
with a manifest, and back onto an empty machine, checked before it says success."""

from __future__ import annotations

import argparse
import os
import pwd
from pathlib import Path
from typing import Any

from ingestd.cli.common import load, print_json, shown
from ingestd.config.load import default_config_path
from ingestd.errors import ExitCode, UsageError


def _prepare_target(args: argparse.Namespace, user: pwd.struct_passwd) -> None:
    """Run as root, before becoming the service user: DIR must be a place that user can
    reach (the backup is written as the user, who reads the state and the database);
    a new DIR is made for it (0700)."""
    target = Path(args.dir).absolute()
    args.dir = target
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    for parent in reversed(target.parents):
        try:
            st = parent.stat()
        except FileNotFoundError:
            break
        if st.st_uid == user.pw_uid:
            ok = st.st_mode & 0o100
        elif st.st_gid in groups:
            ok = st.st_mode & 0o010
        else:
            ok = st.st_mode & 0o001
        if not ok:
            raise UsageError(
                f"the backup is written as {user.pw_name}, who cannot enter {parent}: give "
                f"a directory {user.pw_name} can reach (e.g. /var/backups/ingestd); nothing "
                "was done"
            )
    if not target.exists():
        target.mkdir(mode=0o700, parents=True)
        os.chown(target, user.pw_uid, user.pw_gid)


def cmd_backup(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database
    from ingestd.ops.backup import check_target, make_backup

    config = load(args)
    target = Path(args.dir).absolute()
    check_target(target)
    config_path = args.config or default_config_path()
    with open_database(config, name="ingestd-backup") as db:
        report = make_backup(config, config_path, db, target)
    summary: dict[str, Any] = {
        "dir": str(target),
        "database_bytes": report.database_bytes,
        "archive": report.manifest["archive"]
        | {
            "files": report.archive_files,
            "linked": report.archive_linked,
            "objects": report.archive_objects,
        },
        "state_files": report.state_files,
        "config_files": report.config_files,
        "manifest": str(target / "manifest.json"),
    }
    if args.json:
        print_json(summary)
        return ExitCode.ok
    print(f"backup in {shown(str(target))}:")
    print(f"  database  {report.database_bytes:,} bytes (pg_dump, custom format)")
    if report.manifest["archive"]["backend"] == "s3":
        print(
            f"  archive   listing of {report.archive_objects} object versions (kept in the bucket)"
        )
    else:
        print(f"  archive   {report.archive_files} files ({report.archive_linked} hard links)")
    print(f"  state     {report.state_files} files (sealing key, host keys, ...)")
    print(f"  config    {report.config_files} files")
    print(f"  manifest  {shown(summary['manifest'])} (SHA-256 of every file)")
    return ExitCode.ok


def cmd_restore(args: argparse.Namespace) -> int:
    from ingestd.ops.restore import restore

    config_path = args.config or default_config_path()
    report = restore(Path(args.dir), config_path, force=args.force)
    if args.json:
        print_json(
            {
                "dir": str(report.source),
                "config": str(report.config_path),
                "user": report.user,
                "state_files": report.state_files,
                "archive_files": report.archive_files,
                "after_dump": report.after_dump,
                "checks": {k: v["exit"] for k, v in report.checks.items()},
                "ok": True,
            }
        )
        return ExitCode.ok
    print(f"restored {shown(str(report.source))} (config {shown(str(report.config_path))}):")
    print(f"  state     {report.state_files} files; archive {report.archive_files} files")
    if report.after_dump:
        print(
            f"  {len(report.after_dump)} archive files came after the dump; kept in "
            "<state_dir>/restored-after-dump/ (re-ingest them with `ingestd ingest`)"
        )
    for name in report.checks:
        print(f"  check     ingestd {name}: passed")
    return ExitCode.ok


def add_parsers(
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """backup and restore."""
    s = sub.add_parser(
        "backup",
        parents=[common, jsonopt],
        help="database dump, archive (or bucket listing), state and config into DIR",
    )
    s.add_argument("dir", type=Path, metavar="DIR", help="a new or empty directory")
    s.set_defaults(func=cmd_backup, before_switch=_prepare_target)

    s = sub.add_parser(
        "restore",
        parents=[common, jsonopt],
        help="put a backup back onto an empty machine, then run verify and audit verify",
    )
    s.add_argument("dir", type=Path, metavar="DIR", help="a directory `ingestd backup` wrote")
    s.add_argument(
        "--force",
        action="store_true",
        help="restore over a config, state directory, archive or database that is not empty",
    )
    # Root puts back /etc/ingestd and the state directory first, then becomes the user.
    s.set_defaults(func=cmd_restore, switches_itself=True)
