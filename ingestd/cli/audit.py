"""The audit trail on the command line.

    ingestd audit verify [--public-key F] [--no-files] [--no-rehash] [--json]
                                                      chains, seals, rows, files
    ingestd audit seal [--json]                       sign (and timestamp) heads
    ingestd audit rotate-key [--old-key-lost]         a new sealing key, vouched for
    ingestd audit export --tenant T [--from D] [--to D] -o F   a file for the auditor
    ingestd audit check FILE [--public-key F] [--tsa-ca F]     check such a file

Seals are checked against a public key the verifier holds: ``--public-key FILE``, by
default the appliance's ``<state_dir>/audit/seal-ed25519.pub``; never one derived from
the private key. verify exits 5 when anything is wrong, listing each problem with its
chain and position, and 11 when only the key is: missing, unreadable or not a key while
the trail has seals. Every run is itself recorded in the appliance's chain
(``verify.run``).
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


def _anchor(args: argparse.Namespace, state_dir: Path | None) -> Any:
    """The public key the seals are checked against: ``--public-key`` (a file, or the 64
    hex digits), else the ``.pub`` in the state directory; why not, when it is unusable."""
    from ingestd.archive.audit_checker import Anchor
    from ingestd.archive.export_check import KeyUnusable, resolve_public_key
    from ingestd.archive.sealkey import public_path

    if args.public_key:
        path, explicit = str(args.public_key), True
    elif state_dir is not None:
        path, explicit = str(public_path(state_dir)), False
    else:
        return Anchor(path="(none)", why="no --public-key given and no config", explicit=True)
    try:
        return Anchor(path=path, key=resolve_public_key(path), explicit=explicit)
    except KeyUnusable as exc:
        return Anchor(path=path, why=str(exc), explicit=explicit)


def cmd_verify(args: argparse.Namespace) -> int:
    from ingestd.archive import audit
    from ingestd.archive.audit import SYSTEM_CHAIN, AuditKind
    from ingestd.archive.audit_verify import verify_audit
    from ingestd.archive.backends import make_archive
    from ingestd.archive.sealkey import read_witness
    from ingestd.daemon.wiring import open_database

    config = load(args)
    anchor = _anchor(args, config.paths.state_dir)
    with open_database(config) as db:
        report = verify_audit(
            db,
            None if args.no_files else make_archive(config),
            rehash=not args.no_rehash,
            tsa_ca_file=config.audit.tsa_ca_file,
            anchor=anchor,
            witness=read_witness(config.paths.state_dir),
        )
        counts = {
            "command": "audit verify",
            "ok": report.ok,
            "chains": report.chains,
            "entries": report.entries,
            "seals": report.seals,
            "documents": report.documents,
            "files": report.files,
            "public_key": anchor.path,
            "key": report.key,
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
        if report.key:
            summary += f"; seals checked against {report.key} ({anchor.path})"
        elif not report.seals:
            summary += "; no seal yet (`ingestd audit seal`)"
        print(f"{summary}: " + ("intact" if report.ok else f"{len(report.problems)} problem(s)"))
    if report.ok:
        return ExitCode.ok
    return ExitCode.key_unusable if report.key_only else ExitCode.archive_inconsistent


def cmd_seal(args: argparse.Namespace) -> int:
    from ingestd.archive.seals import seal_all
    from ingestd.daemon.wiring import open_database

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


def cmd_rotate_key(args: argparse.Namespace) -> int:
    from ingestd.archive.export_check import fingerprint
    from ingestd.archive.sealkey import public_path, rotate
    from ingestd.daemon.wiring import open_database

    config = load(args)
    with open_database(config) as db:
        done = rotate(db, config.paths.state_dir, old_key_lost=args.old_key_lost)
    old = fingerprint(done.old) if done.old else "none"
    new = fingerprint(done.new)
    if args.json:
        print_json({"from": old, "to": new, "entry": done.seq, "public_key": done.new})
    else:
        signed = "the new key only (the old one was lost)" if args.old_key_lost else "both keys"
        print(f"sealing key rotated: {old} -> {new} (appliance chain entry {done.seq})")
        print(f"the change is signed by {signed}")
        print(f"give your auditors {public_path(config.paths.state_dir)} ({new})")
    return ExitCode.ok


def cmd_export(args: argparse.Namespace) -> int:
    from ingestd.archive.audit_export import export_chain, write_export
    from ingestd.daemon.wiring import open_database

    config = load(args)
    with open_database(config) as db:
        if args.output is None or str(args.output) == "-":
            n = export_chain(db, args.tenant, sys.stdout, since=args.since, until=args.until)
        else:
            n = write_export(db, args.tenant, args.output, since=args.since, until=args.until)
            print(f"{n} entries of tenant {args.tenant} written to {args.output}", file=sys.stderr)
    return ExitCode.ok


def cmd_check(args: argparse.Namespace) -> int:
    from ingestd.archive.export_check import check, summary
    from ingestd.errors import ConfigError

    state_dir = None
    if not args.public_key:
        try:  # an auditor's machine has no config: then --public-key is needed
            state_dir = load(args).paths.state_dir
        except ConfigError:
            state_dir = None
    anchor = _anchor(args, state_dir)
    if anchor.key is None:
        print(
            f"ingestd: the seals cannot be checked: {anchor.why} (pass --public-key FILE)",
            file=sys.stderr,
        )
        return ExitCode.key_unusable
    problems, facts = check(args.file, public_key=anchor.key, tsa_ca=args.tsa_ca)
    for line in problems:
        print(line)
    print(summary(args.file, problems, facts))
    return ExitCode.ok if not problems else ExitCode.archive_inconsistent


_KEY_HELP = (
    "the appliance's public sealing key to check the seals against: a file (the "
    "seal-ed25519.pub you keep) or its 64 hex digits; default: "
    "<state_dir>/audit/seal-ed25519.pub"
)


def add_parser(sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser) -> None:
    a = sub.add_parser(
        "audit", parents=[common], help="the audit trail: verify, seal, export, check"
    )
    asub = a.add_subparsers(dest="audit_command", required=True)

    s = asub.add_parser(
        "verify", parents=[common, jsonopt], help="recompute the chains; check seals, rows, files"
    )
    s.add_argument("--public-key", metavar="FILE", help=_KEY_HELP)
    s.add_argument("--no-files", action="store_true", help="chains, seals and rows only")
    s.add_argument("--no-rehash", action="store_true", help="files: presence and size only")
    s.set_defaults(func=cmd_verify)

    s = asub.add_parser("seal", parents=[common, jsonopt], help="seal every chain's head")
    s.set_defaults(func=cmd_seal)

    s = asub.add_parser(
        "rotate-key",
        parents=[common, jsonopt],
        help="replace the sealing key; the old key and the new sign the change",
    )
    s.add_argument(
        "--old-key-lost",
        action="store_true",
        help="the old private key is gone: the change is signed by the new key only "
        "(auditors who hold the old key must pin the new one)",
    )
    s.set_defaults(func=cmd_rotate_key)

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

    s = asub.add_parser("check", parents=[common], help="check an export on its own (no database)")
    s.add_argument("file", type=Path, help="a file `ingestd audit export` wrote")
    s.add_argument("--public-key", metavar="FILE", help=_KEY_HELP)
    s.add_argument("--tsa-ca", type=Path, help="CA file the timestamp authority chains to")
    s.set_defaults(func=cmd_check)
