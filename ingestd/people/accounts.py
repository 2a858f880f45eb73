"""People and their memberships in the database: added, changed and removed with an audit
entry in the same transaction, and the login check the web console and WebDAV use.

Invariants enforced here and by migration 0020:
- a login is matched without regard to case, and has no control characters, no white
  space, no ``:`` (HTTP Basic authentication splits on it) and no path separators;
- a person without a password (a member named at ``tenant create``) never logs in;
- a login that names nobody costs the same bcrypt check as one that names someone;
- a person who is no tenant's member and no admin is removed with their last membership.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ingestd import passwords
from ingestd.archive import audit
from ingestd.archive.audit import AuditKind
from ingestd.db.database import Database, Tx, jsonb
from ingestd.errors import NotFound, UsageError
from ingestd.people.capabilities import ADMIN, TENANT_SETS, system_sets
from ingestd.people.directory import Directory, DirectoryPerson
from ingestd.tenants import lookup

# Letters and digits of any script, and . _ @ + - inside; at most 200 characters.
_LOGIN = re.compile(r"^\w[\w.@+-]{0,199}$")


def check_login(login: str) -> str:
    """``login`` if it may name a person, else UsageError saying why."""
    if not _LOGIN.fullmatch(login):
        raise UsageError(
            f"{audit.recordable(login)!r} cannot be a login: 1 to 200 letters, digits and "
            ". _ @ + - (no spaces, no ':', no '/'), starting with a letter or digit"
        )
    return login


def check_set(capability_set: str) -> str:
    """``capability_set`` if it is a tenant's set, else UsageError naming the sets."""
    if capability_set not in TENANT_SETS:
        raise UsageError(
            f"{capability_set!r} is not a capability set: one of {', '.join(TENANT_SETS)} "
            f"(`{ADMIN}` is the appliance-wide role: --admin)"
        )
    return capability_set


@dataclass(frozen=True, slots=True)
class Person:
    """A person as the console sees them: their sets by tenant name, and the admin role."""

    login: str
    admin: bool
    has_password: bool
    memberships: dict[str, str] = field(default_factory=dict)
    tenant_ids: dict[str, int] = field(default_factory=dict)  # of those tenants
    sessions_from: float = 0.0  # epoch: a session begun earlier is void (sign-out, password)
    local: bool = True  # their password is ours (False: the directory's, [web.ldap])

    def set_in(self, tenant: str) -> str | None:
        """Their capability set in ``tenant`` (None: not a member)."""
        return self.memberships.get(tenant)


@dataclass(frozen=True, slots=True)
class Change:
    """What ``add_member`` / ``grant_admin`` did."""

    login: str  # as stored (an existing person keeps their spelling)
    new_person: bool
    previous: str | None = None  # the set the membership had before (None: new)
    has_password: bool = False


def _person_row(tx: Tx, login: str) -> dict[str, Any] | None:
    return tx.one("person_get", {"login": login})


def _ensure(tx: Tx, login: str, password_hash: str | None, admin: bool) -> tuple[str, bool]:
    """The person's stored login, made now if new; and whether it is new."""
    made = tx.one("person_insert", {"login": login, "password_hash": password_hash, "admin": admin})
    if made is not None:
        return str(made["login"]), True
    row = _person_row(tx, login)
    assert row is not None  # the insert only yields to an existing person
    return str(row["login"]), False


def add_member(
    tx: Tx,
    login: str,
    tenant: str,
    capability_set: str,
    password_hash: str | None = None,
    *,
    by: dict[str, object] | None = None,
) -> Change:
    """Make ``login`` a member of ``tenant`` with ``capability_set`` (a new person when
    the login is new; an existing membership changes set). The tenant's audit chain
    records it; a password given for a new person is set (and recorded in chain 0)."""
    check_login(login)
    check_set(capability_set)
    t = lookup.by_name(tx, tenant)
    # The system sets as this release defines them (provisioning writes them too; a tenant
    # made before they existed gets them here).
    tx.run("capability_sets_ensure", {"tenant_id": t["id"], "sets": jsonb(system_sets())})
    stored, new = _ensure(tx, login, password_hash, admin=False)
    row = tx.one(
        "member_set", {"tenant_id": t["id"], "login": stored, "capability_set": capability_set}
    )
    assert row is not None
    previous = row["previous"]
    by = by or audit.actor()
    if previous is None:
        audit.append(
            tx,
            chain=int(t["id"]),
            tenant=tenant,
            kind=AuditKind.member_added,
            detail={"login": stored, "set": capability_set, "by": by},
        )
    elif previous != capability_set:
        audit.append(
            tx,
            chain=int(t["id"]),
            tenant=tenant,
            kind=AuditKind.member_changed,
            detail={"login": stored, "from": previous, "set": capability_set, "by": by},
        )
    if new and password_hash is not None:
        _password_entry(tx, stored, by)
    has = password_hash is not None or _has_password(tx, stored)
    return Change(stored, new, previous, has)


