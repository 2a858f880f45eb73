"""Setting up and running the appliance: check-config, migrate, status, verify, serve."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from ingestd.cli.common import load, print_json, print_table, shown
from ingestd.config.load import default_config_path, load_config
from ingestd.errors import ConfigError, ExitCode, IngestdError
from ingestd.ops import config_warnings, preflight, status_why
from ingestd.ops import machine as checks
from ingestd.states import JobStatus


# -- check-config -----------------------------------------------------------------------
def cmd_check_config(args: argparse.Namespace) -> int:
    from worker.analysis.ocr import available_languages

    files: list[Path] = args.files or [args.config or default_config_path()]
    results: list[dict[str, Any]] = []
    for f in files:
        warnings: list[str] = []
        try:
            # What the runtime would find on this machine too: OCR languages, secrets.
            config = load_config(f)
            problems = checks.machine_problems(config, available_languages)
            # What serves nothing (warnings, not refusals); --online: the bucket, tenants.
            warnings += config_warnings.offline_warnings(config)
            if args.online:
                found, more = preflight.online(config)
                problems += found
                warnings += more
            if problems:
                raise ConfigError(f"{f}: {len(problems)} problem(s)", problems)
            results.append({"file": str(f), "ok": True, "problems": [], "warnings": warnings})
        except ConfigError as exc:
            results.append(
                {
                    "file": str(f),
                    "ok": False,
                    "error": exc.message,
                    "problems": exc.problems,
                    "warnings": warnings,
                }
            )
    if args.json:
        print_json(results)
    else:
        for r in results:
            for warning in r["warnings"]:
                print(f"{r['file']}: warning: {warning}")
            if r["ok"]:
                print(f"{r['file']}: OK")
                continue
            print(r["error"])
            for problem in r["problems"]:
                if problem != r["error"]:
                    print(f"  {problem}")
    return ExitCode.ok if all(r["ok"] for r in results) else ExitCode.config_invalid


# -- migrate ----------------------------------------------------------------------------
def cmd_migrate(args: argparse.Namespace) -> int:
    from ingestd.archive import sealkey
    from ingestd.archive.export_check import fingerprint
    from ingestd.daemon.wiring import open_database
    from ingestd.db.schema import migrate
    from ingestd.intake import policy_backfill

    config = load(args)
    with open_database(config, migrate_schema=False) as db:
        report = migrate(db)
        policy_backfill.backfill(config, db)  # documents recorded before 0024
        # The sealing key exists before the first backup: made here when none ever was.
        made = sealkey.ensure_key(db, config.paths.state_dir)
    key = fingerprint(made) if made else None
    if args.json:
        print_json(
            {"applied": report.applied, "version": report.current_version, "seal_key_made": key}
        )
    else:
        if report.applied:
            print(f"applied {', '.join(report.applied)}; schema version {report.current_version}")
        else:
            print(f"schema is up to date (version {report.current_version})")
        if key:
            print(f"made the sealing key {key} ({sealkey.public_path(config.paths.state_dir)})")
    return ExitCode.ok


# -- status -----------------------------------------------------------------------------
def cmd_status(args: argparse.Namespace) -> int:
    """Documents and jobs by tenant, the queue by tenant and by pool, the spool, hot
    folders and bans.

    What is on disk (spool, hot folders, bans, the daemon's own report) is shown even when
    the database is down, and the exit code then says so (ExitCode.degraded): an outage is
    exactly when the backlog matters.
    """
    from ingestd.ops.status_report import gather

    config = load(args)
    report = gather(config)
    database = report["database"]
    code = ExitCode.ok if database["up"] else ExitCode.degraded
    if args.json:
        print_json(report)
        return code
    _print_status(report)
    return code


def _print_pools(report: dict[str, Any]) -> None:
    numbers = ("READY", "RUNNING", "OLDEST", "LANES", "SHORT")
    print_table(
        ("POOL", "TENANTS", "KINDS", *numbers),
        (
            [
                p["pool"],
                (
                    shown(",".join(p["tenants"]))
                    if p["tenants"] is not None
                    else ("all others" if p["except"] else "all")
                ),
                ",".join(p["kinds"]) if p["kinds"] is not None else "all",
                p["ready"],
                p["running"],
                "-" if p["oldest_ready_seconds"] is None else f"{p['oldest_ready_seconds']}s",
                p["lanes"]["jobs"],
                p["lanes"]["short"],
            ]
            for p in report["pools"]
        ),
        right=numbers,
    )
    for p in report["pools"]:
        if p["warning"]:
            print(p["warning"])


def _print_status(report: dict[str, Any]) -> None:
    database, daemon = report["database"], report["daemon"]
    if database["up"]:
        print("database: up")
    else:
        since = f" since {database['down_since']}" if database.get("down_since") else ""
        print(f"database: DOWN{since}: {database['error']}")
        print("  uploads are still accepted into the spool; hot-folder files stay in place;")
        print("  both are ingested when the database is back")
    if daemon is None:
        print("daemon: not running (or not reporting)")
    else:
        print(f"daemon: running, pid {daemon['pid']}, since {daemon['started_at']}")
    spool = report["spool"]
    print(f"spool: {spool['pending']} upload(s) waiting for intake ({spool['bytes']} bytes)")
    for h in report["hotfolders"]:
        state = (
            "MISSING"
            if h.get("missing")
            else (
                f"{h['files']}{'+' if h['truncated'] else ''} file(s) waiting ({h['bytes']} bytes)"
            )
        )
        print(f"hot folder {shown(h['folder'])} [{h['tenant']}]: {state}")
    hot = (daemon or {}).get("hotfolders") or {}
    status_why.print_folders(report["why"])
    for s in hot.get("stuck") or []:
        print(f"  STUCK {shown(s['path'])}: {s['reason']}")
        if s.get("fix"):
            print(f"    fix: {s['fix']}")
    if hot.get("stuck_total", 0) > len(hot.get("stuck") or []):
        print(
            f"  ... {hot['stuck_total']} stuck file(s) in all, the first {len(hot['stuck'])} shown"
        )
    status_why.print_uploads(report["why"])
    sftp = (daemon or {}).get("sftp") or {}
    if sftp.get("listening"):
        print(
            f"sftp: {sftp['running']} of {sftp['processes']} process(es) running, "
            f"{sftp['connections']} connection(s), {sftp['logged_in']} logged in"
        )
    bans = report["sftp_bans"]
    if bans:
        print(f"sftp bans: {len(bans)}")
        for b in bans:
            print(f"  {b['ip']:<40} {b['remaining']:>8} s left  (ban #{b['bans']})")
    else:
        print("sftp bans: none")
    if not database["up"]:
        return
    status_why.print_records(report["why"])
    print()
    counts_header = ("QUEUED", "PROC", "DONE", "FAILED", "ATTN")  # JobStatus's order
    rows: list[list[object]] = []
    for name, t in sorted(report["tenants"].items()):
        what = [("documents", t["documents"])] + [
            (f"jobs {k}", v) for k, v in sorted(t["jobs"].items())
        ]
        rows.extend([name, label, *(counts.get(k, 0) for k in JobStatus)] for label, counts in what)
    print_table(("TENANT", "WHAT", *counts_header), rows, right=counts_header)
    if report["queue"]:
        print()
        numbers = ("READY", "RETRY", "RUNNING", "OLDEST", "FAILED/1h", "WEIGHT", "MAX RUNNING")
        print_table(
            ("QUEUE", *numbers),
            (
                [
                    q["tenant"],
                    q["ready"],
                    q["retrying"],
                    q["running"],
                    "-" if q["oldest_ready_seconds"] is None else f"{q['oldest_ready_seconds']}s",
                    q["failed_last_hour"],
                    q["weight"],
                    "-" if q["max_running"] is None else q["max_running"],
                ]
                for q in report["queue"]
            ),
            right=numbers,
        )
    if report["pools"]:
        print()
        _print_pools(report)


# -- verify -----------------------------------------------------------------------------
def cmd_verify(args: argparse.Namespace) -> int:
    import time

    from ingestd.archive import audit
    from ingestd.archive.backends import make_archive
    from ingestd.archive.verify import PROBLEM_KINDS, record_run, verify_archive
    from ingestd.daemon.wiring import open_database

    config = load(args)
    started = time.time()
    with open_database(config) as db:
        report = verify_archive(db, make_archive(config), rehash=not args.no_rehash)
        with db.transaction() as tx:  # a verify run is an archive event too
            audit.append(
                tx,
                chain=audit.SYSTEM_CHAIN,
                tenant=None,
                kind=audit.AuditKind.verify_run,
                detail={
                    "command": "verify",
                    "ok": report.ok,
                    "files": report.checked,
                    "problems": {k: report.count(k) for k in PROBLEM_KINDS},
                },
            )
    try:  # for the daemon's ingestd_verify_last_* metrics
        record_run(config.paths.state_dir, report, started=started, rehash=not args.no_rehash)
    except (OSError, IngestdError) as exc:
        why = exc.message if isinstance(exc, IngestdError) else str(exc)
        print(
            f"ingestd verify: the result was not recorded for the metrics: {why}", file=sys.stderr
        )
    if args.json:
        print_json(
            {
                "checked": report.checked,
                "ok": report.ok,
                "problems": [dataclasses.asdict(p) for p in report.problems],
            }
        )
    else:
        for p in report.problems:
            doc = f" (document {p.document_id})" if p.document_id else ""
            print(f"{p.kind:<9} {p.path}{doc}: {p.detail}")
        print(
            f"checked {report.checked} documents: "
            + ("archive is consistent" if report.ok else f"{len(report.problems)} problem(s)")
        )
    return ExitCode.ok if report.ok else ExitCode.archive_inconsistent


# -- serve ------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    from ingestd.daemon.serve import serve

    config = load(args)
    return serve(config, args.config)


def cmd_web(args: argparse.Namespace) -> int:
    from ingestd.web.server import serve

    config = load(args)
    return serve(config)


def add_parsers(
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """check-config, config-reference and migrate."""
    s = sub.add_parser("check-config", parents=[common, jsonopt], help="validate config files")
    s.add_argument("files", nargs="*", type=Path, help="files to check (default: --config)")
    s.add_argument(
        "--online",
        action="store_true",
        help="also ask the S3 archive (bucket, Object Lock, endpoint) and the database "
        "(tenants the config names)",
    )
    s.set_defaults(func=cmd_check_config)

    from ingestd.cli import reference

    reference.add_parser(sub)

    s = sub.add_parser("migrate", parents=[common, jsonopt], help="create/upgrade the schema")
    s.set_defaults(func=cmd_migrate)


def add_run_parsers(
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """serve."""
    s = sub.add_parser(
        "serve", parents=[common], help="run the daemon: SFTP server, spool intake, hot folders"
    )
    s.set_defaults(func=cmd_serve)
    w = sub.add_parser(
        "web",
        parents=[common],
        help="run the web console for tenant members ([web] listen, default 127.0.0.1:8088)",
    )
    w.set_defaults(func=cmd_web)


def add_report_parsers(
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """status and verify."""
    s = sub.add_parser("status", parents=[common, jsonopt], help="documents and jobs by tenant")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("verify", parents=[common, jsonopt], help="re-hash the archive")
    s.add_argument("--no-rehash", action="store_true", help="check presence and size only")
    s.set_defaults(func=cmd_verify)
