"""``ingestd jobs list|show|retry|cancel``: look at the queue and act on single jobs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ingestd.errors import ExitCode, NotFound

_ALLOWED = {
    "job_retry": "only failed jobs, or queued ones waiting for a retry, can be retried",
    "job_cancel": "only queued jobs can be cancelled",
}


def cmd_jobs(args: argparse.Namespace) -> int:
    from ingestd.cli.common import load, print_json
    from ingestd.ops.runtime import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        if args.jobs_cmd == "list":
            rows = tx.all(
                "jobs_list",
                {
                    "tenant": args.tenant,
                    "status": args.status,
                    "kind": args.kind,
                    "limit": args.limit,
                },
            )
            if args.json:
                print_json(rows)
                return ExitCode.ok
            print(
                f"{'ID':>8} {'TENANT':<14} {'KIND':<18} {'STATUS':<10} {'TRY':>3} {'DOC':>8}  ERROR"
            )
            for r in rows:
                err = (r["error"] or "").replace("\n", " ")[:60]
                print(
                    f"{r['id']:>8} {r['tenant']:<14} {r['kind']:<18} {r['status']:<10} "
                    f"{r['retry_count']:>3} {r['document_id'] or '-':>8}  {err}"
                )
            return ExitCode.ok
        if args.jobs_cmd == "show":
            row = tx.one("job_show", {"id": args.id})
            if row is None:
                raise NotFound(f"job {args.id} does not exist")
            if args.json:
                print_json(row)
            else:
                for key, value in row.items():
                    print(f"{key:<18} {value}")
            return ExitCode.ok
        failed = 0
        for job_id in args.ids:
            query = "job_retry" if args.jobs_cmd == "retry" else "job_cancel"
            if tx.one(query, {"id": job_id}) is not None:
                print(f"job {job_id}: {'queued again' if query == 'job_retry' else 'cancelled'}")
                continue
            failed += 1
            current = tx.one("job_show", {"id": job_id})
            why = "does not exist" if current is None else f"is {current['status']}"
            allowed = _ALLOWED[query]
            print(f"job {job_id}: {why}; {allowed}", file=sys.stderr)
        return ExitCode.refused if failed else ExitCode.ok


def add_parser(sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser) -> None:
    s = sub.add_parser("jobs", parents=[common], help="list, show, retry or cancel jobs")
    jsub = s.add_subparsers(dest="jobs_cmd", required=True)
    j = jsub.add_parser("list", parents=[common, jsonopt], help="newest jobs first")
    j.add_argument("--tenant", default=None)
    j.add_argument("--status", choices=["queued", "processing", "done", "failed"], default=None)
    j.add_argument("--kind", default=None)
    j.add_argument("--limit", type=int, default=50)
    j.set_defaults(func=cmd_jobs)
    j = jsub.add_parser("show", parents=[common, jsonopt], help="one job, every column")
    j.add_argument("id", type=int)
    j.set_defaults(func=cmd_jobs)
    j = jsub.add_parser("retry", parents=[common], help="run failed jobs again (fresh attempts)")
    j.add_argument("ids", type=int, nargs="+", metavar="ID")
    j.set_defaults(func=cmd_jobs)
    j = jsub.add_parser("cancel", parents=[common], help="fail queued jobs (never retried)")
    j.add_argument("ids", type=int, nargs="+", metavar="ID")
    j.set_defaults(func=cmd_jobs)
