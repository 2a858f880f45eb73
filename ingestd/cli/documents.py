"""Documents from the shell: ingest, list, re-analyze, needs attention, mark done."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ingestd.cli import tenants as tenant_cli
from ingestd.cli import timebounds
from ingestd.cli.common import (
    CONFIRM_ABOVE,
    confirm,
    load,
    local_time,
    print_json,
    print_table,
    shown,
)
from ingestd.config.settings import Config
from ingestd.errors import ExitCode, IngestdError
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.tenants import lookup


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
    from ingestd.queue.enqueue import enqueue_each
    from ingestd.queue.kinds import JobKind

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
    from ingestd.queue.enqueue import enqueue
    from ingestd.queue.kinds import JobKind

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


def cmd_documents(args: argparse.Namespace) -> int:
    """Newest first: arrival time, original name and source with the title; filtered by
    tenant, name glob, source and arrival time."""
    from ingestd.daemon.wiring import open_database

    config = load(args)
    params = {
        "tenant": args.tenant,
        "limit": args.limit,
        "name": timebounds.like_pattern(args.name) if args.name else None,
        "source": args.source,
        "since": args.since,
        "until": args.until,
    }
    with open_database(config) as db, db.transaction() as tx:
        rows = tx.all("documents_list", params)
    if args.json:
        print_json(rows)
        return ExitCode.ok
    print_table(
        ("ID", "TENANT", "ARRIVED", "SOURCE", "STATUS", "ISSUED", "BATCH", "FILE", "TITLE", "TAGS"),
        (
            [
                r["id"],
                r["tenant"],
                local_time(r["created_at"]),
                shown(r["source"]),
                r["processing_status"],
                r["issued_date"].isoformat() if r["issued_date"] else "-",
                batch_mark(r),
                shown(r["original_filename"]),
                shown(r["title"]),
                shown(", ".join(r["tags"])),
            ]
            for r in rows
        ),
        right=("ID",),
    )
    return ExitCode.ok


def source_parts(source: str) -> tuple[str, str | None]:
    """("sftp", "scanner1") for "sftp:scanner1"; ("cli", None) for "cli"."""
    kind, sep, name = source.partition(":")
    return kind, (name if sep else None)


def batch_mark(row: dict[str, Any]) -> str:
    """A parent's "3 parts", a child's "17#2" (its batch and position), else "-"."""
    if row["parts"]:
        return f"{row['parts']} parts"
    if row["part_of"] is not None:
        return f"{row['part_of']}#{row['position']}"
    return "-"


def cmd_documents_show(args: argparse.Namespace) -> int:
    """One document: its record, and a batch's children or a child's batch with pages."""
    from ingestd.daemon.wiring import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        doc = tx.one("document_show", {"id": args.id, "tenant": args.tenant})
        lineage = tx.all("document_lineage", {"id": args.id}) if doc else []
    if doc is None:
        where = f" of tenant {args.tenant}" if args.tenant else ""
        print(f"document {args.id}: no such document{where}", file=sys.stderr)
        return ExitCode.not_found
    parent = next((r for r in lineage if r["relation"] == "parent"), None)
    children = [r for r in lineage if r["relation"] == "child"]
    if args.json:
        print_json({**doc, "parent": parent, "children": children})
        return ExitCode.ok
    kind, via = source_parts(str(doc["source"]))
    shown_doc = {
        **doc,
        "arrived": local_time(doc["created_at"]),
        "source": kind,
        "via": via,
        "source_subdir": doc["source_subdir"] or None,
    }
    for label, key in (
        ("title", "title"),
        ("tenant", "tenant"),
        ("status", "processing_status"),
        ("issued", "issued_date"),
        ("ASN", "asn"),
        ("original name", "original_filename"),
        ("arrived", "arrived"),
        ("source", "source"),
        (_VIA.get(kind, "via"), "via"),
        ("subfolder", "source_subdir"),
        ("trace id", "trace_id"),
        ("archived", "archive_path"),
        ("sha256", "sha256"),
        ("size", "size_bytes"),
        ("correspondent", "correspondent"),
        ("type", "document_type"),
        ("attention", "attention_reason"),
    ):
        if shown_doc[key] is not None:
            print(f"{label + ':':<15}{shown(str(shown_doc[key]))}")
    print(f"{'tags:':<15}{', '.join(doc['tags']) or '-'}")
    if parent is not None:
        print(
            f"{'batch:':<15}document {parent['id']}, part {parent['position']} of "
            f"{parent['parts']}, {pages(parent)} ({shown(parent['title'])})"
        )
    if children:
        print(f"{'children:':<15}{len(children)}")
        print_table(
            ("PART", "DOCUMENT", "PAGES", "STATUS", "ASN", "TITLE"),
            (
                [
                    f"{c['position']}.",
                    c["id"],
                    pages(c),
                    c["processing_status"],
                    "-" if c["asn"] is None else c["asn"],
                    shown(c["title"]),
                ]
                for c in children
            ),
            right=("PART", "DOCUMENT"),
            indent="  ",
        )
    return ExitCode.ok


# What the part after "kind:" of a source names.
_VIA = {"sftp": "account", "watch": "folder", "mail": "mailbox", "web": "user"}


def pages(row: dict[str, Any]) -> str:
    first, last = row["first_page"], row["last_page"]
    return f"page {first}" if first == last else f"pages {first}-{last}"


def cmd_documents_attention(args: argparse.Namespace) -> int:
    """Documents archived but not analysable (encrypted, damaged, over a limit), and why."""
    from ingestd.daemon.wiring import open_database

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        rows = tx.all("documents_attention", {"tenant": args.tenant, "limit": args.limit})
    if args.json:
        print_json(rows)
        return ExitCode.ok
    if not rows:
        print("no documents need attention")
        return ExitCode.ok
    print_table(
        ("ID", "TENANT", "ARRIVED", "FILE", "REASON"),
        (
            [
                r["id"],
                r["tenant"],
                local_time(r["created_at"]),
                shown(r["original_filename"]),
                shown(r["attention_reason"] or "-"),
            ]
            for r in rows
        ),
        right=("ID",),
    )
    print(
        f"\n{len(rows)} document(s). Re-queue with `ingestd documents analyze --tenant T ID`, "
        "or accept without text: `ingestd documents mark-done --tenant T ID`"
    )
    return ExitCode.ok


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
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """ingest and documents (with the tenant module's trash/purge)."""
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

    s = sub.add_parser(
        "documents",
        aliases=["document"],
        parents=[common],
        help="list, re-analyze, trash and purge documents",
    )
    dsub = s.add_subparsers(dest="documents_cmd", required=True)
    tenant_cli.add_document_parsers(dsub, common, jsonopt)
    d = dsub.add_parser(
        "list", parents=[common, jsonopt], help="newest documents first, every column whole"
    )
    d.add_argument("--tenant", default=None, help="only this tenant's documents")
    d.add_argument(
        "--name",
        default=None,
        metavar="GLOB",
        help="only documents whose original file name matches GLOB (* and ?, any case), "
        "e.g. 'Scan_0815*'",
    )
    d.add_argument(
        "--source",
        default=None,
        metavar="S",
        help="only from this source: sftp:ACCOUNT, watch:FOLDER, its kind (sftp, watch, "
        "cli) or the account or folder name alone",
    )
    d.add_argument(
        "--since",
        type=timebounds.since,
        default=None,
        metavar="TIME",
        help="arrived at or after TIME: 2026-12-04, '2026-12-04 08:30', today, yesterday, "
        "or an age (90m, 2h, 3d)",
    )
    d.add_argument(
        "--until",
        type=timebounds.until,
        default=None,
        metavar="TIME",
        help="arrived before TIME (a date: up to the end of that day)",
    )
    d.add_argument(
        "--limit",
        type=int,
        default=50,
        metavar="N",
        help="at most N documents (default %(default)s)",
    )
    d.set_defaults(func=cmd_documents)
    add_get_parser(dsub, common, jsonopt)
    d = dsub.add_parser(
        "show", parents=[common, jsonopt], help="one document, with its batch or its children"
    )
    d.add_argument("--tenant", default=None, help="only if it is this tenant's document")
    d.add_argument("id", type=int, metavar="ID", help="the document's id")
    d.set_defaults(func=cmd_documents_show)
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
        "attention",
        parents=[common, jsonopt],
        help="documents archived but not analysable, with the reason",
    )
    d.add_argument("--tenant", default=None, help="only this tenant's documents")
    d.add_argument(
        "--limit",
        type=int,
        default=200,
        metavar="N",
        help="at most N documents (default %(default)s)",
    )
    d.set_defaults(func=cmd_documents_attention)
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


