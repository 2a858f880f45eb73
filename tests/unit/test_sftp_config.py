"""SFTP config validation: every problem names its key path and what is wrong."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ingestd.config.load import parse_config
from ingestd.errors import ConfigError

# bcrypt of "x" at cost 4 (shape is all the validator looks at).
HASH = "$2b$04$" + "a" * 53


def _ed25519_line(comment: str = "scanner") -> str:
    blob = b"\0\0\0\x0bssh-ed25519\0\0\0\x20" + bytes(range(32))
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


def _account(**kw: Any) -> dict[str, Any]:
    return {"username": "scan1", "tenant": "acme", "password_hash": HASH, **kw}


def _problems(sftp: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config({"sftp": sftp})
    return exc.value.problems


def _one(sftp: dict[str, Any]) -> str:
    problems = _problems(sftp)
    assert len(problems) == 1, problems
    return problems[0]


def test_valid_accounts_parse() -> None:
    """A password account and a key-only account with sources and tags are accepted."""
    cfg = parse_config(
        {
            "sftp": {
                "listen": "[::]:2222",
                "accounts": [
                    _account(allowed_sources=["10.1.0.0/16", "2001:db8::/32"], tags=["scan"]),
                    {"username": "scan2", "tenant": "acme", "authorized_keys": [_ed25519_line()]},
                ],
            }
        }
    )
    assert cfg.sftp.address == ("::", 2222)
    assert [a.username for a in cfg.sftp.accounts] == ["scan1", "scan2"]
    assert cfg.sftp.account("scan2") is not None
    assert cfg.sftp.account("scan2").password_hash is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "bad",
    [
        "secret-1",  # a password, not a hash
        "$2b$04$tooshort",
        "$1$abcdefgh$abcdefghijklmnopqrstuv",  # md5-crypt
        "$argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$aGFzaA",
        "$2b$03$" + "a" * 53,  # cost below bcrypt's minimum
    ],
)
def test_bad_bcrypt_hash(bad: str) -> None:
    """password_hash must be a bcrypt hash; the message names the key and the fix."""
    problem = _one({"accounts": [_account(password_hash=bad)]})
    assert problem.startswith("sftp.accounts[0].password_hash:")
    assert "bcrypt" in problem and "hash-password" in problem


def test_bcrypt_hash_with_trailing_newline() -> None:
    """A bcrypt hash followed by a newline is refused (no password could ever match it)."""
    problem = _one({"accounts": [_account(password_hash=HASH + "\n")]})
    assert problem.startswith("sftp.accounts[0].password_hash:")


def test_account_without_credentials() -> None:
    """An account with neither a password hash nor a key is refused, naming the account."""
    problem = _one(
        {"accounts": [_account(username="ok"), {"username": "nocred", "tenant": "acme"}]}
    )
    assert problem.startswith("sftp.accounts[1]")
    assert "'nocred'" in problem and "password_hash" in problem and "authorized_keys" in problem


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("not a key", "not valid base64"),
        ("ssh-ed25519", "authorized_keys line"),
        ("", "authorized_keys line"),
        ("ssh-ed25519 !!!notbase64!!!", "not valid base64"),
        # The blob says ssh-ed25519; the line claims ssh-rsa.
        ("ssh-rsa " + _ed25519_line().split()[1], "does not match its type"),
        ("ssh-ed25519 " + base64.b64encode(b"xy").decode(), "does not match its type"),
    ],
)
def test_authorized_key_that_is_not_a_key(line: str, says: str) -> None:
    """An authorized_keys entry that is not '<type> <base64 blob of that type>' is refused."""
    problem = _one({"accounts": [_account(authorized_keys=[_ed25519_line(), line])]})
    assert problem.startswith("sftp.accounts[0].authorized_keys:")
    assert says in problem


@pytest.mark.parametrize(
    "options",
    [
        "no-pty",
        'from="10.0.0.0/8"',
        'command="/bin/true"',
        "restrict",
        'environment="A=b"',
        "no-port-forwarding,no-agent-forwarding",
    ],
)
def test_authorized_key_with_options(options: str) -> None:
    """Options before a key are refused: they would suggest limits we do not enforce."""
    problem = _one({"accounts": [_account(authorized_keys=[f"{options} {_ed25519_line()}"])]})
    assert problem.startswith("sftp.accounts[0].authorized_keys:")
    assert "options are not supported" in problem and "allowed_sources" in problem


@pytest.mark.parametrize("options", ["cert-authority", 'permitopen="h:1"', "pty", 'tunnel="0"'])
def test_other_authorized_key_options_are_refused_too(options: str) -> None:
    """Options the validator does not name are refused as well (never taken as a key)."""
    problem = _one({"accounts": [_account(authorized_keys=[f"{options} {_ed25519_line()}"])]})
    assert problem.startswith("sftp.accounts[0].authorized_keys:")


def test_real_ssh_keygen_key_is_accepted(tmp_path: Path) -> None:
    """A .pub file made by ssh-keygen is a valid authorized_keys line, comment and all."""
    key = tmp_path / "id"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "scanner 3. OG", "-f", str(key)],
        check=True,
    )
    line = key.with_suffix(".pub").read_text()
    cfg = parse_config({"sftp": {"accounts": [_account(authorized_keys=[line])]}})
    assert cfg.sftp.accounts[0].authorized_keys == [line.strip()]


def test_duplicate_usernames() -> None:
    """The same username twice is refused, naming the second entry."""
    problems = _problems({"accounts": [_account(), _account(tenant="beta")]})
    assert any(
        "sftp.accounts[1].username" in p and "'scan1'" in p and "twice" in p for p in problems
    ), problems


@pytest.mark.parametrize(
    "listen",
    [
        "0.0.0.0",  # noqa: S104 - a listen value under test, not a bind
        "2222",
        "localhost:2222",
        "scanner.example:22",
        "0.0.0.0:65536",
        "0.0.0.0:-1",
        "0.0.0.0:ssh",
        ":2222",
        "[::]",
        "::",
        "[::1]:",
        "300.0.0.1:22",
    ],
)
def test_bad_listen(listen: str) -> None:
    """listen must be 'IP:port' (IPv6 in brackets); the message names sftp.listen."""
    problem = _one({"listen": listen})
    assert problem.startswith("sftp.listen:")
    assert repr(listen) in problem


@pytest.mark.parametrize(
    ("listen", "address"),
    [
        ("[::]:2222", ("::", 2222)),
        ("0.0.0.0:2222", ("0.0.0.0", 2222)),  # noqa: S104
        ("127.0.0.1:22", ("127.0.0.1", 22)),
        ("[::1]:2222", ("::1", 2222)),
        ("[fe80::1]:2222", ("fe80::1", 2222)),
    ],
)
def test_good_listen(listen: str, address: tuple[str, int]) -> None:
    """IPv4 and bracketed IPv6 listen addresses parse to (host, port)."""
    assert parse_config({"sftp": {"listen": listen}}).sftp.address == address


def test_bad_values_are_all_reported_with_paths() -> None:
    """Several problems in one file come back together, each with its own key path."""
    problems = _problems(
        {
            "listen": "nowhere",
            "auth_timeout": 0,
            "idle_timeout": 1,
            "max_auth_attempts": 0,
            "bans": {"threshold": 0, "safelist": ["not-a-net"], "bogus": 1},
            "accounts": [
                _account(username="bad name", password_hash="plain"),
                _account(username="ok", tenant="Not Valid", allowed_sources=["10.0.0.0/33"]),
            ],
        }
    )
    keys = {p.split(":", 1)[0] for p in problems}
    assert keys >= {
        "sftp.listen",
        "sftp.auth_timeout",
        "sftp.idle_timeout",
        "sftp.max_auth_attempts",
        "sftp.bans.threshold",
        "sftp.bans.bogus",
        "sftp.accounts[0].username",
        "sftp.accounts[0].password_hash",
        "sftp.accounts[1].tenant",
    }, problems
    assert any(p.startswith("sftp.bans.safelist[0]") for p in problems), problems
    assert any(p.startswith("sftp.accounts[1].allowed_sources[0]") for p in problems), problems


def test_unknown_account_key_is_an_error() -> None:
    """A misspelt account key (e.g. passwd_hash) is an error, not a silently ignored line."""
    problems = _problems({"accounts": [_account(passwd_hash=HASH)]})
    assert any(p.startswith("sftp.accounts[0].passwd_hash: unknown key") for p in problems)
