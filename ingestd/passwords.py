"""Passwords people and scanners log in with: the rules a new one must meet and its bcrypt
hash. One place for the SFTP accounts (ingestd/sources/sftp/accounts.py) and the people
of the web console and WebDAV (ingestd/people/); never a password in argv or config."""

from __future__ import annotations

import re

import bcrypt

# bcrypt only looks at the first 72 bytes; a longer new password is refused.
BCRYPT_MAX_BYTES = 72
DEFAULT_ROUNDS = 12
# Shorter ones are refused: a scanner stores its password, so a long one costs nobody
# anything, and the SFTP port and the console may face a whole network.
MIN_PASSWORD_LENGTH = 8


def new_password_problem(password: str) -> str | None:
    """Why ``password`` may not become an account's password (empty, shorter than
    MIN_PASSWORD_LENGTH characters, longer than bcrypt reads), else None."""
    if not password:
        return "the password is empty"
    if len(password) < MIN_PASSWORD_LENGTH:
        return (
            f"the password is too short ({len(password)} characters; "
            f"at least {MIN_PASSWORD_LENGTH})"
        )
    size = len(password.encode("utf-8"))
    if size > BCRYPT_MAX_BYTES:
        return f"the password is {size} bytes; bcrypt uses at most {BCRYPT_MAX_BYTES}"
    return None


def hash_password(password: str, rounds: int = DEFAULT_ROUNDS) -> str:
    """The bcrypt hash of a new password (ValueError for one bcrypt cannot take)."""
    data = password.encode("utf-8")
    if not data:
        raise ValueError("the password is empty")
    if len(data) > BCRYPT_MAX_BYTES:
        raise ValueError(f"the password is {len(data)} bytes; bcrypt uses at most 72")
    return bcrypt.hashpw(data, bcrypt.gensalt(rounds=rounds)).decode()


def rounds_of(hashed: str) -> int:
    """The cost a bcrypt hash was made with (DEFAULT_ROUNDS for what is not one)."""
    m = re.match(r"^\$2[aby]\$(\d\d)\$", hashed)
    return int(m.group(1)) if m else DEFAULT_ROUNDS


def candidate(password: str) -> bytes:
    """What bcrypt compares of a password typed at a login (any bytes, its first 72)."""
    return password.encode("utf-8", "surrogateescape")[:BCRYPT_MAX_BYTES]


def dummy_hash(rounds: int = DEFAULT_ROUNDS) -> bytes:
    """A hash no password was set for, checked when the login names nobody, so a refusal
    costs the same whoever was named."""
    return bcrypt.hashpw(b"not a password", bcrypt.gensalt(rounds=rounds))


def matches(password: str, hashed: str | None, dummy: bytes) -> bool:
    """Whether ``password`` is the one ``hashed`` was made from; with no hash the dummy is
    checked (same cost) and the answer is no."""
    ok = bcrypt.checkpw(candidate(password), hashed.encode() if hashed else dummy)
    return bool(ok and hashed)
