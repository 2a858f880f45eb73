"""`ingestd user add|list|remove|passwd` and the login check (issue 31): people with a
capability set per tenant, appliance admins, members named at `tenant create` made owners
without a password, every change in the audit trail, hostile logins refused. Real
PostgreSQL, the CLI as a real process, the password on stdin as a script gives it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from ingestd.archive.audit_verify import verify_audit
from ingestd.archive.backends import make_archive
from ingestd.db.database import Database
from ingestd.people.accounts import Logins
from tests.conftest import Env
from tests.fixtures.drain import run_once

PASSWORD = "correct horse battery"


def _cli(env: Env, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``ingestd ARGS`` with ``stdin`` as its standard input (never a terminal)."""
    cmd = [sys.executable, "-m", "ingestd.cli", args[0], "--config", str(env.config_path)]
    return subprocess.run(
        [*cmd, *args[1:]],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _ok(env: Env, *args: str, stdin: str | None = None) -> str:
    done = _cli(env, *args, stdin=stdin)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _entries(db: Database, kind_prefix: str) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT chain, kind, body FROM audit_events WHERE kind LIKE %(k)s ORDER BY chain, seq",
            {"k": kind_prefix + "%"},
        )
    return [
        {"chain": r["chain"], "kind": r["kind"], **json.loads(r["body"])["detail"]} for r in rows
    ]


