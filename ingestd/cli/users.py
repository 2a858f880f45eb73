"""``ingestd user add|list|remove|passwd``: the people who log in to the web console and
the WebDAV mount, their capability set in each tenant, and the appliance's admins
(issue 31). What each set may do is ingestd/people/capabilities.py's table.

    ingestd user add LOGIN --tenant T [--set SET]   a member of T (default readonly)
    ingestd user add LOGIN --admin                  an appliance admin
    ingestd user list [--tenant T]                  people, their sets, who has a password
    ingestd user remove LOGIN [--tenant T|--admin]  a membership, the role, or the person
    ingestd user passwd LOGIN                       a new password (asked twice, or stdin)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ingestd.cli.common import load, local_time, print_json, print_table
from ingestd.cli.password_input import add_rounds_option
from ingestd.errors import ExitCode, UsageError
from ingestd.people.capabilities import ADMIN, DEFAULT_SET, SUMMARY, TENANT_SETS


def _new_hash(args: argparse.Namespace, *, required: bool) -> str | None:
    """The hash of a password asked at the terminal or read from stdin; None when the
    person gets none now (``--no-password``, or an existing password kept)."""
    from ingestd.cli.password_input import read_new_password
    from ingestd.passwords import hash_password

    if getattr(args, "no_password", False) or not required:
        return None
    if not args.password_stdin and not sys.stdin.isatty():
        raise UsageError(
            "give the password on stdin with --password-stdin, or --no-password to set it "
            "later (no terminal to ask at); nothing was changed"
        )
    password = read_new_password(stdin_only=args.password_stdin)
    if password is None:
        raise UsageError("no password set; nothing was changed")
    return hash_password(password, args.rounds)


def cmd_user_add(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database
    from ingestd.people import accounts

    accounts.check_login(args.login)
    if args.admin == (args.tenant is not None):
        raise UsageError("name a tenant (--tenant T [--set SET]) or --admin, not both")
    capability_set = args.set or DEFAULT_SET
    if args.admin and args.set:
        raise UsageError("--set is a tenant's set; an admin has the admin role")
    accounts.check_set(capability_set)
    config = load(args)
    with open_database(config) as db:
        with db.transaction() as tx:
            known = accounts.person(tx, args.login)
        # Only a new person is asked: an existing one keeps theirs (`user passwd`).
        password_hash = _new_hash(args, required=known is None)
        with db.transaction() as tx:
            if args.admin:
                done = accounts.grant_admin(tx, args.login, password_hash)
            else:
                done = accounts.add_member(
                    tx, args.login, args.tenant, capability_set, password_hash
                )
    who = done.login + (" (new)" if done.new_person else "")
    if args.admin:
        said = f"{who} is an appliance admin ({SUMMARY[ADMIN]})"
        if done.previous == ADMIN:
            said = f"{done.login} was an appliance admin already"
    elif done.previous is None:
        said = f"{who} is a member of {args.tenant}: {capability_set} ({SUMMARY[capability_set]})"
    elif done.previous == capability_set:
        said = f"{done.login} was a member of {args.tenant} with {capability_set} already"
    else:
        said = f"{done.login} in {args.tenant}: {done.previous} -> {capability_set}"
    if args.json:
        print_json(
            {
                "login": done.login,
                "new_person": done.new_person,
                "tenant": args.tenant,
                "set": ADMIN if args.admin else capability_set,
                "previous": done.previous,
                "has_password": done.has_password,
            }
        )
        return ExitCode.ok
    print(said)
    if not done.has_password:
        print(
            f"{done.login} has no password yet and cannot log in: ingestd user passwd {done.login}"
        )
    return ExitCode.ok


def cmd_user_list(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database
    from ingestd.people import accounts

    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        rows = accounts.listing(tx, args.tenant)
    if args.json:
        print_json(
            [
                {
                    "login": r["login"],
                    "tenant": r["tenant"],
                    "set": r["capability_set"],
                    "admin": r["admin"],
                    "has_password": r["has_password"],
                    "password_set_at": r["password_set_at"],
                }
                for r in rows
            ]
        )
        return ExitCode.ok
    if not rows:
        print("nobody yet: ingestd user add LOGIN --tenant T [--set SET]")
        return ExitCode.ok
    print_table(
        ("LOGIN", "TENANT", "SET", "ADMIN", "PASSWORD"),
        (
            [
                r["login"],
                r["tenant"] or "-",
                r["capability_set"] or "-",
                "admin" if r["admin"] else "-",
                local_time(r["password_set_at"]) if r["has_password"] else "none yet",
            ]
            for r in rows
        ),
    )
    return ExitCode.ok


def cmd_user_remove(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database
    from ingestd.people import accounts

    if args.admin and args.tenant is not None:
        raise UsageError("--tenant removes a membership, --admin the admin role: one of them")
    config = load(args)
    with open_database(config) as db, db.transaction() as tx:
        done = accounts.remove(tx, args.login, tenant=args.tenant, admin=args.admin)
    if args.json:
        print_json(
            {
                "login": done.login,
                "memberships": [{"tenant": t, "set": s} for t, s in done.memberships],
                "admin_revoked": done.admin_revoked,
                "person_removed": done.person_removed,
            }
        )
        return ExitCode.ok
    for tenant, capability_set in done.memberships:
        print(f"{done.login} is no longer a member of {tenant} (was {capability_set})")
    if done.admin_revoked:
        print(f"{done.login} is no longer an appliance admin")
    if done.person_removed:
        print(f"{done.login} is removed: that login no longer works")
    return ExitCode.ok


def cmd_user_passwd(args: argparse.Namespace) -> int:
    from ingestd.daemon.wiring import open_database
    from ingestd.people import accounts

    config = load(args)
    with open_database(config) as db:
        with db.transaction() as tx:
            if accounts.person(tx, args.login) is None:
                from ingestd.errors import NotFound

                raise NotFound(f"no person {args.login!r}: `ingestd user add` first")
        password_hash = _new_hash(args, required=True)
        assert password_hash is not None
        with db.transaction() as tx:
            login = accounts.set_password(tx, args.login, password_hash)
    print(f"password of {login} set")
    return ExitCode.ok


def add_parsers(
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """`user add|list|remove|passwd`."""
    table = "; ".join(f"{name}: {SUMMARY[name]}" for name in (*TENANT_SETS, ADMIN))
    u = sub.add_parser(
        "user",
        parents=[common],
        help="people who log in to the web console and WebDAV, and their capability sets",
        description=f"Capability sets: {table}.",
    )
    usub = u.add_subparsers(dest="user_cmd", required=True)

    def password_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--password-stdin",
            action="store_true",
            help="read the password from one line of stdin (default: asked twice at the "
            "terminal); never on the command line",
        )
        add_rounds_option(p)

    a = usub.add_parser(
        "add",
        parents=[common, jsonopt],
        help="make a person a tenant's member (or an admin); asks a new person's password",
        description=f"Capability sets: {table}. A login matches in any case; a person's "
        "password is theirs in every tenant.",
    )
    a.add_argument("login", help="letters, digits, . _ @ + - (no spaces, ':' or '/')")
    a.add_argument("--tenant", default=None, help="the tenant to make them a member of")
    a.add_argument(
        "--set",
        choices=TENANT_SETS,
        default=None,
        help=f"their capability set in the tenant (default {DEFAULT_SET}); a member's set "
        "changes when given again",
    )
    a.add_argument("--admin", action="store_true", help="the appliance-wide admin role")
    a.add_argument(
        "--no-password",
        action="store_true",
        help="no password now (they cannot log in until `ingestd user passwd`)",
    )
    password_options(a)
    a.set_defaults(func=cmd_user_add)

    ls = usub.add_parser(
        "list", parents=[common, jsonopt], help="people, their sets and who has a password"
    )
    ls.add_argument("--tenant", default=None, help="only this tenant's members")
    ls.set_defaults(func=cmd_user_list)

    r = usub.add_parser(
        "remove",
        parents=[common, jsonopt],
        help="end a membership (--tenant), the admin role (--admin), or the person",
        description="With --tenant, the membership in that tenant; with --admin, the admin "
        "role; with neither, the person and every membership. A person left with no "
        "membership and no admin role is removed.",
    )
    r.add_argument("login", help="the person")
    r.add_argument("--tenant", default=None, help="only their membership in this tenant")
    r.add_argument("--admin", action="store_true", help="only the admin role")
    r.set_defaults(func=cmd_user_remove)

    p = usub.add_parser("passwd", parents=[common], help="set a person's password")
    p.add_argument("login", help="the person")
    password_options(p)
    p.set_defaults(func=cmd_user_passwd)