# -- get: hand a document out -------------------------------------------------------------
def cmd_documents_get(args: argparse.Namespace) -> int:
    """Write the original (or the searchable PDF) under its original name, re-hashed
    against the archive, recorded in the tenant's audit chain (ingestd/archive/handout.py)."""
    from ingestd.archive import handout, handout_files
    from ingestd.archive.backends import make_archive
    from ingestd.daemon.wiring import open_database
    from ingestd.errors import UsageError

    if args.output == "-" and args.json:
        raise UsageError("-o - writes the document to stdout; --json has no room there")
    config = load(args)
    dest = handout_files.Destination.parse(args.output, sys.stdout.buffer)
    with open_database(config) as db:
        done = handout.hand_out(
            db,
            make_archive(config),
            config.paths.derived_dir,
            args.id,
            tenant=args.tenant,
            searchable=args.searchable,
            dest=dest,
        )
    report = {
        "document_id": done.document_id,
        "tenant": done.tenant,
        "variant": done.variant,
        "sha256": done.sha256,
        "size": done.size,
        "name": done.name,
        "path": str(done.path) if done.path else "-",
    }
    if args.json:
        print_json(report)
    elif done.path is not None:
        print(
            f"document {done.document_id} ({done.variant}): {shown(str(done.path))}, "
            f"{done.size:,} bytes, sha256 {done.sha256} verified"
            + (" against the archive" if done.variant == "original" else "")
        )
    return ExitCode.ok


def add_get_parser(
    dsub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """`documents get ID [--tenant T] [--searchable] [-o FILE|DIR|-]`."""
    d = dsub.add_parser(
        "get",
        parents=[common, jsonopt],
        help="hand a document out under its original name (verified, audited)",
        description="Write a document's original (or, with --searchable, its searchable "
        "PDF) under its original file name, made safe (no path separators, control "
        "characters or leading dots; a name taken in the directory gets ' (2)'). The "
        "original is re-hashed against the archive's SHA-256 on the way out: a mismatch "
        "writes nothing and exits 5. Each hand-out is a document.handed_out entry in the "
        "tenant's audit chain (who, what, when).",
    )
    d.add_argument("--tenant", default=None, help="only if it is this tenant's document")
    d.add_argument(
        "--searchable",
        action="store_true",
        help="the searchable PDF analysis made (exit 7 with the reason if it has none yet)",
    )
    d.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE|DIR|-",
        help="a directory (default: the current one) to write it into under its original "
        "name, a new file (never overwritten), or - for stdout",
    )
    d.add_argument("id", type=int, metavar="ID", help="the document's id")
    d.set_defaults(func=cmd_documents_get)
