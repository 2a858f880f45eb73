"""``documents get``: hand a document out under its original name, verified against the
archive and recorded in the tenant's audit chain."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ingestd.cli.common import load, print_json, shown
from ingestd.errors import ExitCode


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
