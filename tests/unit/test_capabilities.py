"""Every capability set's allowed and refused actions, as issue 31 lists them: one literal
matrix here against the one table in the code, and the README's table against both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingestd.people.capabilities import (
    ADMIN,
    ALLOWED,
    SUMMARY,
    TENANT_SETS,
    Action,
    may,
    system_sets,
)

README = Path(__file__).resolve().parents[2] / "README.md"

A = Action
# Written out by hand from the issue, not derived from the code: a change to either shows.
EXPECTED: dict[str, set[Action]] = {
    "readonly": {A.search, A.view, A.download},
    "user": {A.search, A.view, A.download, A.upload, A.edit},
    "owner": {A.search, A.view, A.download, A.upload, A.edit}
    | {A.members, A.attention, A.retention, A.arrivals},
    "webdav": {A.mount},
    "admin": {A.status, A.pools, A.spool, A.hotfolders, A.bans, A.audit},
}


@pytest.mark.parametrize("capability_set", sorted(EXPECTED))
@pytest.mark.parametrize("action", list(Action))
def test_each_set_may_do_exactly_its_row(capability_set: str, action: Action) -> None:
    """Allowed where the issue allows it, refused everywhere else."""
    assert may(capability_set, action) is (action in EXPECTED[capability_set])


def test_the_table_has_no_set_the_issue_does_not_name() -> None:
    """The code's sets are exactly the four tenant sets and the admin role."""
    assert set(ALLOWED) == set(EXPECTED)
    assert set(TENANT_SETS) == set(EXPECTED) - {ADMIN}
    assert set(SUMMARY) == set(EXPECTED)


def test_unknown_or_no_set_may_do_nothing() -> None:
    """A missing membership (None), a set made up in the database, a case variant: nothing."""
    for nobody in (None, "", "Owner", "superuser", "owner "):
        assert not any(may(nobody, a) for a in Action)


def test_admin_sees_no_tenant_documents_and_tenant_sets_no_appliance() -> None:
    """The operator role carries no document action; no tenant set carries an admin one."""
    documents = {A.search, A.view, A.download, A.upload, A.edit, A.mount}
    assert not ALLOWED[ADMIN] & documents
    appliance = set(ALLOWED[ADMIN])
    for name in TENANT_SETS:
        assert not ALLOWED[name] & appliance


def test_provisioning_stores_the_table() -> None:
    """What provisioning writes into capability_sets is the table, sorted."""
    sets = system_sets()
    assert set(sets) == set(TENANT_SETS)
    for name, actions in sets.items():
        assert actions == sorted(str(a) for a in EXPECTED[name])


def _readme_rows() -> dict[str, set[str]]:
    text = README.read_text()
    section = text.split("\n### Capability sets\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `([a-z]+)` \| (.+?) \|$", section, flags=re.MULTILINE)
    return {name: set(re.findall(r"`([a-z]+)`", actions)) for name, actions in rows}


def test_the_readme_table_is_the_code_table() -> None:
    """README "Capability sets": one row per set listing exactly its actions."""
    assert _readme_rows() == {k: {str(a) for a in v} for k, v in EXPECTED.items()}
