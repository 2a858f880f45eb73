"""The audit trail: every archive event, appended in the transaction of the event.

An entry is one line of JSON (built by ``audit_append`` in migration 0010, so every writer
makes the same shape) whose hash covers the hash of the entry before it:
``hash = sha256(prev_hash + body)``, hex, the first entry's ``prev_hash`` 64 zeros. One
chain per tenant (its id; chain 0 is the appliance's own). Nothing here decides whether
an event happens: the code that makes it happen calls ``append`` inside its own
transaction, so the event and its record commit or roll back together.
"""

from __future__ import annotations

import enum
import hashlib
import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass

from ingestd.db.database import Tx, jsonb

# The one rule for untrusted text (ingestd/textsafe.py), re-exported for audit callers.
from ingestd.textsafe import recordable as recordable

SYSTEM_CHAIN = 0
GENESIS = "0" * 64


class AuditKind(enum.StrEnum):
    # -- a tenant's chain -----------------------------------------------------------------
    archived = "document.archived"  # a file is in the archive and recorded
    duplicate = "document.duplicate"  # the same bytes again: nothing new stored
    refused = "document.refused"  # not taken, with the reason (quarantined or left)
    batch_split = "document.split"  # a batch became its children (each also archived)
    purged = "document.purged"  # removed after its retention
    tenant_deleted = "tenant.deleted"
    tenant_reset = "tenant.reset"
    retention_changed = "retention.changed"
    hold_set = "hold.set"
    hold_released = "hold.released"
    sealed = "seal.made"
    handed_out = "document.handed_out"  # `documents get`: who, which variant, its SHA-256
    viewed = "document.viewed"  # its page was shown in the web console (who, from where)
    edited = "document.edited"  # a person changed its title or date (from, to; never the file)
    member_added = "member.added"  # a person became a member, with a capability set
    member_changed = "member.changed"  # a member's capability set changed (from, to)
    member_removed = "member.removed"  # a person is no longer a member
    # -- the appliance's chain ------------------------------------------------------------
    chain_opened = "chain.opened"  # a tenant's chain started (written by audit_append)
    verify_run = "verify.run"
    key_created = "key.created"  # the first sealing key, at the first seal (its fingerprint)
    key_rotated = "key.rotated"  # a new sealing key, the statement signed by old and new
    person_password_set = "person.password_set"  # noqa: S105 (an event name; never the hash)
    admin_granted = "admin.granted"  # a person became an appliance admin
    admin_revoked = "admin.revoked"
    person_removed = "person.removed"  # a person's login is gone


@dataclass(frozen=True, slots=True)
class Appended:
    chain: int
    seq: int
    hash: str


def entry_hash(prev_hash: str, body: str) -> str:
    """What an entry's hash must be (the same rule the database applies)."""
    return hashlib.sha256((prev_hash + body).encode()).hexdigest()


def append(
    tx: Tx,
    *,
    chain: int,
    tenant: str | None,
    kind: AuditKind,
    document_id: int | None = None,
    detail: Mapping[str, object] | None = None,
) -> Appended:
    """Append one entry to ``chain`` in ``tx`` (waits for the chain's head row: entries of
    one chain are numbered in commit order, without gaps)."""
    row = tx.one("audit_append", append_params(chain, tenant, kind, document_id, detail))
    assert row is not None  # the function always returns its one row
    return Appended(chain, int(row["seq"]), str(row["hash"]))


def append_params(
    chain: int,
    tenant: str | None,
    kind: AuditKind,
    document_id: int | None = None,
    detail: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The parameters of the ``audit_append`` query for one entry (for a caller that
    sends it itself, e.g. together with its COMMIT)."""
    return {
        "chain": chain,
        "tenant": recordable(tenant),
        "kind": str(kind),
        "document_id": document_id,
        "detail": jsonb(recordable(detail or {})),
    }


def chain_of(tx: Tx, tenant: str) -> int:
    """The chain a tenant's events go to: its own, or the appliance's when no tenant of
    that name exists (a hot folder or account naming a tenant never created)."""
    row = tx.one("audit_chain_of_tenant", {"tenant": tenant})
    return int(row["chain"]) if row is not None else SYSTEM_CHAIN


def actor() -> dict[str, object]:
    """Who acts from the command line: the OS user the process runs as and, when run
    through sudo, the user who ran sudo (SUDO_USER, SUDO_UID)."""
    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    who: dict[str, object] = {"user": user, "uid": uid}
    if os.environ.get("SUDO_USER"):
        who["sudo_user"] = os.environ["SUDO_USER"]
        if (sudo_uid := os.environ.get("SUDO_UID", "")).isdigit():
            who["sudo_uid"] = int(sudo_uid)
    return who
