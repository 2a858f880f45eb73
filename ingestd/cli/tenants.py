"""Tenant lifecycle and document purge on the command line (seed 004's admin actions).

    ingestd tenant create NAME [--member M]... [--wait S]   creating + provision-tenant job
    ingestd tenant list | suspend NAME | activate NAME
    ingestd tenant limits NAME [--weight W] [--max-running N | --no-max-running]
    ingestd tenant delete NAME --confirm NAME               deleting + signed delete-tenant
    ingestd tenant reset NAME --confirm NAME [--final-status active|suspended]
    ingestd document trash --tenant T ID...                 mark for purging
    ingestd document purge --tenant T ID...                 purge-document jobs

The destructive commands only mark and enqueue; a worker does the work after verifying
the signed request (delete) or the retention period (purge).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ingestd.archive import retention
from ingestd.config.settings import Config
from ingestd.db.database import Tx
from ingestd.errors import ExitCode, TenantError
from ingestd.jobkinds import JobKind
from ingestd.people import accounts
from ingestd.queue.enqueue import enqueue
from ingestd.states import TenantStatus
from ingestd.tenants import lookup, signing

WAIT_POLL = 0.2


def _tenant(tx: Tx, name: str) -> dict[str, Any]:
    return lookup.by_name(tx, name)


def _enqueue(
    tx: Tx, tenant_id: int, kind: JobKind, payload: dict[str, Any], document_id: int | None = None
) -> int:
    return enqueue(tx, tenant_id=tenant_id, kind=kind, payload=payload, document_id=document_id)


def cmd_tenant(args: argparse.Namespace) -> int:
    from ingestd.cli.common import load, print_json, print_table
    from ingestd.daemon.wiring import open_database

    config = load(args)
    with open_database(config) as db:
        with db.transaction() as tx:
            if args.tenant_cmd == "list":
                rows = tx.all("tenant_list")
                if args.json:
                    print_json(rows)
                else:
                    print_table(
                        ("NAME", "STATUS", "DOCUMENTS", "WEIGHT", "MAX RUNNING"),
                        (
                            [
                                r["name"],
                                r["status"],
                                r["documents"],
                                r["weight"],
                                r["max_running"] or "-",
                            ]
                            for r in rows
                        ),
                        right=("DOCUMENTS", "WEIGHT", "MAX RUNNING"),
                    )
                return ExitCode.ok
            if args.tenant_cmd == "limits":
                return _limits(tx, args)
            if args.tenant_cmd == "create":
                members = list(dict.fromkeys(args.member))
                for member in members:  # before anything is made: provisioning stores them
                    accounts.check_login(member)
                row = tx.one("tenant_insert", {"name": args.name, "status": TenantStatus.creating})
                if row is None:
                    raise TenantError(f"tenant {args.name!r} already exists")
                job = _enqueue(tx, int(row["id"]), JobKind.provision_tenant, {"members": members})
                print(
                    f"created tenant {row['name']} (id {row['id']}, creating); "
                    f"provision-tenant job {job} queued"
                )
                if members:
                    print(
                        f"members {', '.join(members)} become its owners when it is active; "
                        "each logs in once given a password: ingestd user passwd LOGIN"
                    )
            elif args.tenant_cmd in ("delete", "reset"):
                return _delete(tx, args, config)
            else:
                return _set_status(tx, args)
        if args.tenant_cmd == "create" and args.wait > 0:
            return _wait_active(db, args.name, args.wait)
    return ExitCode.ok


def _limits(tx: Tx, args: argparse.Namespace) -> int:
    """Set the tenant's weight and cap, which every worker's claim reads (migration 0014);
    with neither option, show them."""
    from ingestd.cli.common import print_json

    _tenant(tx, args.name)  # TenantNotFound names the tenant
    row = tx.one(
        "tenant_limits_set",
        {
            "name": args.name,
            "weight": args.weight,
            "max_running": args.max_running,
            "uncap": args.no_max_running,
        },
    )
    assert row is not None  # the tenant exists (checked above, in this transaction)
    out = {"tenant": args.name, "weight": row["weight"], "max_running": row["max_running"]}
    if args.json:
        print_json(out)
    else:
        cap = row["max_running"] if row["max_running"] is not None else "no cap"
        print(f"tenant {args.name}: weight {row['weight']}, max running {cap}")
    return ExitCode.ok


def _set_status(tx: Tx, args: argparse.Namespace) -> int:
    target, sources = {
        "suspend": (TenantStatus.suspended, [TenantStatus.active]),
        "activate": (TenantStatus.active, [TenantStatus.suspended]),
    }[args.tenant_cmd]
    row = tx.one(
        "tenant_set_status", {"name": args.name, "status": target, "from_statuses": sources}
    )
    if row is None:
        current = _tenant(tx, args.name)
        raise TenantError(f"tenant {args.name!r} is {current['status']}; cannot {args.tenant_cmd}")
    print(f"tenant {row['name']} is now {row['status']}")
    return ExitCode.ok


def _delete(tx: Tx, args: argparse.Namespace, config: Config) -> int:
    if args.confirm != args.name:
        print(
            f"refusing: `ingestd tenant {args.tenant_cmd}` removes every file and row of "
            f"tenant {args.name!r}; repeat its name with --confirm {args.name}",
            file=sys.stderr,
        )
        return ExitCode.usage
    _tenant(tx, args.name)
    # The tenant row first, then its chain's head (record_policy): the order intake takes
    # them in, so the two never wait for each other. A refusal below rolls it all back.
    row = tx.one("tenant_mark_deleting", {"name": args.name})
    assert row is not None
    override = args.override_retention
    policy = retention.policy_for(config.retention, args.name)
    retention.record_policy(tx, int(row["id"]), args.name, policy)
    found = retention.blockers(tx, int(row["id"]), policy, datetime.now(UTC).date())
    if found.held or found.tenant_holds or (found.retained and not override):
        hint = (
            "release the hold first (`ingestd hold release`)"
            if found.held or found.tenant_holds
            else "to remove them anyway, give --override-retention REASON (recorded in "
            "the audit trail)"
        )
        raise retention.RetentionRefused(
            f"tenant {args.name}: {found.describe()}; {hint}; nothing was deleted"
        )
    final = getattr(args, "final_status", None)
    payload = signing.delete_request(
        signing.server_secret(config.paths.state_dir),
        int(row["id"]),
        args.name,
        args.tenant_cmd,
        final,
        override_retention=override if found.retained else None,
    )
    job = _enqueue(tx, int(row["id"]), JobKind.delete_tenant, payload)
    what = "deleted" if args.tenant_cmd == "delete" else f"emptied (then {final or 'suspended'})"
    print(
        f"tenant {args.name} is now deleting; signed delete-tenant job {job} queued "
        f"(nonce {payload['nonce']}): a worker verifies it within 5 minutes and the tenant "
        f"is {what}"
    )
    return ExitCode.ok


def _wait_active(db: Any, name: str, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # bounded by --wait
        with db.transaction() as tx:
            status = _tenant(tx, name)["status"]
        if status == TenantStatus.active:
            print(f"tenant {name} is active")
            return ExitCode.ok
        time.sleep(WAIT_POLL)
    print(
        f"tenant {name} is still {status} after {seconds:g} s: is a worker running "
        "(`ingestd worker`)?",
        file=sys.stderr,
    )
    return ExitCode.tenant_invalid


def cmd_document_lifecycle(args: argparse.Namespace) -> int:
    """trash: mark documents; purge: one purge-document job per trashed document."""
    from ingestd.cli.common import load, print_json
    from ingestd.daemon.wiring import open_database

    config = load(args)
    done: list[dict[str, Any]] = []
    problems: list[str] = []
    with open_database(config) as db, db.transaction() as tx:
        tenant = _tenant(tx, args.tenant)
        for doc_id in args.ids:
            ids = {"id": doc_id, "tenant_id": tenant["id"]}
            if args.documents_cmd == "trash":
                row = tx.one("document_trash", ids)
                if row is None:
                    problems.append(f"document {doc_id}: no such document of {args.tenant}")
                    continue
                done.append({"document_id": doc_id, "trashed_at": row["trashed_at"]})
                continue
            doc = tx.one("document_for_purge", ids)
            if doc is None or doc["trashed_at"] is None:
                why = (
                    "no such document"
                    if doc is None
                    else "not in the trash (`ingestd document trash` first)"
                )
                problems.append(f"document {doc_id}: {why}")
                continue
            job = _enqueue(
                tx,
                int(tenant["id"]),
                JobKind.purge_document,
                {"document_id": doc_id},
                document_id=doc_id,
            )
            done.append({"document_id": doc_id, "job_id": job})
    if args.json:
        print_json({"done": done, "problems": problems})
    else:
        for d in done:
            print(
                f"document {d['document_id']}: "
                + (
                    f"trashed at {d['trashed_at']:%Y-%m-%d %H:%M:%S}"
                    if "trashed_at" in d
                    else f"purge-document job {d['job_id']} queued"
                )
            )
        for p in problems:
            print(p, file=sys.stderr)
    return ExitCode.ok if not problems else ExitCode.not_found


def add_parsers(
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    s = sub.add_parser("tenant", parents=[common], help="manage tenants")
    tsub = s.add_subparsers(dest="tenant_cmd", required=True)
    t = tsub.add_parser(
        "create", parents=[common], help="create a tenant; a worker provisions and activates it"
    )
    t.add_argument("name", help="the new tenant's name: a-z, 0-9, _ and -, up to 63")
    t.add_argument(
        "--member", action="append", default=[], help="an initial member (owner); repeatable"
    )
    t.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait until a worker made it active",
    )
    t.set_defaults(func=cmd_tenant)
    for name, text in (
        ("suspend", "stop the tenant's intake, logins and jobs; its files wait where they are"),
        ("activate", "resume a suspended tenant"),
    ):
        t = tsub.add_parser(name, parents=[common], help=text)
        t.add_argument("name", help="the tenant")
        t.set_defaults(func=cmd_tenant)
    for name, text in (
        ("delete", "remove the tenant, its files and rows (signed job)"),
        ("reset", "empty the tenant and keep it (signed job)"),
    ):
        t = tsub.add_parser(name, parents=[common], help=text)
        t.add_argument("name", help="the tenant")
        t.add_argument("--confirm", required=True, metavar="NAME", help="the tenant's name again")
        t.add_argument(
            "--override-retention",
            metavar="REASON",
            default=None,
            help="remove documents still within retention (why: kept in the audit trail); "
            "never those under a legal hold",
        )
        if name == "reset":
            t.add_argument(
                "--final-status",
                choices=signing.FINAL_STATUSES,
                default=None,
                help="status of the empty tenant (default suspended)",
            )
        t.set_defaults(func=cmd_tenant)
    t = tsub.add_parser(
        "list",
        parents=[common, jsonopt],
        help="every tenant, its status, documents, weight and cap",
    )
    t.set_defaults(func=cmd_tenant)
    t = tsub.add_parser(
        "limits",
        parents=[common, jsonopt],
        help="set the tenant's share of the workers and its cap (all hosts, at once)",
    )
    t.add_argument("name", help="the tenant")
    t.add_argument(
        "--weight",
        type=_bounded(1, 100),
        default=None,
        metavar="W",
        help="its share within its pool: weight 2 starts twice the jobs of weight 1 "
        "while both wait (1-100, default 1)",
    )
    cap = t.add_mutually_exclusive_group()
    cap.add_argument(
        "--max-running",
        type=_bounded(1, 10000),
        default=None,
        metavar="N",
        help="at most N of its jobs run at once, on all hosts together (short jobs aside)",
    )
    cap.add_argument("--no-max-running", action="store_true", help="remove its cap")
    t.set_defaults(func=cmd_tenant)


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}")
        return value

    return parse


def add_document_parsers(
    dsub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    for name, text in (
        ("trash", "move documents to the trash"),
        ("purge", "queue purge-document for trashed documents (after retention)"),
    ):
        d = dsub.add_parser(name, parents=[common, jsonopt], help=text)
        d.add_argument("--tenant", required=True, help="the documents' tenant")
        d.add_argument("ids", nargs="+", type=int, metavar="ID", help=f"the documents to {name}")
        d.set_defaults(func=cmd_document_lifecycle)
