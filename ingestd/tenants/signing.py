"""Signed delete-tenant requests (seed 004, "Tenant delete/reset safety checks").

The admin CLI builds ``v1|tenant_id|tenant_name|action|nonce|issued_at|final_status`` and
signs it with HMAC-SHA256 under a key derived from the server secret; the worker rebuilds
the message from the payload *and the job's own tenant id*, compares in constant time,
and checks that the fields agree with each other and with the tenant, that the request
is fresh, and (with the database) that its nonce was never used by another job. A
request that fails any check deletes nothing.

The server secret is a random file under ``paths.state_dir`` (mode 0600, made on first
use, never in the config or a log line). Keys are derived per purpose, so a key that
signs delete requests signs nothing else.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestd.config.filemodes import check_secret_file
from ingestd.errors import ConfigError, IngestdError
from ingestd.runtime import statedir
from ingestd.states import TenantStatus

SECRET_FILE = "server.secret"  # noqa: S105 (a file name, not a secret)
SECRET_BYTES = 32
MAX_AGE = datetime.timedelta(minutes=5)  # seed 004: no more than five minutes old
MAX_SKEW = datetime.timedelta(seconds=30)  # clocks of admin host and worker host
ACTIONS = ("delete", "reset")
FINAL_STATUSES = (TenantStatus.active, TenantStatus.suspended)
_NONCE = re.compile(r"^[0-9a-f]{32,128}$")
_PURPOSE = b"ingestd/delete-tenant/v1"


class SignatureRefused(IngestdError):
    """A delete-tenant request failed a check; nothing was deleted."""


def _check_mode(path: Path) -> None:
    check_secret_file(path.lstat(), f"server secret {path}")


def server_secret(state_dir: Path, *, create: bool = True) -> bytes:
    """The server secret; made (0600, owned like state_dir) if missing and ``create``."""
    path = state_dir / SECRET_FILE
    try:
        _check_mode(path)
        raw = path.read_bytes().strip()
    except FileNotFoundError:
        if not create:
            raise ConfigError(
                f"{path}: no server secret yet (`ingestd tenant delete` makes one)"
            ) from None
        raw = _create(path)
    if len(raw) < 2 * SECRET_BYTES:
        raise ConfigError(f"{path}: the server secret is too short")
    return raw


def _create(path: Path) -> bytes:
    state_dir = path.parent
    statedir.make_dirs(state_dir, state_dir, 0o777)  # as before: the umask decides
    value = secrets.token_hex(SECRET_BYTES).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        _check_mode(path)
        return path.read_bytes().strip()
    try:
        # Before it has content: the service user (owner of state_dir) must read it
        # even when root (`sudo ingestd tenant delete`) made it.
        statedir.adopt(state_dir, fd)
        os.write(fd, value + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return value


def _key(secret: bytes) -> bytes:
    return hmac.new(secret, _PURPOSE, hashlib.sha256).digest()


def message(tenant_id: int, p: dict[str, Any]) -> bytes:
    fields = [
        "v1",
        str(tenant_id),
        str(p.get("tenant_name", "")),
        str(p.get("action", "")),
        str(p.get("nonce", "")),
        str(p.get("issued_at", "")),
        str(p.get("final_status") or ""),
    ]
    if p.get("override_retention"):
        # Signed like the rest, so nobody can add it to a queued request; appended only
        # when present, so requests signed before it existed still verify.
        fields.append(f"override_retention={p['override_retention']}")
    return "|".join(fields).encode()


def sign(secret: bytes, tenant_id: int, payload: dict[str, Any]) -> str:
    return hmac.new(_key(secret), message(tenant_id, payload), hashlib.sha256).hexdigest()


def delete_request(
    secret: bytes,
    tenant_id: int,
    tenant_name: str,
    action: str,
    final_status: str | None = None,
    now: datetime.datetime | None = None,
    override_retention: str | None = None,
) -> dict[str, Any]:
    """The seed's delete-tenant payload, signed; ``override_retention`` (the operator's
    reason) lets it remove documents still within retention (never under a legal hold)."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}")
    if action == "delete" and final_status is not None:
        raise ValueError("final_status is for reset only (delete removes the tenant)")
    if final_status is not None and final_status not in FINAL_STATUSES:
        raise ValueError(f"final_status must be one of {FINAL_STATUSES}")
    issued = (now or datetime.datetime.now(datetime.UTC)).replace(microsecond=0)
    payload: dict[str, Any] = {
        "remove_tenant": action == "delete",
        "tenant_name": tenant_name,
        "action": action,
        "nonce": secrets.token_hex(16),
        "issued_at": issued.isoformat().replace("+00:00", "Z"),
    }
    if final_status is not None:
        payload["final_status"] = final_status
    if override_retention:
        payload["override_retention"] = override_retention
    payload["signature"] = sign(secret, tenant_id, payload)
    return payload


