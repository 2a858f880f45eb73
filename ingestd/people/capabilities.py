"""What each capability set may do: the one table (issue 31), read by the web console,
the WebDAV mount and the CLI, written into every tenant's system sets at provisioning,
and printed in the README (tests/unit/test_capabilities.py keeps the two equal).

A person has one set per tenant they are a member of (``tenant_members``); ``admin`` is
the appliance-wide operator role, which by itself sees no tenant's documents. Everything
not in a set's row is refused: a new action is nobody's until it is added here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class Action(enum.StrEnum):
    """Something a person may be allowed to do. Tenant actions first, then the admin's."""

    # -- in one tenant ----------------------------------------------------------------
    search = "search"  # search and list the tenant's documents
    view = "view"  # a document's metadata, page previews, split lineage, audit history
    download = "download"  # the original and the searchable PDF, under the original name
    upload = "upload"  # files through the browser, into the same intake as every source
    edit = "edit"  # title, date, tags, correspondent; never the original
    members = "members"  # the tenant's people and their sets
    attention = "attention"  # documents in attention: re-queue, mark done
    retention = "retention"  # the tenant's retention and holds, shown
    arrivals = "arrivals"  # the tenant's arrivals and refusals ("what happened to my file")
    mount = "mount"  # the read-only WebDAV mount of the tenant's documents
    # -- on the appliance (the admin role) --------------------------------------------
    status = "status"  # every tenant's status, what `ingestd status` shows
    pools = "pools"  # worker pools and their jobs
    spool = "spool"  # the SFTP spool and uploads in progress
    hotfolders = "hotfolders"  # hot folders and their waiting files
    bans = "bans"  # SFTP and login bans (and lifting them)
    audit = "audit"  # the audit trail's state: seals, verification


class CapabilitySet(enum.StrEnum):
    """The system sets every tenant has (seed 004's provision-tenant)."""

    owner = "owner"
    user = "user"
    readonly = "readonly"
    webdav = "webdav"


ADMIN = "admin"  # the appliance-wide role: not a tenant's set

_READONLY = frozenset({Action.search, Action.view, Action.download})
_USER = _READONLY | {Action.upload, Action.edit}
_OWNER = _USER | {Action.members, Action.attention, Action.retention, Action.arrivals}

# The table. Each row is everything the set may do; nothing else is allowed.
ALLOWED: Mapping[str, frozenset[Action]] = {
    CapabilitySet.readonly: _READONLY,
    CapabilitySet.user: _USER,
    CapabilitySet.owner: _OWNER,
    CapabilitySet.webdav: frozenset({Action.mount}),
    ADMIN: frozenset(
        {Action.status, Action.pools, Action.spool, Action.hotfolders, Action.bans, Action.audit}
    ),
}

# One line each, for `ingestd user add --help`, the README and the console.
SUMMARY: Mapping[str, str] = {
    CapabilitySet.readonly: "search, view, download",
    CapabilitySet.user: "readonly, plus upload through the browser and edit title, date, "
    "tags, correspondent (never the original)",
    CapabilitySet.owner: "user, plus the tenant's people, documents in attention (re-queue, "
    "mark done), retention and holds shown, the tenant's arrivals and refusals",
    CapabilitySet.webdav: "the read-only WebDAV mount",
    ADMIN: "every tenant's status, pools, spool, hot folders, bans, the audit state "
    "(no tenant's documents)",
}

TENANT_SETS: tuple[str, ...] = tuple(CapabilitySet)
DEFAULT_SET = CapabilitySet.readonly  # least privilege when `user add` names none
MEMBER_SET = CapabilitySet.owner  # members named at `tenant create` run their tenant


def may(capability_set: str | None, action: Action) -> bool:
    """Whether a holder of ``capability_set`` (a tenant set, or ``admin``) may do
    ``action``; an unknown or missing set may do nothing."""
    if capability_set is None:
        return False
    return action in ALLOWED.get(capability_set, frozenset())


def stored(capability_set: str) -> list[str]:
    """The set's actions as the ``capability_sets`` table holds them (sorted)."""
    return sorted(str(a) for a in ALLOWED[capability_set])


def system_sets() -> dict[str, list[str]]:
    """Every tenant set with its actions, as provisioning writes them."""
    return {name: stored(name) for name in TENANT_SETS}
