"""Finding a tenant by name, the one way every command and intake does it."""

from __future__ import annotations

from typing import Any

from ingestd.db.database import Tx
from ingestd.errors import TenantNotActive, TenantNotFound
from ingestd.states import TenantStatus


def by_name(tx: Tx, name: str, *, query: str = "tenant_by_name") -> dict[str, Any]:
    """The tenant's row (``query`` may lock it, e.g. ``tenant_lock_for_intake``);
    TenantNotFound if there is none."""
    return found(tx.one(query, {"name": name}), name)


def found(row: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """``row``, the tenant named ``name`` as a query returned it; TenantNotFound if None."""
    if row is None:
        raise TenantNotFound(f"tenant {name!r} does not exist")
    return row


def active_id(row: dict[str, Any]) -> int:
    """The id of a tenant row that is active; TenantNotActive (its files wait) if not."""
    if row["status"] != TenantStatus.active:
        raise TenantNotActive(str(row["name"]), str(row["status"]))
    return int(row["id"])
