"""Documents again: ``documents analyze`` (queue the analysis again, one or all),
``documents split`` (a batch by its source's policy) and ``documents mark-done``
(accept a document in attention without text)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ingestd.cli.common import CONFIRM_ABOVE, confirm, load, print_json
from ingestd.config.settings import Config
from ingestd.errors import ExitCode
from ingestd.tenants import lookup


# -- documents --------------------------------------------------------------------------
def cmd_documents_analyze(args: argparse.Namespace) -> int:
    """One new analyze-document job per document of the tenant (seed 004's re-analyze).

    A re-analysis sends no workflow webhook unless --redeliver: receivers heard of the
    document when it arrived."""
    from ingestd.daemon.wiring import open_database
    from ingestd.queue.reanalyze import reanalyze

    config = load(args)
    if args.all:
        return _analyze_all(args, config)
    queued: list[dict[str, int]] = []
    missing: list[int] = []
    split: list[dict[str, int]] = []
    with open_database(config) as db, db.transaction() as tx:
        tenant = lookup.by_name(tx, args.tenant)
        for doc_id in args.ids:
            done = reanalyze(
                tx, int(tenant["id"]), doc_id, force=args.force, redeliver=args.redeliver
            )
            if done.missing:
                missing.append(doc_id)
            elif done.parts:
                split.append({"document_id": doc_id, "parts": done.parts})
            else:
                assert done.job_id is not None
                queued.append({"document_id": doc_id, "job_id": done.job_id})
    if args.json:
        print_json({"queued": queued, "not_found": missing, "split": split})
    else:
        for q in queued:
            print(f"document {q['document_id']}: analyze-document job {q['job_id']} queued")
        for m in missing:
            print(f"document {m}: no such document of tenant {args.tenant}", file=sys.stderr)
        for b in split:
            print(
                f"document {b['document_id']}: a batch split into {b['parts']} documents; "
                "analyse those (`ingestd documents show` lists them)",
                file=sys.stderr,
            )
    if missing:
        return ExitCode.not_found
    return ExitCode.ok if not split else ExitCode.refused


def _analyze_all(args: argparse.Namespace, config: Config) -> int:
    """--all: one analyze-document job for every document of an active tenant, in one
    statement (documents_reanalyze: not those in the trash, split batches, nor those with
    one queued already); counted first, and confirmed above CONFIRM_ABOVE."""
    from ingestd.daemon.wiring import open_database
    from ingestd.jobkinds import JobKind
    from ingestd.queue.enqueue import enqueue_each

    payload = {"force": args.force, "reanalysis": True, "redeliver": args.redeliver}

    def run(tx: Any, *, count_only: bool) -> dict[str, Any]:
        # A suspended (or deleting) tenant's jobs would only fail: refused here, and the
        # statement checks again.
        tenant_id = lookup.active_id(lookup.by_name(tx, args.tenant))
        params = {"tenant_id": tenant_id, "count_only": count_only}
        return enqueue_each(
            tx, "documents_reanalyze", params, kind=JobKind.analyze_document, payload=payload
        )

    with open_database(config) as db:
        if not args.yes:
            with db.transaction() as tx:
                n = int(run(tx, count_only=True)["eligible"])
            confirm(n, f"re-analyse {n:,} {_documents(n)} of tenant {args.tenant}", yes=False)
        with db.transaction() as tx:
            counts = run(tx, count_only=False)
    queued = int(counts["queued"])
    skipped = {k: int(counts[k]) for k in ("trashed", "batches", "already_queued")}
    if args.json:
        print_json({"tenant": args.tenant, "queued": queued, "skipped": skipped})
        return ExitCode.ok
    print(f"tenant {args.tenant}: analyze-document queued for {queued:,} {_documents(queued)}")
    left_out = [
        f"{n:,} {text}"
        for n, text in (
            (skipped["trashed"], "in the trash"),
            (skipped["batches"], "split batches (analysed through their documents)"),
            (skipped["already_queued"], "with an analysis queued already"),
        )
        if n
    ]
    if left_out:
        print(f"left out: {'; '.join(left_out)}")
    return ExitCode.ok


def _documents(n: int) -> str:
    return "document" if n == 1 else "documents"


def cmd_documents_split(args: argparse.Namespace) -> int:
    """Queue split-batch for batches: one flagged for attention (a separator missing, an
    ASN taken), or a document that arrived before its source had a policy (the tenant's
    default applies then)."""
    from pydantic import ValidationError

    from ingestd.config.split import SplitPolicy
    from ingestd.daemon.wiring import open_database
    from ingestd.jobkinds import JobKind
    from ingestd.queue.enqueue import enqueue

    config = load(args)
    queued: list[dict[str, int]] = []
    refused: list[dict[str, Any]] = []
    with open_database(config) as db, db.transaction() as tx:
        tenant = lookup.by_name(tx, args.tenant)
        for doc_id in args.ids:
            row = tx.one("split_state", {"id": doc_id, "tenant_id": tenant["id"]})
            why = _not_splittable(row, args.tenant)
            default = config.split.get(args.tenant)
            policy = row["policy"] if row and row["policy"] else None
            if policy is None and default is not None:
                policy = default.as_payload()
            if why is None and policy is None:
                why = (
                    f"no split policy: its source had none and tenant {args.tenant} has no "
                    f"[split.{args.tenant}] default"
                )
            if why is None and policy is not None:
                try:  # a policy an older release stored must still read
                    SplitPolicy.model_validate(policy)
                except ValidationError as exc:
                    why = f"its stored split policy no longer reads: {exc.errors()[0]['msg']}"
            if why is not None or row is None:
                refused.append({"document_id": doc_id, "reason": why})
                continue
            payload: dict[str, Any] = {"document_id": doc_id, "policy": policy}
            if args.max_pages:
                payload["max_pages"] = args.max_pages
            job_id = enqueue(
                tx,
                tenant_id=int(tenant["id"]),
                document_id=doc_id,
                kind=JobKind.split_batch,
                payload=payload,
                trace=row["trace_id"],
            )
            queued.append({"document_id": doc_id, "job_id": job_id})
    if args.json:
        print_json({"queued": queued, "refused": refused})
    else:
        for q in queued:
            print(f"document {q['document_id']}: split-batch job {q['job_id']} queued")
        for r in refused:
            print(f"document {r['document_id']}: {r['reason']}", file=sys.stderr)
    return ExitCode.ok if not refused else ExitCode.not_found


def _not_splittable(row: dict[str, Any] | None, tenant: str) -> str | None:
    if row is None:
        return f"no such document of tenant {tenant}"
    if row["parts"]:
        return f"already split into {row['parts']} documents (`ingestd documents show`)"
    if row["busy"]:
        return "a job of it is queued or running; wait for it"
    if row["mime_type"] not in ("application/pdf", "image/tiff"):
        return f"a {row['mime_type']} file is never a batch (only PDF and TIFF are)"
    return None


def cmd_documents_mark_done(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database

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
    dsub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """`documents split|analyze|mark-done`."""
    d = dsub.add_parser(
        "split",
        parents=[common, jsonopt],
        help="split a batch (again) by its source's policy, e.g. one that needs attention",
    )
    d.add_argument("--tenant", required=True, help="the documents' tenant")
    d.add_argument(
        "--max-pages",
        type=int,
        default=None,
        help="allow children this long (the batch was flagged: a separator may be missing)",
    )
    d.add_argument("ids", nargs="+", type=int, metavar="ID", help="the batches to split")
    d.set_defaults(func=cmd_documents_split)
    d = dsub.add_parser(
        "analyze",
        parents=[common, jsonopt],
        help="queue analyze-document again (re-OCR, re-derive): by id, or all with --all",
    )
    d.add_argument("--tenant", required=True, help="the documents' tenant")
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
    which = d.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "ids", nargs="*", type=int, default=[], metavar="ID", help="the documents to analyse"
    )
    which.add_argument(
        "--all",
        action="store_true",
        help="every document of the (active) tenant, but those in the trash, split batches "
        "and those with an analysis queued already",
    )
    d.add_argument(
        "--yes",
        action="store_true",
        help="with --all: go ahead however many documents there are (without it, more "
        f"than {CONFIRM_ABOVE} need a y at the terminal)",
    )
    d.set_defaults(func=cmd_documents_analyze)
    d = dsub.add_parser(
        "mark-done",
        parents=[common, jsonopt],
        help="accept documents that need attention as done, without text",
    )
    d.add_argument("--tenant", required=True, help="the documents' tenant")
    d.add_argument(
        "ids", nargs="+", type=int, metavar="ID", help="the documents to accept without text"
    )
    d.set_defaults(func=cmd_documents_mark_done)
