"""The ``ingestd`` command line. Every command takes --config; parseable output with --json."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ingestd import __version__, checks, log
from ingestd.config import Config, default_config_path, load_config
from ingestd.errors import ConfigError, ExitCode, IngestdError, TenantNotFound
from ingestd.intake import IntakeItem, Outcome

Handler = Callable[[argparse.Namespace], int]


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str, ensure_ascii=False)
    sys.stdout.write("\n")


def _shown(text: str) -> str:
    """A path or name as it can be printed: undecodable bytes and controls escaped."""
    if text.isprintable():
        return text
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _load(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    log.configure(config.log.level, config.log.format)
    return config


# -- check-config -----------------------------------------------------------------------
def cmd_check_config(args: argparse.Namespace) -> int:
    files: list[Path] = args.files or [args.config or default_config_path()]
    results: list[dict[str, Any]] = []
    for f in files:
        try:
            # What the runtime would find on this machine too: OCR languages, secrets.
            problems = checks.machine_problems(load_config(f))
            if problems:
                raise ConfigError(f"{f}: {len(problems)} problem(s)", problems)
            results.append({"file": str(f), "ok": True, "problems": []})
        except ConfigError as exc:
            results.append(
                {"file": str(f), "ok": False, "error": exc.message, "problems": exc.problems}
            )
    if args.json:
        _print_json(results)
    else:
        for r in results:
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
    from ingestd.runtime import open_database
    from ingestd.schema import migrate

    config = _load(args)
    with open_database(config, migrate_schema=False) as db:
        report = migrate(db)
    if args.json:
        _print_json({"applied": report.applied, "version": report.current_version})
    elif report.applied:
        print(f"applied {', '.join(report.applied)}; schema version {report.current_version}")
    else:
        print(f"schema is up to date (version {report.current_version})")
    return ExitCode.ok


# -- ingest -----------------------------------------------------------------------------
def cmd_ingest(args: argparse.Namespace) -> int:
    from ingestd.intake import Disposal
    from ingestd.runtime import make_intake, open_database

    config = _load(args)
    disposal = Disposal.keep if args.keep_source else Disposal.delete
    report: list[dict[str, Any]] = []
    worst = ExitCode.ok
    with open_database(config) as db:
        intake = make_intake(config, db)
        for raw in args.files:
            path = Path(raw)
            entry: dict[str, Any] = {"file": _shown(str(path))}
            try:
                res = intake.ingest(IntakeItem(path=path, tenant=args.tenant), disposal=disposal)
                entry |= {
                    "outcome": str(res.outcome),
                    "document_id": res.document_id,
                    "job_id": res.job_id,
                    "sha256": res.sha256,
                }
                if res.outcome is Outcome.refused:
                    entry |= {"reason": str(res.reason), "detail": res.detail}
                    worst = max(worst, ExitCode.refused)
                if res.source_left is not None:
                    entry["source_left"] = res.source_left  # archived; the file stayed
            except FileNotFoundError:
                entry |= {"outcome": "error", "detail": "no such file"}
                worst = max(worst, ExitCode.refused)
            except IngestdError as exc:
                # Transient or tenant-wide: the file is left untouched; stop the batch.
                entry |= {"outcome": "error", "detail": exc.message}
                report.append(entry)
                worst = max(worst, exc.exit_code)
                break
            report.append(entry)
    if args.json:
        _print_json(report)
    else:
        for e in report:
            if e["outcome"] in ("ingested", "duplicate"):
                print(
                    f"{e['outcome']:<9} {e['file']}  document {e['document_id']}"
                    + (f" job {e['job_id']}" if e.get("job_id") else "")
                )
                if e.get("source_left"):
                    print(f"{'':<9} source kept: {e['source_left']}")
            else:
                reason = f"{e['reason']}: " if e.get("reason") else ""
                print(f"{e['outcome']:<9} {e['file']}  {reason}{e['detail']}")
    return worst


# -- status -----------------------------------------------------------------------------
def cmd_status(args: argparse.Namespace) -> int:
    """Documents and jobs by tenant, the spool, hot folders and bans.

    What is on disk (spool, hot folders, bans, the daemon's own report) is shown even when
    the database is down, and the exit code then says so (ExitCode.degraded): an outage is
    exactly when the backlog matters.
    """
    from ingestd.daemon_state import read_state
    from ingestd.errors import DatabaseUnavailable
    from ingestd.runtime import open_database
    from ingestd.sftp.bans import read_bans
    from ingestd.sftp.spool import spool_counts
    from ingestd.watch import backlog_on_disk

    config = _load(args)
    report: dict[str, Any] = {
        "spool": spool_counts(config.paths.spool),
        "hotfolders": backlog_on_disk(config),
        "sftp_bans": read_bans(config.paths.state_dir),
        "daemon": read_state(config.paths.state_dir),
    }
    database: dict[str, Any] = {"up": True}
    try:
        with open_database(config) as db, db.transaction() as tx:
            docs = tx.all("status_documents")
            jobs = tx.all("status_jobs")
            queue = tx.all("status_queue")
    except DatabaseUnavailable as exc:
        seen = (report["daemon"] or {}).get("database") or {}
        database = {"up": False, "error": exc.message, "down_since": seen.get("down_since")}
        docs, jobs, queue = [], [], []
    tenants: dict[str, dict[str, Any]] = {}
    for r in docs:
        t = tenants.setdefault(r["tenant"], {"documents": {}, "jobs": {}})
        t["documents"][r["status"]] = r["n"]
    for r in jobs:
        t = tenants.setdefault(r["tenant"], {"documents": {}, "jobs": {}})
        t["jobs"].setdefault(r["kind"], {})[r["status"]] = r["n"]
    report |= {"database": database, "tenants": tenants, "queue": queue}
    code = ExitCode.ok if database["up"] else ExitCode.degraded
    if args.json:
        _print_json(report)
        return code
    _print_status(report)
    return code


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
        print(f"hot folder {_shown(h['folder'])} [{h['tenant']}]: {state}")
    hot = (daemon or {}).get("hotfolders") or {}
    for s in hot.get("stuck") or []:
        print(f"  STUCK {_shown(s['path'])}: {s['reason']}")
    if hot.get("stuck_total", 0) > len(hot.get("stuck") or []):
        print(
            f"  ... {hot['stuck_total']} stuck file(s) in all, the first {len(hot['stuck'])} shown"
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
    print()
    print(
        f"{'TENANT':<20} {'WHAT':<24} {'QUEUED':>7} {'PROC':>7} {'DONE':>7} {'FAILED':>7} "
        f"{'ATTN':>7}"
    )
    for name, t in sorted(report["tenants"].items()):
        rows = [("documents", t["documents"])] + [
            (f"jobs {k}", v) for k, v in sorted(t["jobs"].items())
        ]
        for label, counts in rows:
            n = [counts.get(k, 0) for k in ("queued", "processing", "done", "failed", "attention")]
            print(f"{name:<20} {label:<24} {n[0]:>7} {n[1]:>7} {n[2]:>7} {n[3]:>7} {n[4]:>7}")
    if report["queue"]:
        print()
        print(
            f"{'QUEUE':<20} {'READY':>7} {'RETRY':>7} {'RUNNING':>7} {'OLDEST':>9} {'FAILED/1h':>9}"
        )
        for q in report["queue"]:
            oldest = "-" if q["oldest_ready_seconds"] is None else f"{q['oldest_ready_seconds']}s"
            print(
                f"{q['tenant']:<20} {q['ready']:>7} {q['retrying']:>7} {q['running']:>7} "
                f"{oldest:>9} {q['failed_last_hour']:>9}"
            )


# -- sftp: host keys, password hashes ----------------------------------------------------
def cmd_hostkeys(args: argparse.Namespace) -> int:
    from ingestd.sftp import hostkeys

    config = _load(args)
    keys = hostkeys.load_or_create(config.paths.state_dir)
    if args.json:
        rows = []
        for k in keys:
            rows.append(
                {
                    "algorithm": k.algorithm,
                    "sha256": k.fingerprint,
                    "md5": k.md5_fingerprint,
                    "public_key": k.public_line,
                    "path": str(k.path),
                }
            )
        _print_json(rows)
        return ExitCode.ok
    port = config.sftp.address[1]
    for k in keys:
        print(f"{k.algorithm:<12} {k.fingerprint}")
        print(f"{'':<12} {k.md5_fingerprint}")
    # What an admin pastes into known_hosts (or a scanner that wants the whole key).
    name = f"[HOST]:{port}" if port != 22 else "HOST"
    print()
    for k in keys:
        print(f"{name} {k.public_line}")
    return ExitCode.ok


def cmd_hash_password(args: argparse.Namespace) -> int:
    import getpass

    from ingestd.sftp.accounts import hash_password

    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            print("ingestd: the passwords differ", file=sys.stderr)
            return ExitCode.usage
    else:
        # One line from stdin, for scripts: `printf %s "$pw" | ingestd account hash-password`
        password = sys.stdin.readline().rstrip("\n")
    try:
        print(hash_password(password, args.rounds))
    except ValueError as exc:
        print(f"ingestd: {exc}", file=sys.stderr)
        return ExitCode.usage
    return ExitCode.ok


# -- verify -----------------------------------------------------------------------------
def cmd_verify(args: argparse.Namespace) -> int:
    import time

    from ingestd.runtime import make_archive, open_database
    from ingestd.verify import record_run, verify_archive

    config = _load(args)
    started = time.time()
    with open_database(config) as db:
        report = verify_archive(db, make_archive(config), rehash=not args.no_rehash)
    try:  # for the daemon's ingestd_verify_last_* metrics
        record_run(config.paths.state_dir, report, started=started, rehash=not args.no_rehash)
    except (OSError, IngestdError) as exc:
        why = exc.message if isinstance(exc, IngestdError) else str(exc)
        print(
            f"ingestd verify: the result was not recorded for the metrics: {why}", file=sys.stderr
        )
    if args.json:
        _print_json(
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


# -- documents --------------------------------------------------------------------------
def cmd_documents_analyze(args: argparse.Namespace) -> int:
    """One new analyze-document job per document of the tenant (seed 004's re-analyze).

    A re-analysis sends no workflow webhook unless --redeliver: receivers heard of the
    document when it arrived."""
    from ingestd.jobkinds import JobKind
    from ingestd.jobs import enqueue
    from ingestd.runtime import open_database

    config = _load(args)
    queued: list[dict[str, int]] = []
    missing: list[int] = []
    with open_database(config) as db, db.transaction() as tx:
        tenant = tx.one("tenant_by_name", {"name": args.tenant})
        if tenant is None:
            raise TenantNotFound(f"tenant {args.tenant!r} does not exist")
        for doc_id in args.ids:
            row = tx.one("job_document", {"id": doc_id, "tenant_id": tenant["id"]})
            if row is None:
                missing.append(doc_id)
                continue
            job_id = enqueue(
                tx,
                tenant_id=int(tenant["id"]),
                document_id=doc_id,
                kind=JobKind.analyze_document,
                trace=row["trace_id"],
                payload={
                    "document_id": doc_id,
                    "force": args.force,
                    "reanalysis": True,
                    "redeliver": args.redeliver,
                },
            )
            queued.append({"document_id": doc_id, "job_id": job_id})
    if args.json:
        _print_json({"queued": queued, "not_found": missing})
    else:
        for q in queued:
            print(f"document {q['document_id']}: analyze-document job {q['job_id']} queued")
        for m in missing:
            print(f"document {m}: no such document of tenant {args.tenant}", file=sys.stderr)
    return ExitCode.ok if not missing else ExitCode.not_found


def cmd_documents(args: argparse.Namespace) -> int:
    from ingestd.runtime import open_database

    config = _load(args)
    with open_database(config) as db, db.transaction() as tx:
        rows = tx.all("documents_list", {"tenant": args.tenant, "limit": args.limit})
    if args.json:
        _print_json(rows)
        return ExitCode.ok
    print(
        f"{'ID':>6} {'TENANT':<12} {'SOURCE':<20} {'STATUS':<8} {'ISSUED':<10} {'TITLE':<30} TAGS"
    )
    for r in rows:
        issued = r["issued_date"].isoformat() if r["issued_date"] else "-"
        title = _shown(r["title"])[:30]
        source = _shown(r["source"])[:20]
        print(
            f"{r['id']:>6} {r['tenant']:<12} {source:<20} {r['processing_status']:<8} "
            f"{issued:<10} {title:<30} {', '.join(r['tags'])}"
        )
    return ExitCode.ok


def cmd_documents_attention(args: argparse.Namespace) -> int:
    """Documents archived but not analysable (encrypted, damaged, over a limit), and why."""
    from ingestd.runtime import open_database

    config = _load(args)
    with open_database(config) as db, db.transaction() as tx:
        rows = tx.all("documents_attention", {"tenant": args.tenant, "limit": args.limit})
    if args.json:
        _print_json(rows)
        return ExitCode.ok
    if not rows:
        print("no documents need attention")
        return ExitCode.ok
    for r in rows:
        print(f"{r['id']:>6} {r['tenant']:<12} {_shown(r['original_filename'])}")
        print(f"{'':>6} {_shown(r['attention_reason'] or '')}")
    print(
        f"\n{len(rows)} document(s). Re-queue with `ingestd documents analyze --tenant T ID`, "
        "or accept without text: `ingestd documents mark-done --tenant T ID`"
    )
    return ExitCode.ok


def cmd_documents_mark_done(args: argparse.Namespace) -> int:
    from ingestd.runtime import open_database

    config = _load(args)
    done: list[int] = []
    missing: list[int] = []
    with open_database(config) as db, db.transaction() as tx:
        tenant = tx.one("tenant_by_name", {"name": args.tenant})
        if tenant is None:
            raise TenantNotFound(f"tenant {args.tenant!r} does not exist")
        for doc_id in args.ids:
            row = tx.one("document_mark_done", {"id": doc_id, "tenant_id": tenant["id"]})
            (done if row else missing).append(doc_id)
    if args.json:
        _print_json({"marked_done": done, "not_in_attention": missing})
    for d in done if not args.json else []:
        print(f"document {d}: done without text")
    for m in missing:
        print(
            f"document {m}: not a document of tenant {args.tenant} that needs attention",
            file=sys.stderr,
        )
    return ExitCode.ok if not missing else ExitCode.not_found


# -- sftp -------------------------------------------------------------------------------
def cmd_sftp(args: argparse.Namespace) -> int:
    from ingestd.sftp.bans import read_bans, request_unban

    config = _load(args)
    state_dir = config.paths.state_dir
    if args.sftp_cmd == "bans":
        bans = read_bans(state_dir)
        if args.json:
            _print_json(bans)
        elif not bans:
            print("no SFTP bans in force")
        for b in bans if not args.json else []:
            print(f"{b['ip']:<40} {b['remaining']:>8} s left  (ban #{b['bans']})")
        return ExitCode.ok
    banned = {b["ip"] for b in read_bans(state_dir)}
    bad = []
    for ip in args.ips:
        try:
            addr = request_unban(state_dir, ip)
        except ValueError:
            bad.append(ip)
            continue
        state = "banned" if addr in banned else "not banned now"
        print(
            f"{addr}: unban requested ({state}); the server lifts it when the address "
            "next connects, or at its next start"
        )
    for ip in bad:
        print(f"{ip!r} is not an IP address", file=sys.stderr)
    return ExitCode.ok if not bad else ExitCode.usage


# -- serve ------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    from ingestd.daemon import serve

    config = _load(args)
    return serve(config, args.config)


# -- worker -----------------------------------------------------------------------------
def cmd_worker(args: argparse.Namespace) -> int:
    from ingestd.runtime import open_database
    from worker.child import Child
    from worker.runner import Runner, load_kinds

    config = _load(args)
    load_kinds(args.plugin)  # a mistyped --plugin fails before the database is touched
    children: list[Child] = []

    def start_child(conninfo: str) -> None:
        # Before the pool's threads exist: the job child can be a fork of this process,
        # with every module already imported, instead of a fresh interpreter.
        child = Child(config, conninfo, args.plugin)
        children.append(child)
        child.start(fork=True)

    try:
        with open_database(config, name="ingestd-worker", before_pool=start_child) as db:
            runner = Runner(
                config,
                db,
                config_path=args.config,
                plugins=args.plugin,
                worker_id=args.worker_id,
                drain=args.drain,
                metrics_offset=args.metrics_offset,
                child=children[0] if children else None,
            )
            return runner.run()
    finally:
        for child in children:
            child.stop()  # a no-op once the runner stopped it


# -- parser -----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from ingestd import tenant_cli

    # --config is accepted before and after the sub-command; SUPPRESS keeps a sub-parser
    # from resetting a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        help="config file (default: $INGESTD_CONFIG or /etc/ingestd/ingestd.toml)",
    )
    jsonopt = argparse.ArgumentParser(add_help=False)
    jsonopt.add_argument("--json", action="store_true", help="machine-readable output")

    p = argparse.ArgumentParser(prog="ingestd", description=__doc__)
    # Its own action, not the shared one: parents share Action objects, and a default of
    # None here would leak into every sub-parser.
    p.add_argument("--config", type=Path, default=None, help="config file")
    p.add_argument("--version", action="version", version=f"ingestd {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("check-config", parents=[common, jsonopt], help="validate config files")
    s.add_argument("files", nargs="*", type=Path, help="files to check (default: --config)")
    s.set_defaults(func=cmd_check_config)

    s = sub.add_parser("migrate", parents=[common, jsonopt], help="create/upgrade the schema")
    s.set_defaults(func=cmd_migrate)

    tenant_cli.add_parsers(sub, common, jsonopt)

    s = sub.add_parser("ingest", parents=[common, jsonopt], help="ingest files from the shell")
    s.add_argument("--tenant", required=True)
    s.add_argument("--keep-source", action="store_true", help="do not remove files after COMMIT")
    s.add_argument("files", nargs="+")
    s.set_defaults(func=cmd_ingest)

    s = sub.add_parser(
        "documents",
        aliases=["document"],
        parents=[common],
        help="list, re-analyze, trash and purge documents",
    )
    dsub = s.add_subparsers(dest="documents_cmd", required=True)
    tenant_cli.add_document_parsers(dsub, common, jsonopt)
    d = dsub.add_parser("list", parents=[common, jsonopt])
    d.add_argument("--tenant", default=None)
    d.add_argument("--limit", type=int, default=50)
    d.set_defaults(func=cmd_documents)
    d = dsub.add_parser(
        "analyze",
        parents=[common, jsonopt],
        help="queue analyze-document again (re-OCR, re-derive)",
    )
    d.add_argument("--tenant", required=True)
    d.add_argument(
        "--force",
        action="store_true",
        help="redo the OCR too (else a saved text of the same bytes is reused)",
    )
    d.add_argument(
        "--redeliver",
        action="store_true",
        help="send the workflows' webhooks again (a re-analysis sends none)",
    )
    d.add_argument("ids", nargs="+", type=int, metavar="ID")
    d.set_defaults(func=cmd_documents_analyze)
    d = dsub.add_parser(
        "attention",
        parents=[common, jsonopt],
        help="documents archived but not analysable, with the reason",
    )
    d.add_argument("--tenant", default=None)
    d.add_argument("--limit", type=int, default=200)
    d.set_defaults(func=cmd_documents_attention)
    d = dsub.add_parser(
        "mark-done",
        parents=[common, jsonopt],
        help="accept documents that need attention as done, without text",
    )
    d.add_argument("--tenant", required=True)
    d.add_argument("ids", nargs="+", type=int, metavar="ID")
    d.set_defaults(func=cmd_documents_mark_done)

    s = sub.add_parser(
        "hostkeys",
        parents=[common, jsonopt],
        help="print the SFTP host key fingerprints (made if missing)",
    )
    s.set_defaults(func=cmd_hostkeys)

    s = sub.add_parser("account", parents=[common], help="SFTP account helpers")
    asub = s.add_subparsers(dest="account_cmd", required=True)
    a = asub.add_parser(
        "hash-password",
        parents=[common],
        help="bcrypt hash for sftp.accounts[].password_hash (password on stdin or prompted)",
    )
    a.add_argument(
        "--rounds",
        type=int,
        default=12,
        choices=range(4, 32),
        metavar="4..31",
        help="bcrypt cost (default 12)",
    )
    a.set_defaults(func=cmd_hash_password)

    s = sub.add_parser("sftp", parents=[common], help="SFTP bans")
    ssub = s.add_subparsers(dest="sftp_cmd", required=True)
    a = ssub.add_parser("bans", parents=[common, jsonopt], help="the bans in force")
    a.set_defaults(func=cmd_sftp)
    a = ssub.add_parser(
        "unban", parents=[common], help="lift bans (the server applies it at the next connection)"
    )
    a.add_argument("ips", nargs="+", metavar="IP")
    a.set_defaults(func=cmd_sftp)

    s = sub.add_parser(
        "serve", parents=[common], help="run the daemon: SFTP server, spool intake, hot folders"
    )
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser(
        "worker", parents=[common], help="run jobs, one at a time, each in a child process"
    )
    s.add_argument(
        "--drain", action="store_true", help="exit 0 once no job is ready and none is running"
    )
    s.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE for more job kinds (repeatable)",
    )
    s.add_argument(
        "--metrics-offset",
        type=int,
        default=None,
        metavar="N",
        help="serve /metrics on metrics.worker_listen's port + N "
        "(ingestd-worker@N); without it, no endpoint",
    )
    s.add_argument(
        "--worker-id",
        default=None,
        metavar="ID",
        help="name in processing_jobs.worker_id (default HOST:PID)",
    )
    s.set_defaults(func=cmd_worker)

    s = sub.add_parser("status", parents=[common, jsonopt], help="documents and jobs by tenant")
    s.set_defaults(func=cmd_status)

    from ingestd import jobs_cli, search_cli

    jobs_cli.add_parser(sub, common, jsonopt)
    search_cli.add_parser(sub, common, jsonopt)

    s = sub.add_parser("verify", parents=[common, jsonopt], help="re-hash the archive")
    s.add_argument("--no-rehash", action="store_true", help="check presence and size only")
    s.set_defaults(func=cmd_verify)
    return p


def _report(exc: IngestdError) -> int:
    """The error on stderr: a JSON log line when logs are JSON (journald, a pipe: every
    line parses), else ``ingestd: message`` and the problems indented below it."""
    problems = [p for p in exc.problems if p != exc.message] if isinstance(exc, ConfigError) else []
    if log.json_output():
        fields: dict[str, Any] = {"problems": problems} if problems else {}
        log.get_logger().error(
            "cli.error", error=exc.message, exit_code=int(exc.exit_code), **fields
        )
    else:
        print(f"ingestd: {exc.message}", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
    return int(exc.exit_code)


def _stdout_closed() -> int:
    """`ingestd jobs list | head -1`: the reader left. End quietly, as a tool killed by
    SIGPIPE would (the Python docs' recipe: stdout to /dev/null, so the interpreter's
    final flush of what is still buffered cannot raise again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    log.configure()
    args = build_parser().parse_args(argv)
    func: Handler = args.func
    try:
        code = int(func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at exit
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except IngestdError as exc:
        return _report(exc)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
