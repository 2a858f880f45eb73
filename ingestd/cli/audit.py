"""The audit trail on the command line.

    ingestd audit verify [--no-files] [--no-rehash] [--json]   chains, seals, rows, files
    ingestd audit seal [--json]                                sign (and timestamp) heads
    ingestd audit export --tenant T [--from D] [--to D] -o F  a file for the auditor
    ingestd audit check FILE [--public-key HEX] [--tsa-ca F]   check such a file

verify exits 5 when anything is wrong, listing each problem with its chain and position;
every run is itself recorded in the appliance's chain (``verify.run``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import date
from pathlib import Path
from typing import Any

from ingestd.cli.common import load, print_json
from ingestd.errors import ExitCode


def cmd_verify(args: argparse.Namespace) -> int:
    from ingestd.archive import audit, seals
    from ingestd.archive.audit import SYSTEM_CHAIN, AuditKind
    from ingestd.archive.audit_verify import verify_audit
    from ingestd.ops.runtime import make_archive, open_database

    config = load(args)
    with open_database(config) as db:
        report = verify_audit(
            db,
            None if args.no_files else make_archive(config),
            rehash=not args.no_rehash,
            tsa_ca_file=config.audit.tsa_ca_file,
            public_key=seals.known_public_key(config.paths.state_dir),
        )
        counts = {
            "command": "audit verify",
            "ok": report.ok,
            "chains": report.chains,
            "entries": report.entries,
            "seals": report.seals,
            "documents": report.documents,
            "files": report.files,
        }
        with db.transaction() as tx:
            audit.append(
                tx,
                chain=SYSTEM_CHAIN,
                tenant=None,
                kind=AuditKind.verify_run,
                detail={**counts, "problems": report.by_kind()},
            )
    if args.json:
        print_json({**counts, "problems": [dataclasses.asdict(p) for p in report.problems]})
    else:
        for p in report.problems:
            print(p.line())
        summary = (
            f"{report.entries} entries in {report.chains} chains, {report.seals} seals, "
            f"{report.documents} documents, {report.files} files"
        )
        print(f"{summary}: " + ("intact" if report.ok else f"{len(report.problems)} problem(s)"))
    return ExitCode.ok if report.ok else ExitCode.archive_inconsistent


def cmd_seal(args: argparse.Namespace) -> int:
    from ingestd.archive.seals import seal_all
    from ingestd.ops.runtime import open_database

    config = load(args)
    with open_database(config) as db:
        made = seal_all(db, config.paths.state_dir, config.audit)
    if args.json:
        print_json([dataclasses.asdict(m) for m in made])
    else:
        for m in made:
            ts = ", timestamped" if m.timestamped else ""
            print(f"sealed chain {m.chain} ({m.tenant or 'appliance'}) at entry {m.seq}{ts}")
        print(f"{len(made)} seal(s) made" if made else "every chain was sealed already")
    return ExitCode.ok


def cmd_export(args: argparse.Namespace) -> int:
    from ingestd.archive import seals
    from ingestd.archive.audit_export import export_chain, write_export
    from ingestd.ops.runtime import open_database

    config = load(args)
    pub = seals.known_public_key(config.paths.state_dir)
    with open_database(config) as db:
        if args.output is None or str(args.output) == "-":
            n = export_chain(
                db, args.tenant, sys.stdout, since=args.since, until=args.until, public_key=pub
            )
        else:
            n = write_export(
                db, args.tenant, args.output, since=args.since, until=args.until, public_key=pub
            )
            print(f"{n} entries of tenant {args.tenant} written to {args.output}", file=sys.stderr)
    return ExitCode.ok


def cmd_check(args: argparse.Namespace) -> int:
    from ingestd.archive.export_check import check

    problems = check(args.file, public_key=args.public_key, tsa_ca=args.tsa_ca)
    for line in problems:
        print(line)
    print(f"{args.file}: " + ("intact" if not problems else f"{len(problems)} problem(s)"))
    return ExitCode.ok if not problems else ExitCode.archive_inconsistent


def add_parser(sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser) -> None:
    a = sub.add_parser(
        "audit", parents=[common], help="the audit trail: verify, seal, export, check"
    )
    asub = a.add_subparsers(dest="audit_command", required=True)

    s = asub.add_parser(
        "verify", parents=[common, jsonopt], help="recompute the chains; check seals, rows, files"
    )
    s.add_argument("--no-files", action="store_true", help="chains, seals and rows only")
    s.add_argument("--no-rehash", action="store_true", help="files: presence and size only")
    s.set_defaults(func=cmd_verify)

    s = asub.add_parser("seal", parents=[common, jsonopt], help="seal every chain's head")
    s.set_defaults(func=cmd_seal)

    s = asub.add_parser("export", parents=[common], help="one tenant's chain for an auditor")
    s.add_argument("--tenant", required=True, help="the tenant whose chain to export")
    s.add_argument(
        "--from",
        dest="since",
        type=date.fromisoformat,
        metavar="YYYY-MM-DD",
        help="entries from this day on (default: the chain's start)",
    )
    s.add_argument(
        "--to",
        dest="until",
        type=date.fromisoformat,
        metavar="YYYY-MM-DD",
        help="entries up to and including this day (default: the latest)",
    )
    s.add_argument("-o", "--output", type=Path, help="a new file (default: standard output)")
    s.set_defaults(func=cmd_export)

    s = asub.add_parser("check", help="check an export on its own (no database)")
    s.add_argument("file", type=Path, help="a file `ingestd audit export` wrote")
    s.add_argument("--public-key", help="the appliance's sealing key (hex) to pin")
    s.add_argument("--tsa-ca", type=Path, help="CA file the timestamp authority chains to")
    s.set_defaults(func=cmd_check)