@dataclass(frozen=True)
class DeleteRequest:
    tenant_name: str
    action: str
    remove_tenant: bool
    final_status: str  # for reset: the status the empty tenant is left in
    nonce: str
    issued_at: datetime.datetime
    override_retention: str | None = None  # the operator's reason, when given


def verify(
    secret: bytes,
    tenant_id: int,
    tenant_name: str,
    payload: dict[str, Any],
    now: datetime.datetime | None = None,
) -> DeleteRequest:
    """Check a delete-tenant payload against the job's tenant; raise SignatureRefused
    saying which check failed. The nonce's first use is the caller's (database) check."""
    now = now or datetime.datetime.now(datetime.UTC)
    expected = sign(secret, tenant_id, payload)
    got = payload.get("signature")
    # Constant time: compare_digest over equal-length ASCII; a missing or odd-typed
    # signature compares as a wrong one.
    if not isinstance(got, str) or not hmac.compare_digest(expected, got.lower()):
        raise SignatureRefused(
            "delete-tenant refused: the signature does not match the "
            "request (forged, or a field changed after signing); "
            "nothing was deleted"
        )
    name, action = payload.get("tenant_name"), payload.get("action")
    if name != tenant_name:
        raise SignatureRefused(
            f"delete-tenant refused: the request names tenant {name!r}, the job belongs "
            f"to {tenant_name!r}; nothing was deleted"
        )
    if action not in ACTIONS:
        raise SignatureRefused(f"delete-tenant refused: unknown action {action!r}")
    remove = payload.get("remove_tenant")
    if remove is not (action == "delete"):
        raise SignatureRefused(
            f"delete-tenant refused: remove_tenant={remove!r} does not go "
            f"with action {action!r}; nothing was deleted"
        )
    final = payload.get("final_status")
    if final is not None and (action != "reset" or final not in FINAL_STATUSES):
        raise SignatureRefused(
            f"delete-tenant refused: final_status {final!r} is not valid "
            f"for action {action!r}; nothing was deleted"
        )
    nonce = payload.get("nonce")
    if not isinstance(nonce, str) or not _NONCE.match(nonce):
        raise SignatureRefused("delete-tenant refused: the nonce is missing or malformed")
    try:
        issued = datetime.datetime.fromisoformat(str(payload.get("issued_at")))
    except ValueError:
        raise SignatureRefused(
            "delete-tenant refused: issued_at is not an RFC 3339 timestamp"
        ) from None
    if issued.tzinfo is None:
        raise SignatureRefused("delete-tenant refused: issued_at has no time zone")
    if issued > now + MAX_SKEW:
        raise SignatureRefused(
            f"delete-tenant refused: issued_at {payload['issued_at']} is "
            "in the future; nothing was deleted"
        )
    if now - issued > MAX_AGE:
        age = int((now - issued).total_seconds())
        limit = int(MAX_AGE.total_seconds())
        raise SignatureRefused(
            f"delete-tenant refused: the request was issued {age} s ago (at most {limit} s);"
            " sign a new one with `ingestd tenant delete|reset`; nothing was deleted"
        )
    return DeleteRequest(
        tenant_name=tenant_name,
        action=action,
        remove_tenant=bool(remove),
        final_status=final or TenantStatus.suspended,
        nonce=nonce,
        issued_at=issued,
        override_retention=str(payload["override_retention"])
        if payload.get("override_retention")
        else None,
    )
