"""``ingestd jobs list|show|retry|cancel``: look at the queue and act on jobs, by id or
(``retry --failed``) every failed job of a tenant or kind at once."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

from ingestd.cli.common import CONFIRM_ABOVE, confirm, load, print_json, print_table, shown
from ingestd.errors import ExitCode, NotFound
from ingestd.tenants import lookup

# The reason job_cancel records; `jobs retry --failed` leaves such jobs alone.
CANCELLED = "cancelled by an administrator"

_ALLOWED = {
    "retry": "only failed jobs, or queued ones waiting for a retry, can be retried",
    "cancel": "only queued jobs can be cancelled",
}
# At a terminal and without --wide, `jobs list` cuts the ERROR column to what is left of
# the line, but never shorter than this.
_ERROR_MIN = 20


def cmd_jobs(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database

    if args.jobs_cmd == "retry" and not args.failed and (args.tenant or args.kind):
        print(
            "ingestd: --tenant and --kind choose which failed jobs: add --failed", file=sys.stderr
        )
        return ExitCode.usage
    config = load(args)
    with open_database(config) as db:
        if args.jobs_cmd == "retry" and args.failed:
            return _retry_failed(db, args)
        with db.transaction() as tx:
            if args.jobs_cmd == "list":
                return _list(tx, args)
            if args.jobs_cmd == "show":
                return _show(tx, args)
            return _act(tx, args)


def _list(tx: Any, args: argparse.Namespace) -> int:
    rows = tx.all(
        "jobs_list",
        {"tenant": args.tenant, "status": args.status, "kind": args.kind, "limit": args.limit},
    )
    if args.json:
        print_json(rows)
        return ExitCode.ok
    header = ("ID", "TENANT", "KIND", "STATUS", "TRY", "DOC", "ERROR")
    table = [
        [r["id"], r["tenant"], r["kind"], r["status"], r["retry_count"], r["document_id"] or "-"]
        for r in rows
    ]
    errors = [shown(" ".join((r["error"] or "").split())) for r in rows]
    if not args.wide and sys.stdout.isatty():
        # Every column but the last is shown whole; the free text gets the rest of the line.
        used = sum(max(len(str(c)) for c in col) + 2 for col in zip(header, *table, strict=False))
        room = max(_ERROR_MIN, shutil.get_terminal_size().columns - used)
        errors = [e if len(e) <= room else e[: room - 1] + "…" for e in errors]
    print_table(
        header, [[*t, e] for t, e in zip(table, errors, strict=True)], right=("ID", "TRY", "DOC")
    )
    return ExitCode.ok


def _show(tx: Any, args: argparse.Namespace) -> int:
    row = tx.one("job_show", {"id": args.id})
    if row is None:
        raise NotFound(f"job {args.id} does not exist")
    if args.json:
        print_json(row)
    else:
        width = max(len(key) for key in row) + 1
        for key, value in row.items():
            print(f"{key:<{width}} {value}")
    return ExitCode.ok


def _act(tx: Any, args: argparse.Namespace) -> int:
    """retry or cancel the jobs named by id, in one statement; each refused one is said why."""
    retry = args.jobs_cmd == "retry"
    ids = list(dict.fromkeys(args.ids))
    params: dict[str, Any] = {"ids": ids} if retry else {"ids": ids, "reason": CANCELLED}
    done = {int(r["id"]) for r in tx.all("job_retry" if retry else "job_cancel", params)}
    refused: list[dict[str, Any]] = []
    for job_id in ids:
        if job_id not in done:
            current = tx.one("job_show", {"id": job_id})
            why = "does not exist" if current is None else f"is {current['status']}"
            refused.append({"id": job_id, "reason": f"{why}; {_ALLOWED[args.jobs_cmd]}"})
    acted = [i for i in ids if i in done]
    if args.json:
        print_json({"retried" if retry else "cancelled": acted, "refused": refused})
    else:
        for job_id in acted:
            print(f"job {job_id}: {'queued again' if retry else 'cancelled'}")
        for r in refused:
            print(f"job {r['id']}: {r['reason']}", file=sys.stderr)
    return ExitCode.refused if refused else ExitCode.ok


def _retry_failed(db: Any, args: argparse.Namespace) -> int:
    """Every failed job (of --tenant, of --kind), but those an admin cancelled: counted,
    confirmed above CONFIRM_ABOVE, then retried in one statement (job_retry)."""
    with db.transaction() as tx:
        tenant_id = int(lookup.by_name(tx, args.tenant)["id"]) if args.tenant else None
        params = {"tenant_id": tenant_id, "kind": args.kind, "cancelled": CANCELLED}
        ids = [int(r["id"]) for r in tx.all("jobs_failed", params)]
    what = "failed " + (f"{args.kind} " if args.kind else "")
    of = f" of tenant {args.tenant}" if args.tenant else ""
    confirm(len(ids), f"retry {len(ids):,} {what}{_jobs(len(ids))}{of}", yes=args.yes)
    queued = 0
    if ids:
        # The very jobs counted, each only if still failed (job_retry's own condition).
        with db.transaction() as tx:
            queued = len(tx.all("job_retry", {"ids": ids}))
    if args.json:
        print_json({"queued": queued})
    else:
        print(f"{queued:,} {what}{_jobs(queued)}{of} queued again")
    return ExitCode.ok


def _jobs(n: int) -> str:
    return "job" if n == 1 else "jobs"


def add_parser(sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser) -> None:
    s = sub.add_parser("jobs", parents=[common], help="list, show, retry or cancel jobs")
    jsub = s.add_subparsers(dest="jobs_cmd", required=True)
    j = jsub.add_parser("list", parents=[common, jsonopt], help="newest jobs first")
    j.add_argument("--tenant", default=None, help="only this tenant's jobs")
    j.add_argument(
        "--status",
        choices=["queued", "processing", "done", "failed"],
        default=None,
        help="only jobs in this status",
    )
    j.add_argument("--kind", default=None, metavar="KIND", help="only jobs of this kind")
    j.add_argument(
        "--limit", type=int, default=50, metavar="N", help="at most N jobs (default %(default)s)"
    )
    j.add_argument(
        "--wide",
        action="store_true",
        help="never cut the ERROR column to the terminal's width (output to a pipe is never cut)",
    )
    j.set_defaults(func=cmd_jobs)
    j = jsub.add_parser("show", parents=[common, jsonopt], help="one job, every column")
    j.add_argument("id", type=int, metavar="ID", help="the job's id")
    j.set_defaults(func=cmd_jobs)
    j = jsub.add_parser(
        "retry",
        parents=[common, jsonopt],
        help="run failed jobs again (fresh attempts): by id, or all with --failed",
    )
    which = j.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "ids", type=int, nargs="*", default=[], metavar="ID", help="the jobs to retry"
    )
    which.add_argument(
        "--failed",
        action="store_true",
        help="every failed job (but those cancelled), or those of --tenant and --kind",
    )
    j.add_argument("--tenant", default=None, help="with --failed: only this tenant's jobs")
    j.add_argument(
        "--kind", default=None, metavar="KIND", help="with --failed: only jobs of this kind"
    )
    j.add_argument(
        "--yes",
        action="store_true",
        help="with --failed: go ahead however many jobs match (without it, more than "
        f"{CONFIRM_ABOVE} need a y at the terminal)",
    )
    j.set_defaults(func=cmd_jobs)
    j = jsub.add_parser(
        "cancel", parents=[common, jsonopt], help="fail queued jobs (never retried)"
    )
    j.add_argument("ids", type=int, nargs="+", metavar="ID", help="the jobs to cancel")
    j.set_defaults(func=cmd_jobs)
