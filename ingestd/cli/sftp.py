"""The SFTP server's helpers: host keys, password hashes, bans."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ingestd.cli import dropins
from ingestd.cli.common import load, print_json
from ingestd.cli.password_input import add_rounds_option
from ingestd.errors import ExitCode


# -- sftp: host keys, password hashes ----------------------------------------------------
def cmd_hostkeys(args: argparse.Namespace) -> int:
    from ingestd.sources.sftp import hostkeys

    config = load(args)
    keys = hostkeys.load_or_create(config.paths.state_dir)
    if args.json:
        rows = []
        for k in keys:
            rows.append(
                {
                    "algorithm": k.algorithm,
                    "sha256": k.fingerprint,
                    "md5": k.md5_fingerprint,
                    "public_key": k.public_line,
                    "path": str(k.path),
                }
            )
        print_json(rows)
        return ExitCode.ok
    port = config.sftp.address[1]
    for k in keys:
        print(f"{k.algorithm:<12} {k.fingerprint}")
        print(f"{'':<12} {k.md5_fingerprint}")
    # What an admin pastes into known_hosts (or a scanner that wants the whole key).
    name = f"[HOST]:{port}" if port != 22 else "HOST"
    print()
    for k in keys:
        print(f"{name} {k.public_line}")
    return ExitCode.ok


def cmd_hash_password(args: argparse.Namespace) -> int:
    from ingestd.cli.password_input import read_new_password
    from ingestd.passwords import hash_password

    password = read_new_password()
    if password is None:
        return ExitCode.usage
    print(hash_password(password, args.rounds))
    return ExitCode.ok


# -- sftp -------------------------------------------------------------------------------
def cmd_sftp(args: argparse.Namespace) -> int:
    from ingestd.sources.sftp.bans import read_bans, request_unban

    config = load(args)
    state_dir = config.paths.state_dir
    if args.sftp_cmd == "bans":
        bans = read_bans(state_dir)
        if args.json:
            print_json(bans)
        elif not bans:
            print("no SFTP bans in force")
        for b in bans if not args.json else []:
            print(f"{b['ip']:<40} {b['remaining']:>8} s left  (ban #{b['bans']})")
        return ExitCode.ok
    banned = {b["ip"] for b in read_bans(state_dir)}
    bad = []
    for ip in args.ips:
        try:
            addr = request_unban(state_dir, ip)
        except ValueError:
            bad.append(ip)
            continue
        state = "banned" if addr in banned else "not banned now"
        print(
            f"{addr}: unban requested ({state}); the server lifts it when the address "
            "next connects, or at its next start"
        )
    for ip in bad:
        print(f"{ip!r} is not an IP address", file=sys.stderr)
    return ExitCode.ok if not bad else ExitCode.usage


def add_parsers(
    sub: Any, common: argparse.ArgumentParser, jsonopt: argparse.ArgumentParser
) -> None:
    """hostkeys, account hash-password, sftp bans/unban."""
    s = sub.add_parser(
        "hostkeys",
        parents=[common, jsonopt],
        help="print the SFTP host key fingerprints (made if missing)",
    )
    s.set_defaults(func=cmd_hostkeys)

    s = sub.add_parser("account", parents=[common], help="SFTP account helpers")
    asub = s.add_subparsers(dest="account_cmd", required=True)
    a = asub.add_parser(
        "hash-password",
        parents=[common],
        help="bcrypt hash for sftp.accounts[].password_hash (password on stdin or prompted)",
    )
    add_rounds_option(a)
    a.set_defaults(func=cmd_hash_password)
    # #30 (confd): account add|remove write conf.d drop-ins (ingestd/cli/dropins.py).
    dropins.add_account_parsers(asub, common)

    s = sub.add_parser("sftp", parents=[common], help="SFTP bans")
    ssub = s.add_subparsers(dest="sftp_cmd", required=True)
    a = ssub.add_parser("bans", parents=[common, jsonopt], help="the bans in force")
    a.set_defaults(func=cmd_sftp)
    a = ssub.add_parser(
        "unban", parents=[common], help="lift bans (the server applies it at the next connection)"
    )
    a.add_argument("ips", nargs="+", metavar="IP", help="the banned addresses to let in again")
    a.set_defaults(func=cmd_sftp)
