"""Documents from the shell: ingest, list, re-analyze, needs attention, mark done."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ingestd.cli import tenants as tenant_cli
from ingestd.cli.common import load, print_json, shown
from ingestd.errors import ExitCode, IngestdError
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.tenants import lookup


# -- ingest -----------------------------------------------------------------------------
def cmd_ingest(args: argparse.Namespace) -> int:
    from ingestd.intake.items import Disposal
    from ingestd.ops.runtime import make_intake, open_database

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


# -- documents --------------------------------------------------------------------------
def cmd_documents_analyze(args: argparse.Namespace) -> int:
    """One new analyze-document job per document of the tenant (seed 004's re-analyze).

    A re-analysis sends no workflow webhook unless --redeliver: receivers heard of the
    document when it arrived."""
    from ingestd.ops.runtime import open_database
    from ingestd.queue.enqueue import enqueue
    from ingestd.queue.kinds import JobKind

    config = load(args)
    queued: list[dict[str, int]] = []
    missing: list[int] = []
    with open_database(config) as db, db.transaction() as tx:
        tenant = lookup.by_name(tx, args.tenant)
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
        print_json({"queued": queued, "not_found": missing})
    else:
        for q in queued:
            print(f"document {q['document_id']}: analyze-document job {q['job_id']} queued")
        for m in missing:
            print(f"document {m}: no such document of tenant {args.tenant}", file=sys.stderr)
    return ExitCode.ok if not missing else ExitCode.not_found


def cmd_documents(args: argparse.Namespace) -> int:
    from ingestd.ops.runtime import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        rows = tx.all("documents_list", {"tenant": args.tenant, "limit": args.limit})
    if args.json:
        print_json(rows)
        return ExitCode.ok
    print(
        f"{'ID':>6} {'TENANT':<12} {'SOURCE':<20} {'STATUS':<8} {'ISSUED':<10} {'TITLE':<30} TAGS"
    )
    for r in rows:
        issued = r["issued_date"].isoformat() if r["issued_date"] else "-"
        title = shown(r["title"])[:30]
        source = shown(r["source"])[:20]
        print(
            f"{r['id']:>6} {r['tenant']:<12} {source:<20} {r['processing_status']:<8} "
            f"{issued:<10} {title:<30} {', '.join(r['tags'])}"
        )
    return ExitCode.ok


def cmd_documents_attention(args: argparse.Namespace) -> int:
    """Documents archived but not analysable (encrypted, damaged, over a limit), and why."""
    from ingestd.ops.runtime import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        rows = tx.all("documents_attention", {"tenant": args.tenant, "limit": args.limit})
    if args.json:
        print_json(rows)
        return ExitCode.ok
    if not rows:
        print("no documents need attention")
        return ExitCode.ok
    for r in rows:
        print(f"{r['id']:>6} {r['tenant']:<12} {shown(r['original_filename'])}")
        print(f"{'':>6} {shown(r['attention_reason'] or '')}")
    print(
        f"\n{len(rows)} document(s). Re-queue with `ingestd documents analyze --tenant T ID`, "
        "or accept without text: `ingestd documents mark-done --tenant T ID`"
    )
    return ExitCode.ok


def cmd_documents_mark_done(args: argparse.Namespace) -> int:
    from ingestd.ops.runtime import open_database

    config = load(args)
    done: list[int] = []
    missing: list[int] = []
    with open_database(config) as db, db.transaction() as tx:
        tenant = lookup.by_name(tx, args.tenant)
        for doc_id in args.ids:
            row = tx.one("document_mark_done", {"id": doc_id, "tenant_id": tenant["id"]})
            (done if row else missing).append(doc_id)
    if args.json:
        print_json({"marked_done": done, "not_in_attention": missing})
    for d in done if not args.json else []:
        print(f"document {d}: done without text")
    for m in missing:
        print(
            f"document {m}: not a document of tenant {args.tenant} that needs attention",
            file=sys.stderr,
        )
    return ExitCode.ok if not missing else ExitCode.not_found


def add_parsers(
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """ingest and documents (with the tenant module's trash/purge)."""
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
