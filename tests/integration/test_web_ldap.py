"""Directory login (issue 31) against a real OpenLDAP slapd started by the test: a person
of a mapped group logs in to the console with the directory's password and gets the
group's set; leaving the group takes the membership at the next login; an admin group
gives the admin role; an empty password, a wrong one, an injected filter and a directory
that is down are each a refused login; a local password still wins."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ingestd.db.database import Database
from tests.fixtures.ldap import BASE, SERVICE_DN, SERVICE_PW, Slapd
from tests.fixtures.web import PASSWORD, Console, csrf, started_console

ANNA_LDAP_PW = "anna-directory-pw"


@pytest.fixture
def directory_console(
    make_env: Any, db: Database, slapd: Slapd, tmp_path: Any
) -> Iterator[Console]:
    """The console with [web.ldap] on the test's slapd: cn=acme-staff -> acme user,
    cn=acme-heads -> acme owner, cn=ops -> admin."""
    secret = tmp_path / "ldap.pw"
    secret.write_text(SERVICE_PW + "\n")
    secret.chmod(0o600)
    eva = slapd.add_person("eva", ANNA_LDAP_PW)
    slapd.add_person("otto", ANNA_LDAP_PW)
    slapd.add_group("acme-staff", eva, f"uid=nobody,ou=People,{BASE}")  # never empty
    slapd.add_group("acme-heads", f"uid=nobody,ou=People,{BASE}")
    slapd.add_group("ops", f"uid=otto,ou=People,{BASE}")
    ldap = {
        "url": slapd.url,
        "allow_plaintext": True,  # loopback only
        "bind_dn": SERVICE_DN,
        "bind_password_file": str(secret),
        "user_base": f"ou=People,{BASE}",
        "group_base": f"ou=Groups,{BASE}",
        "groups": [
            {"group": f"cn=acme-staff,ou=Groups,{BASE}", "tenant": "acme", "set": "user"},
            {"group": f"CN=acme-heads,OU=Groups,{BASE.upper()}", "tenant": "acme", "set": "owner"},
        ],
        "admin_groups": [f"cn=ops,ou=Groups,{BASE}"],
    }
    with started_console(make_env, db, {"ldap": ldap, "login_failures": 50}) as c:
        yield c


def _login(c: httpx.Client, login: str, password: str) -> int:
    return c.post(
        "/login", data={"login": login, "password": password, "csrf": csrf(c)}
    ).status_code


def _entries(db: Database, kind: str) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        rows = tx.raw("SELECT body FROM audit_events WHERE kind = %(k)s ORDER BY chain, seq",
                      {"k": kind})  # fmt: skip
    return [json.loads(r["body"])["detail"] for r in rows]


def test_a_directory_person_logs_in_with_the_group_s_set(
    directory_console: Console, slapd: Slapd
) -> None:
    """eva (cn=acme-staff) logs in with the directory's password and works in acme as a
    user; the membership is audited as made by the directory."""
    with directory_console.client() as c:
        assert _login(c, "eva", ANNA_LDAP_PW) == 303
        page = c.get("/t/acme/")
        assert page.status_code == 200 and ">user<" in page.text
        assert c.get("/t/beta/").status_code == 404
    added = _entries(directory_console.db, "member.added")
    assert [(a["login"], a["set"], a["by"]["via"]) for a in added if a["login"] == "eva"] == [
        ("eva", "user", "ldap")
    ]


def test_refusals_an_empty_a_wrong_password_an_injected_filter(
    directory_console: Console, slapd: Slapd
) -> None:
    """Each is a 401 and makes no person: an empty password (LDAP would take it as an
    unauthenticated bind), a wrong one, wildcards and a filter break-out in the login."""
    with directory_console.client() as c:
        assert _login(c, "eva", "") in (400, 401)
        assert _login(c, "eva", "wrong password") == 401
        for login in ("*", "ev*", "eva)(uid=*", "eva\\2a", "*)(|(uid=*"):
            assert _login(c, login, ANNA_LDAP_PW) == 401, login
        assert c.get("/t/acme/").status_code == 303
    with directory_console.db.transaction() as tx:
        people = [r["login"] for r in tx.raw("SELECT login FROM people WHERE directory = 'ldap'")]
    assert people == []


def test_leaving_the_group_ends_the_membership_at_the_next_login(
    directory_console: Console, slapd: Slapd
) -> None:
    """eva leaves cn=acme-staff: her next login has no acme membership (audited as
    removed by the directory); otto (cn=ops) is an admin and sees /admin."""
    with directory_console.client() as c:
        assert _login(c, "eva", ANNA_LDAP_PW) == 303
    slapd.remove_member(f"cn=acme-staff,ou=Groups,{BASE}", f"uid=eva,ou=People,{BASE}")
    with directory_console.client() as c:
        assert _login(c, "eva", ANNA_LDAP_PW) == 303
        assert c.get("/t/acme/").status_code == 404
    removed = [r for r in _entries(directory_console.db, "member.removed") if r["login"] == "eva"]
    assert [(r["set"], r["by"]["via"]) for r in removed] == [("user", "ldap")]
    with directory_console.client() as c:
        assert _login(c, "otto", ANNA_LDAP_PW) == 303
        assert c.get("/admin").status_code == 200


def test_a_local_password_wins_and_a_directory_that_is_down_refuses(
    directory_console: Console, slapd: Slapd
) -> None:
    """anna has a local password: it is hers, not asked of the directory. With slapd
    stopped, a directory login is a 401 with a log line, and the console keeps serving."""
    with directory_console.client() as c:
        assert _login(c, "anna", PASSWORD) == 303
    slapd.process.terminate()
    slapd.process.wait(30)
    with directory_console.client() as c:
        assert _login(c, "eva", ANNA_LDAP_PW) == 401
        assert _login(c, "anna", PASSWORD) == 303
    log = (directory_console.env.root / "web.log").read_text()
    assert '"web.ldap_unavailable"' in log and ANNA_LDAP_PW not in log
    failed = [json.loads(line) for line in log.splitlines() if '"web.login_failed"' in line]
    assert [f["login"] for f in failed] == ["eva"]