def grant_admin(
    tx: Tx, login: str, password_hash: str | None = None, *, by: dict[str, object] | None = None
) -> Change:
    """Make ``login`` an appliance admin (a new person when new), recorded in chain 0."""
    check_login(login)
    stored, new = _ensure(tx, login, password_hash, admin=True)
    row = _person_row(tx, stored)
    assert row is not None
    was_admin = bool(row["admin"]) and not new
    if not new:
        tx.run("person_set_admin", {"login": stored, "admin": True})
    if not was_admin:
        _appliance_entry(tx, AuditKind.admin_granted, stored, by or audit.actor())
    if new and password_hash is not None:
        _password_entry(tx, stored, by)
    return Change(stored, new, ADMIN if was_admin else None, row["password_hash"] is not None)


def set_password(
    tx: Tx, login: str, password_hash: str, *, by: dict[str, object] | None = None
) -> str:
    """Give ``login`` a new password hash (recorded in chain 0 as set ``by``, never the
    hash); NotFound for a login that names nobody, UsageError for a directory person."""
    row = _person_row(tx, login)
    if row is None:
        raise NotFound(f"no person {audit.recordable(login)!r}: `ingestd user add` first")
    if row["directory"] != "local":
        raise UsageError(
            f"{row['login']} logs in with the directory's password ([web.ldap]); change it "
            "there (a password set here would take precedence over the directory)"
        )
    tx.run("person_set_password", {"login": row["login"], "password_hash": password_hash})
    _password_entry(tx, str(row["login"]), by)
    return str(row["login"])


def first_password_refusal(tx: Tx, login: str, tenant: str) -> str | None:
    """Why an owner of ``tenant`` may not hand ``login`` a link to set their first
    password, else None. Only a local person without a password, no admin and a member of
    ``tenant`` alone: an owner never gets to choose the password of someone who can reach
    more than the owner's own tenant (that is the admin's `ingestd user passwd`)."""
    found = person(tx, login)
    if found is None or found.set_in(tenant) is None:
        return "no member of this archive has that login"
    if not found.local:
        return f"{found.login} logs in with the directory's password"
    if found.has_password:
        return f"{found.login} has a password already (they change it under their account)"
    if found.admin or set(found.memberships) != {tenant}:
        return (
            f"{found.login} reaches more than this archive: the appliance's admin sets their "
            f"password (ingestd user passwd {found.login})"
        )
    return None


def _password_entry(tx: Tx, login: str, by: dict[str, object] | None = None) -> None:
    _appliance_entry(tx, AuditKind.person_password_set, login, by or audit.actor())


def _appliance_entry(tx: Tx, kind: AuditKind, login: str, by: dict[str, object]) -> None:
    """A person's entry in the appliance's chain (0): who, by whom; never a hash."""
    audit.append(
        tx, chain=audit.SYSTEM_CHAIN, tenant=None, kind=kind, detail={"login": login, "by": by}
    )


def _has_password(tx: Tx, login: str) -> bool:
    row = _person_row(tx, login)
    return row is not None and row["password_hash"] is not None


@dataclass(frozen=True, slots=True)
class Removed:
    """What ``remove`` did: the memberships that went, and whether the person went."""

    login: str
    memberships: list[tuple[str, str]]  # (tenant, set)
    person_removed: bool
    admin_revoked: bool = False


def remove(
    tx: Tx,
    login: str,
    *,
    tenant: str | None = None,
    admin: bool = False,
    by: dict[str, object] | None = None,
) -> Removed:
    """Remove ``login``'s membership in ``tenant``, or (``admin``) the admin role, or
    with neither the person and every membership. A person left with no membership and
    no admin role goes too. Each removal is an audit entry; NotFound when there is
    nothing to remove."""
    row = _person_row(tx, login)
    if row is None:
        raise NotFound(f"no person {audit.recordable(login)!r}")
    stored = str(row["login"])
    by = by or audit.actor()
    gone: list[tuple[str, str]] = []
    revoked = False
    if tenant is not None:
        t = lookup.by_name(tx, tenant)
        was = tx.one("member_remove", {"tenant_id": t["id"], "login": stored})
        if was is None:
            raise NotFound(f"{stored} is not a member of tenant {tenant}")
        gone.append((tenant, str(was["capability_set"])))
    elif admin:
        if not row["admin"]:
            raise NotFound(f"{stored} is not an admin")
        tx.run("person_set_admin", {"login": stored, "admin": False})
        revoked = True
    else:
        gone = [
            (r["tenant"], r["capability_set"]) for r in tx.all("person_remove", {"login": stored})
        ]
        revoked = bool(row["admin"])
    for name, capability_set in gone:
        chain = audit.chain_of(tx, name)
        audit.append(
            tx,
            chain=chain,
            tenant=name,
            kind=AuditKind.member_removed,
            detail={"login": stored, "set": capability_set, "by": by},
        )
    if revoked:
        _appliance_entry(tx, AuditKind.admin_revoked, stored, by)
    person_gone = tenant is None and not admin
    if not person_gone:
        person_gone = tx.one("person_remove_if_idle", {"login": stored}) is not None
    if person_gone:
        _appliance_entry(tx, AuditKind.person_removed, stored, by)
    return Removed(stored, gone, person_gone, revoked)