def _people(env: Env, *args: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(_ok(env, "user", "list", "--json", *args))
    return out


@pytest.fixture
def acme(env: Env, db: Database) -> str:
    """Tenants acme and beta, provisioned by a real worker (their capability sets made)."""
    for name in ("acme", "beta"):
        _ok(env, "tenant", "create", name)
    run_once(env, db, "w-people")
    return "acme"


def test_a_member_logs_in_with_their_password_in_any_case_of_their_login(
    env: Env, db: Database, acme: str
) -> None:
    """`user add --password-stdin` makes a person and a membership; the login check takes
    the right password whatever the login's case, and refuses a wrong one, an unknown
    login and one that could never be a login, each as plain None."""
    out = _ok(env, "user", "add", "Anna", "--tenant", acme, "--set", "user", "--password-stdin",
              stdin=PASSWORD + "\n")  # fmt: skip
    assert "Anna (new) is a member of acme: user" in out
    logins = Logins(db, rounds=4)
    for typed in ("Anna", "anna", "ANNA"):
        person = logins.check(typed, PASSWORD)
        assert person is not None and person.login == "Anna"
        assert person.memberships == {"acme": "user"} and not person.admin
    assert logins.check("anna", PASSWORD + "x") is None
    assert logins.check("nobody", PASSWORD) is None
    assert logins.check("anna:x", PASSWORD) is None
    assert logins.check("", PASSWORD) is None
    rows = _people(env)
    assert [(r["login"], r["tenant"], r["set"], r["has_password"]) for r in rows] == [
        ("Anna", "acme", "user", True)
    ]
    added = _entries(db, "member.")
    assert [(e["kind"], e["login"], e["set"]) for e in added] == [("member.added", "Anna", "user")]
    assert added[0]["chain"] != 0 and added[0]["by"]["user"]
    assert [e["login"] for e in _entries(db, "person.password_set")] == ["Anna"]
    assert all("$2" not in json.dumps(e) for e in _entries(db, ""))  # never the hash
    assert verify_audit(db, make_archive(env.config)).ok


def test_sets_change_memberships_end_and_an_idle_person_goes(
    env: Env, db: Database, acme: str
) -> None:
    """The same person in two tenants with two sets; a new --set changes one (audited
    from/to); removing one membership keeps the person, removing the last removes them,
    and the login stops working."""
    _ok(env, "user", "add", "bob", "--tenant", "acme", "--password-stdin", stdin=PASSWORD + "\n")
    out = _ok(env, "user", "add", "bob", "--tenant", "beta", "--set", "webdav")
    assert "bob is a member of beta: webdav" in out  # no password asked: he has one
    assert "has no password" not in out
    assert _ok(env, "user", "add", "bob", "--tenant", "acme", "--set", "owner").strip() == (
        "bob in acme: readonly -> owner"
    )
    assert "already" in _ok(env, "user", "add", "bob", "--tenant", "acme", "--set", "owner")
    logins = Logins(db, rounds=4)
    person = logins.check("bob", PASSWORD)
    assert person is not None and person.memberships == {"acme": "owner", "beta": "webdav"}
    assert person.set_in("acme") == "owner" and person.set_in("gamma") is None
    changed = [e for e in _entries(db, "member.") if e["kind"] == "member.changed"]
    assert [(e["from"], e["set"]) for e in changed] == [("readonly", "owner")]

    out = _ok(env, "user", "remove", "bob", "--tenant", "beta")
    assert "bob is no longer a member of beta (was webdav)" in out
    assert "removed" not in out.replace("no longer", "")
    assert [r["tenant"] for r in _people(env)] == ["acme"]
    out = _ok(env, "user", "remove", "bob", "--tenant", "acme")
    assert "bob is removed: that login no longer works" in out
    assert _people(env) == []
    assert logins.check("bob", PASSWORD) is None
    assert _cli(env, "user", "remove", "bob").returncode == 7
    kinds = [e["kind"] for e in _entries(db, "")]
    assert kinds.count("member.removed") == 2 and kinds.count("person.removed") == 1
    assert verify_audit(db, make_archive(env.config)).ok


def test_an_admin_has_the_role_and_no_tenant(env: Env, db: Database, acme: str) -> None:
    """--admin makes an appliance admin (chain 0), listed without a tenant; --admin on
    remove ends the role and, with no membership left, the person."""
    out = _ok(env, "user", "add", "ops", "--admin", "--password-stdin", stdin=PASSWORD + "\n")
    assert "ops (new) is an appliance admin" in out
    person = Logins(db, rounds=4).check("ops", PASSWORD)
    assert person is not None and person.admin and person.memberships == {}
    assert [(r["login"], r["tenant"], r["admin"]) for r in _people(env)] == [("ops", None, True)]
    assert _people(env, "--tenant", acme) == []
    granted = _entries(db, "admin.")
    assert [(e["chain"], e["kind"], e["login"]) for e in granted] == [(0, "admin.granted", "ops")]
    out = _ok(env, "user", "remove", "ops", "--admin")
    assert "no longer an appliance admin" in out and "ops is removed" in out
    assert Logins(db, rounds=4).check("ops", PASSWORD) is None


def test_members_named_at_tenant_create_are_owners_without_a_password_until_passwd(
    env: Env, db: Database
) -> None:
    """`tenant create --member` says how members log in; once provisioned they are owners
    who cannot log in until `user passwd` gives them a password (typed wrong: refused)."""
    out = _ok(env, "tenant", "create", "gamma", "--member", "carla@gamma.example")
    assert "ingestd user passwd LOGIN" in out
    run_once(env, db, "w-people")
    rows = _people(env, "--tenant", "gamma")
    assert [(r["login"], r["set"], r["has_password"]) for r in rows] == [
        ("carla@gamma.example", "owner", False)
    ]
    logins = Logins(db, rounds=4)
    assert logins.check("carla@gamma.example", "") is None
    assert logins.check("carla@gamma.example", PASSWORD) is None
    short = _cli(env, "user", "passwd", "carla@gamma.example", "--password-stdin", stdin="short\n")
    assert short.returncode == 2 and "too short" in short.stderr
    _ok(env, "user", "passwd", "carla@gamma.example", "--password-stdin", stdin=PASSWORD + "\n")
    assert logins.check("CARLA@gamma.example", PASSWORD) is not None
    missing = _cli(env, "user", "passwd", "nobody", "--password-stdin", stdin=PASSWORD + "\n")
    assert missing.returncode == 7 and "user add" in missing.stderr


HOSTILE_LOGINS = [
    "anna:x",  # HTTP Basic splits on ':'
    "a/b",
    "../etc",
    "anna\r\nX-Evil: 1",
    "tab\tname",
    "anna schmidt",
    "esc\x1b[31m",
    "del\x7f",
    "",
    "-leading",
    "a" * 201,
    "=?utf-8?q?x=0D=0A?=",
]


def test_a_hostile_login_is_refused_and_nothing_is_stored(
    env: Env, db: Database, acme: str
) -> None:
    """Exit 2 with the rule, at `user add` and at `tenant create --member`, for each
    hostile login; no person, no membership, no tenant, no audit entry."""
    for login in HOSTILE_LOGINS:
        done = _cli(env, "user", "add", "--tenant", acme, "--no-password", "--", login)
        assert done.returncode == 2, (login, done.stdout + done.stderr)
        assert "cannot be a login" in done.stderr
        made = _cli(env, "tenant", "create", "delta", "--member", "ok", f"--member={login}")
        assert made.returncode == 2, (login, made.stderr)
    with db.transaction() as tx:
        assert tx.raw("SELECT count(*) AS n FROM people")[0]["n"] == 0
        assert tx.raw("SELECT count(*) AS n FROM tenants WHERE name = 'delta'")[0]["n"] == 0
    assert _entries(db, "member.") == []


def test_usage_mistakes_change_nothing(env: Env, db: Database, acme: str) -> None:
    """No tenant and no --admin, both, --set with --admin, a set that does not exist, an
    unknown tenant, no terminal and no --password-stdin: each a clear refusal."""
    cases: list[tuple[tuple[str, ...], int, str]] = [
        (("user", "add", "eve"), 2, "--tenant T"),
        (("user", "add", "eve", "--tenant", acme, "--admin"), 2, "not both"),
        (("user", "add", "eve", "--admin", "--set", "owner"), 2, "admin role"),
        (("user", "add", "eve", "--tenant", acme, "--set", "root"), 2, "invalid choice"),
        (("user", "add", "eve", "--tenant", "nosuch", "--no-password"), 6, "nosuch"),
        (("user", "add", "eve", "--tenant", acme), 2, "--password-stdin"),
    ]
    for args, code, said in cases:
        done = _cli(env, *args)
        assert done.returncode == code, (args, done.stdout + done.stderr)
        assert said in done.stderr, (args, done.stderr)
    assert _people(env) == []
    _ok(env, "user", "add", "eve", "--tenant", acme, "--no-password")
    assert "has no password yet" in _ok(env, "user", "add", "eve", "--tenant", "beta")


def test_every_refused_login_costs_one_bcrypt_check(
    env: Env, db: Database, acme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown login, a person without a password, a wrong password and a login that
    could never be one each cost exactly one bcrypt check (the dummy where there is no
    hash), so the time of a refusal does not tell which logins exist."""
    from ingestd import passwords

    _ok(env, "user", "add", "dora", "--tenant", acme, "--password-stdin", stdin=PASSWORD + "\n")
    _ok(env, "user", "add", "nopw", "--tenant", acme, "--no-password")
    logins = Logins(db, rounds=4)
    checked: list[bytes] = []
    real = passwords.bcrypt.checkpw

    def spy(candidate: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return bool(real(candidate, hashed))

    monkeypatch.setattr(passwords.bcrypt, "checkpw", spy)
    for login, password in (
        ("nobody", PASSWORD),
        ("nopw", PASSWORD),
        ("dora", "wrong password"),
        ("a:b", PASSWORD),
        ("dora", PASSWORD),
    ):
        before = len(checked)
        logins.check(login, password)
        assert len(checked) == before + 1, login
    assert checked[0] == checked[1] == checked[3]  # the dummy
    assert checked[2] == checked[4] != checked[0]
