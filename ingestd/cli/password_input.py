"""Reading a new account password: prompted at a terminal, else from stdin; never argv.
Shared by ``account hash-password`` and ``account add``."""

from __future__ import annotations

import argparse
import sys


def add_rounds_option(parser: argparse.ArgumentParser) -> None:
    """``--rounds``: the bcrypt cost of a password hash a command makes."""
    parser.add_argument(
        "--rounds",
        type=int,
        default=12,
        choices=range(4, 32),
        metavar="4..31",
        help="bcrypt cost of the password hash (default 12)",
    )


def read_new_password(*, stdin_only: bool = False) -> str | None:
    """A new account password: prompted twice at a terminal, else one line of stdin
    (always stdin with ``stdin_only``); None after saying on stderr why it cannot be one.
    Never from argv: a password there is in every `ps` and the shell history."""
    import getpass

    from ingestd.passwords import new_password_problem

    if sys.stdin.isatty() and not stdin_only:
        password = getpass.getpass("Password: ")
        # Said at once, before the second prompt.
        problem = new_password_problem(password)
        if problem is None and getpass.getpass("Again: ") != password:
            problem = "the passwords differ"
    else:
        # One line from stdin, for scripts: `printf %s "$pw" | ingestd account hash-password`
        password = sys.stdin.readline().rstrip("\n")
        problem = new_password_problem(password)
    if problem is not None:
        print(f"ingestd: {problem}; no hash made", file=sys.stderr)
        return None
    return password