def listing(tx: Tx, tenant: str | None = None) -> list[dict[str, Any]]:
    """One row per membership (a person with none, e.g. an admin, one row without a
    tenant), ordered by login; only ``tenant``'s members when given."""
    if tenant is not None:
        lookup.by_name(tx, tenant)
    return tx.all("people_list", {"tenant": tenant})


def person(tx: Tx, login: str) -> Person | None:
    """The person ``login`` names (any case), with their memberships; None if nobody."""
    return _person_of(tx.one("person_now", {"login": login}))


def person_now(db: Database, login: str) -> Person | None:
    """``person`` in one round trip of its own (no transaction block): what the console
    reads on every request."""
    return _person_of(db.one("person_now", {"login": login}))


def _person_of(row: dict[str, Any] | None) -> Person | None:
    if row is None:
        return None
    found = row["memberships"]
    sets = {r["tenant"]: r["capability_set"] for r in found}
    ids = {r["tenant"]: int(r["tenant_id"]) for r in found}
    since = row["sessions_from"]
    return Person(
        str(row["login"]),
        bool(row["admin"]),
        row["password_hash"] is not None,
        sets,
        ids,
        since.timestamp() if since is not None else 0.0,
        row["directory"] == "local",
    )


def sign_out(tx: Tx, login: str, at: float) -> None:
    """End every session of ``login`` that began before ``at`` (epoch seconds)."""
    tx.run("person_sign_out", {"login": login, "at": at})


def from_directory(tx: Tx, found: DirectoryPerson, managed: set[str]) -> Person:
    """Record what the directory said at a login: the person (no password here), the
    admin role, and in each tenant the directory manages exactly the membership its
    groups give (added, changed or removed, each audited as by the directory)."""
    row = _person_row(tx, found.login)
    if row is None:
        tx.run("person_from_directory", {"login": found.login})
        row = _person_row(tx, found.login)
    else:
        tx.run("person_from_directory", {"login": row["login"]})
    assert row is not None
    stored = str(row["login"])
    by: dict[str, object] = {"via": "ldap", "dn": found.dn}
    current = person(tx, stored)
    assert current is not None
    for tenant in sorted(managed):
        want, have = found.memberships.get(tenant), current.set_in(tenant)
        if want == have:
            continue
        if tx.one("tenant_by_name", {"name": tenant}) is None:
            continue  # a group names a tenant that is not (yet) there
        if want is None:
            remove(tx, stored, tenant=tenant, by=by)
        else:
            add_member(tx, stored, tenant, want, by=by)
    if found.admin and not current.admin:
        grant_admin(tx, stored, by=by)
    elif current.admin and not found.admin and bool(row["admin"]):
        remove(tx, stored, admin=True, by=by)
    result = person(tx, stored)
    assert result is not None
    return result


class Logins:
    """The password check of the web console and WebDAV. A person with a password here
    is checked against it; one without (or no person at all) against the directory when
    [web.ldap] is set. A local refusal costs one bcrypt check whatever its reason (no
    such login, no password yet, the wrong one), so timing does not tell which logins
    exist."""

    def __init__(
        self,
        db: Database,
        rounds: int = passwords.DEFAULT_ROUNDS,
        directory: Directory | None = None,
    ) -> None:
        self._db = db
        self._dummy = passwords.dummy_hash(rounds)
        self._directory = directory

    def check(self, login: str, password: str) -> Person | None:
        """The person if ``password`` is theirs, else None."""
        valid = bool(_LOGIN.fullmatch(login))
        with self._db.transaction() as tx:
            row = _person_row(tx, login) if valid else None
            hashed = row["password_hash"] if row is not None else None
            if passwords.matches(password, hashed, self._dummy) and row is not None:
                return person(tx, str(row["login"]))
        if hashed is not None or self._directory is None or not valid:
            return None
        found = self._directory.authenticate(login, password)
        if found is None:
            return None
        with self._db.transaction() as tx:
            return from_directory(tx, found, self._directory.managed_tenants)
