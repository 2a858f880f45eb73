"""Seals: a chain's head, signed (Ed25519) and, with a TSA configured, timestamped
(RFC 3161), so that rewriting the trail after the fact shows even to someone who can
write the database: the rewritten chain no longer matches what was signed.

A seal's body is one JSON line (``chain``, ``tenant``, ``seq``, ``head``, ``sealed_at``,
``public_key``, ``format``); the signature is over its UTF-8 bytes, the timestamp over
their SHA-256. Each seal is also an entry (``seal.made``) at the end of the chain it
seals, so a chain whose newest entry is its seal is not sealed again until something
happens.

A run seals the tenant chains first, then the appliance's chain (0), whose seal also
signs its roster: the SHA-256 of every tenant chain's ``[chain, seq, head]`` at that
moment (``chains`` and ``roster`` in the body, the list itself in the seal's row). So a
tenant chain deleted whole, or cut short, is found even when every trace of it in the
database went with it. The key is ``sealkey``'s business; runs hold the seal lock.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ingestd.archive import audit, tsa
from ingestd.archive.audit import SYSTEM_CHAIN, AuditKind
from ingestd.archive.export_check import fingerprint, roster_digest, roster_text, verify_signature
from ingestd.archive.sealkey import key_for_sealing, public_hex, seal_lock, write_witness
from ingestd.config.settings import AuditConfig
from ingestd.db.database import Database

# The body's ``format``: 2 since seals of the appliance's chain carry a roster (a tenant
# seal of format 2 must be listed by a later appliance seal). Absent: an older release.
FORMAT = 2


@dataclass(frozen=True, slots=True)
class SealMade:
    id: int
    chain: int
    tenant: str | None
    seq: int
    head: str
    timestamped: bool
    body_sha256: str


def seal_body(
    *,
    chain: int,
    tenant: str | None,
    seq: int,
    head: str,
    sealed_at: str,
    public_key: str,
    roster: str | None = None,
) -> str:
    body: dict[str, Any] = {
        "chain": chain,
        "tenant": tenant,
        "seq": seq,
        "head": head,
        "sealed_at": sealed_at,
        "public_key": public_key,
        "format": FORMAT,
    }
    if roster is not None:
        body["roster"] = roster_digest(roster)
        body["chains"] = len(json.loads(roster))
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def seal_all(db: Database, state_dir: Path, config: AuditConfig) -> list[SealMade]:
    """Seal every tenant chain that has grown since its last seal, then the appliance's
    chain with the roster of them all; the seals made."""
    with seal_lock(db):
        key = key_for_sealing(db, state_dir)
        with db.transaction() as tx:
            heads = tx.all("audit_chains")
        made = []
        for h in heads:
            if int(h["seq"]) == 0 or int(h["chain"]) == SYSTEM_CHAIN:
                continue
            sealed = _seal_one(db, key, int(h["chain"]), config)
            if sealed is not None:
                made.append(sealed)
        appliance = _seal_one(db, key, SYSTEM_CHAIN, config)
        if appliance is not None:
            made.append(appliance)
            write_witness(
                state_dir, seal=appliance.id, seq=appliance.seq, body_sha256=appliance.body_sha256
            )
    return made


def _seal_one(
    db: Database, key: Ed25519PrivateKey, chain: int, config: AuditConfig
) -> SealMade | None:
    roster: str | None = None
    with db.transaction() as tx:
        h = tx.one("audit_head_for_seal", {"chain": chain})
        if h is None:
            return None
        if chain == SYSTEM_CHAIN:
            roster = roster_text(
                (int(r["chain"]), int(r["seq"]), str(r["hash"]))
                for r in tx.all("audit_roster_heads")
            )
            last = tx.one("audit_newest_appliance_seal")
            if h["last_kind"] == AuditKind.sealed and last and last["roster"] == roster:
                return None
        elif h["last_kind"] == AuditKind.sealed:
            return None
    seq, head, tenant = int(h["seq"]), str(h["hash"]), h["tenant"]
    pub = public_hex(key)
    body = seal_body(
        chain=chain,
        tenant=tenant,
        seq=seq,
        head=head,
        sealed_at=datetime.now(UTC).isoformat(timespec="seconds"),
        public_key=pub,
        roster=roster,
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
    body_sha256 = hashlib.sha256(body.encode()).hexdigest()
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
                "roster": roster,
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
                "body_sha256": body_sha256,
                "timestamped": reply is not None,
            },
        )
    return SealMade(seal_id, chain, tenant, seq, head, reply is not None, body_sha256)


def problems(
    seal: Mapping[str, Any], *, tsa_ca_file: Path | None, trusted: set[str] | None
) -> list[str]:
    """What is wrong with one stored seal by itself (its body, its signature and whose,
    its timestamp); whether it still matches its chain is the chain check's question.
    ``trusted``: the keys the verifier's pinned key vouches for (None: no usable key,
    which the caller reports once; the signature is still checked for what it says)."""
    found: list[str] = []
    if trusted is not None and seal["public_key"] not in trusted:
        found.append(
            f"signed by key {fingerprint(str(seal['public_key']))}, which the pinned key does "
            "not vouch for (a seal made elsewhere, or forged)"
        )
    body_text = str(seal["body"])
    try:
        body = json.loads(body_text)
    except ValueError:
        return ["its body is not JSON"]
    for key in ("chain", "seq", "head", "public_key"):
        if body.get(key) != seal[key]:
            found.append(f"its {key} column differs from what was signed")
    if not verify_signature(str(seal["public_key"]), str(seal["signature"]), body_text):
        found.append("the signature does not verify")
    if seal["tsa_reply"] and tsa_ca_file is not None:
        try:
            tsa.verify(
                str(seal["tsa_reply"]), hashlib.sha256(body_text.encode()).hexdigest(), tsa_ca_file
            )
        except tsa.TsaError as exc:
            found.append(f"the timestamp does not verify: {exc.message}")
    return found
