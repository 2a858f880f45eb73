"""``ingestd ingest``: files from the shell into the intake, with the outcome of each."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ingestd.cli.common import load, print_json, shown
from ingestd.errors import ExitCode, IngestdError
from ingestd.intake.items import IntakeItem, Outcome


# -- ingest -----------------------------------------------------------------------------
def cmd_ingest(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import make_intake, open_database
    from ingestd.intake.items import Disposal

    config = load(args)
    disposal = Disposal.keep if args.keep_source else Disposal.delete
    report: list[dict[str, Any]] = []
    worst = ExitCode.ok
    with open_database(config) as db:
        intake = make_intake(config, db)
        for raw in args.files:
            path = Path(raw)
            entry: dict[str, Any] = {"file": shown(str(path))}
            try:
                # The tenant's default split policy applies to the shell too (--no-split:
                # these files are single documents).
                split = None if args.no_split else config.split_policy(args.tenant, None)
                item = IntakeItem(path=path, tenant=args.tenant, split=split)
                res = intake.ingest(item, disposal=disposal)
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
        print_json(report)
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


def add_parser(sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser) -> None:
    """`ingest --tenant T [--keep-source] [--no-split] FILE...`."""
    s = sub.add_parser("ingest", parents=[common, jsonopt], help="ingest files from the shell")
    s.add_argument("--tenant", required=True, help="the tenant the files are for")
    s.add_argument("--keep-source", action="store_true", help="do not remove files after COMMIT")
    s.add_argument(
        "--no-split",
        action="store_true",
        help="each file is one document, even if the tenant has a [split.<tenant>] policy",
    )
    s.add_argument("files", nargs="+", metavar="FILE", help="the files to ingest")
    s.set_defaults(func=cmd_ingest)
