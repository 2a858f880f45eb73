"""Seals: a chain's head, signed (Ed25519) and, with a TSA configured, timestamped
(RFC 3161), so that rewriting the trail after the fact shows even to someone who can
write the database: the rewritten chain no longer matches what was signed.

A seal's body is one JSON line (``chain``, ``tenant``, ``seq``, ``head``, ``sealed_at``,
``public_key``); the signature is over its UTF-8 bytes, the timestamp over their SHA-256.
Each seal is also an entry (``seal.made``) at the end of the chain it seals, so a chain
whose newest entry is its seal is not sealed again until something happens.

The key is ``<state_dir>/audit/seal-ed25519.key`` (the raw private key, hex, 0600,
made on the first seal); ``seal-ed25519.pub`` beside it is what an auditor pins.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ingestd.archive import audit, tsa
from ingestd.archive.audit import AuditKind
from ingestd.config.filemodes import read_secret_file
from ingestd.config.settings import AuditConfig
from ingestd.db.database import Database
from ingestd.durable import publish_new
from ingestd.errors import ConfigError
from ingestd.ops import statedir

KEY_DIR = "audit"
KEY_FILE = "seal-ed25519.key"
PUBLIC_FILE = "seal-ed25519.pub"


@dataclass(frozen=True, slots=True)
class SealMade:
    id: int
    chain: int
    tenant: str | None
    seq: int
    head: str
    timestamped: bool


def key_path(state_dir: Path) -> Path:
    return state_dir / KEY_DIR / KEY_FILE


def signing_key(state_dir: Path, *, create: bool = True) -> Ed25519PrivateKey:
    """The sealing key; made if missing and ``create``. Refused when it is not a regular
    file readable by nobody else (a key others can read seals nothing)."""
    path = key_path(state_dir)
    if not os.path.lexists(path):
        if not create:
            raise ConfigError(f"{path}: no sealing key yet (`ingestd audit seal` makes one)")
        return _create(state_dir, path)
    raw = read_secret_file(path, f"the sealing key {path}")
    try:
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(raw.decode()))
    except ValueError:
        raise ConfigError(f"{path}: not a sealing key (64 hex digits)") from None


def _create(state_dir: Path, path: Path) -> Ed25519PrivateKey:
    statedir.make_dirs(state_dir, path.parent, 0o700)
    key = Ed25519PrivateKey.generate()

    def adopt(p: Path) -> None:  # root's first seal: the service user must read it
        statedir.adopt(state_dir, p)

    raw = key.private_bytes_raw().hex().encode() + b"\n"
    if not publish_new(path, raw, 0o600, prepare=adopt):
        return signing_key(state_dir, create=False)  # two first seals at once: theirs
    publish_new(path.parent / PUBLIC_FILE, public_hex(key).encode() + b"\n", 0o644, prepare=adopt)
    return key


def public_hex(key: Ed25519PrivateKey) -> str:
    return key.public_key().public_bytes_raw().hex()


def known_public_key(state_dir: Path) -> str | None:
    """This appliance's public sealing key, None before the first seal."""
    try:
        return public_hex(signing_key(state_dir, create=False))
    except ConfigError:
        return None


def seal_body(
    *, chain: int, tenant: str | None, seq: int, head: str, sealed_at: str, public_key: str
) -> str:
    body = {
        "chain": chain,
        "tenant": tenant,
        "seq": seq,
        "head": head,
        "sealed_at": sealed_at,
        "public_key": public_key,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def seal_all(db: Database, state_dir: Path, config: AuditConfig) -> list[SealMade]:
    """Seal every chain that has grown since its last seal; the seals made."""
    key = signing_key(state_dir)
    pub = public_hex(key)
    with db.transaction() as tx:
        heads = tx.all("audit_chains")
    made = []
    for h in heads:
        if int(h["seq"]) == 0:
            continue
        sealed = _seal_one(db, key, pub, int(h["chain"]), config)
        if sealed is not None:
            made.append(sealed)
    return made


def _seal_one(
    db: Database, key: Ed25519PrivateKey, pub: str, chain: int, config: AuditConfig
) -> SealMade | None:
    with db.transaction() as tx:
        h = tx.one("audit_head_for_seal", {"chain": chain})
    if h is None or h["last_kind"] == AuditKind.sealed:
        return None
    seq, head, tenant = int(h["seq"]), str(h["hash"]), h["tenant"]
    body = seal_body(
        chain=chain,
        tenant=tenant,
        seq=seq,
        head=head,
        sealed_at=datetime.now(UTC).isoformat(timespec="seconds"),
        public_key=pub,
    )
    signature = key.sign(body.encode()).hex()
    reply = None
    if config.tsa_url:
        # Outside any transaction: a slow authority must not hold the chain's head (and
        # the tenant's intake with it). The seal is of entry ``seq``, whatever comes after.
        digest = hashlib.sha256(body.encode()).hexdigest()
        reply = tsa.stamp(config.tsa_url, digest, timeout=config.tsa_timeout)
        if config.tsa_ca_file is not None:
            tsa.verify(reply, digest, config.tsa_ca_file)
    with db.transaction() as tx:
        row = tx.one(
            "audit_seal_insert",
            {
                "chain": chain,
                "seq": seq,
                "head": head,
                "body": body,
                "signature": signature,
                "public_key": pub,
                "tsa_reply": reply,
            },
        )
        assert row is not None
        seal_id = int(row["id"])
        audit.append(
            tx,
            chain=chain,
            tenant=tenant,
            kind=AuditKind.sealed,
            detail={
                "seal": seal_id,
                "seq": seq,
                "head": head,
                "body_sha256": hashlib.sha256(body.encode()).hexdigest(),
                "timestamped": reply is not None,
            },
        )
    return SealMade(seal_id, chain, tenant, seq, head, reply is not None)


def problems(
    seal: Mapping[str, Any], *, tsa_ca_file: Path | None, public_key: str | None
) -> list[str]:
    """What is wrong with one stored seal by itself (its body, its signature and whose,
    its timestamp); whether it still matches its chain is the chain check's question."""
    found: list[str] = []
    if public_key is not None and seal["public_key"] != public_key:
        found.append(
            f"signed by key {str(seal['public_key'])[:16]}…, not by this appliance's key "
            f"{public_key[:16]}… (a seal made elsewhere, or forged)"
        )
    body_text = str(seal["body"])
    try:
        body = json.loads(body_text)
    except ValueError:
        return ["its body is not JSON"]
    for key in ("chain", "seq", "head", "public_key"):
        if body.get(key) != seal[key]:
            found.append(f"its {key} column differs from what was signed")
    try:
        public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(str(seal["public_key"])))
        public.verify(bytes.fromhex(str(seal["signature"])), body_text.encode())
    except (ValueError, InvalidSignature):
        found.append("the signature does not verify")
    if seal["tsa_reply"] and tsa_ca_file is not None:
        try:
            tsa.verify(
                str(seal["tsa_reply"]), hashlib.sha256(body_text.encode()).hexdigest(), tsa_ca_file
            )
        except tsa.TsaError as exc:
            found.append(f"the timestamp does not verify: {exc.message}")
    return found
