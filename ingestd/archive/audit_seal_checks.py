"""The checks of the seals in a verification: the key history down to the pinned public
key, each seal against the chain it signed (signature, timestamp), the ``seal.made``
entries, the witness file outside the database, and the roster of tenant chains the
appliance's newest seal lists."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ingestd.archive import seals
from ingestd.archive.audit import SYSTEM_CHAIN
from ingestd.archive.audit_checker import (
    Anchor,
    AuditProblem,
    AuditProblemKind,
    AuditReport,
    ChainChecker,
    ChainState,
)
from ingestd.archive.export_check import fingerprint, trusted_keys


def chain_of_path(path: str, checker: ChainChecker) -> int:
    tenant = path.split("/", 1)[0]
    for c in checker.chains.values():
        if c.tenant == tenant and c.chain != SYSTEM_CHAIN:
            return c.chain
    return SYSTEM_CHAIN


def _system(checker: ChainChecker) -> ChainState:
    return checker.chains.get(SYSTEM_CHAIN) or ChainState(SYSTEM_CHAIN, None)


def check_key(
    checker: ChainChecker, anchor: Anchor, sealed: Sequence[Mapping[str, Any]], report: AuditReport
) -> set[str] | None:
    """The keys whose seals count (None: no usable key), and the problems of the key
    history: every rotation well formed, the first key one the pinned key vouches for."""
    system = _system(checker)

    def problem(kind: AuditProblemKind, seq: int | None, detail: str) -> None:
        checker.problems.append(AuditProblem(kind, SYSTEM_CHAIN, None, seq, detail))

    for seq, r in system.rotations:
        for why in r.problems():
            problem(AuditProblemKind.key, seq, f"the rotation to {fingerprint(r.new)}: {why}")
    has_seals = bool(sealed) or system.first_key is not None
    if anchor.key is None:
        if has_seals or anchor.explicit:
            problem(
                AuditProblemKind.key,
                None,
                f"the seals cannot be checked: {anchor.why} (pass --public-key FILE: the "
                "appliance's seal-ed25519.pub from your own copy)",
            )
        return None
    report.key = fingerprint(anchor.key)
    trusted = trusted_keys(anchor.key, (r for _, r in system.rotations))
    if system.first_key is not None and system.first_key[1] not in trusted:
        seq, first = system.first_key
        problem(
            AuditProblemKind.key,
            seq,
            f"the appliance's first sealing key {fingerprint(first)} is not the pinned key "
            f"{report.key} and no signed rotation leads from one to the other",
        )
    # No seal yet is not a problem by itself: the key is made at the first `migrate`,
    # before any seal. Seals removed after a seal run show against the witness that run
    # left outside the database (check_witness).
    return trusted


def check_seal(
    checker: ChainChecker, s: Mapping[str, Any], tsa_ca_file: Path | None, trusted: set[str] | None
) -> None:
    chain, seq = int(s["chain"]), int(s["seq"])
    tenant = (checker.chains.get(chain) or ChainState(chain, None)).tenant
    reasons = [f": {r}" for r in seals.problems(s, tsa_ca_file=tsa_ca_file, trusted=trusted)]
    at = checker.hash_at(chain, seq)
    if at is None:
        reasons.append(f" names entry {seq}, which the chain no longer has")
    elif at != s["head"]:
        reasons.append(
            f" no longer matches: entry {seq} was {str(s['head'])[:12]} when it was sealed, "
            f"it is {at[:12]} now (the chain was rewritten)"
        )
    for reason in reasons:
        checker.problems.append(
            AuditProblem(AuditProblemKind.seal, chain, tenant, seq, f"seal {s['id']}{reason}")
        )


def check_seal_entries(checker: ChainChecker, sealed: Sequence[Mapping[str, Any]]) -> None:
    """Each seal row and its ``seal.made`` entry name each other (a seal row removed, or
    one slipped in without its entry)."""
    rows = {int(s["id"]): s for s in sealed}
    for c in checker.chains.values():
        for seal_id, (seq, body_sha) in sorted(c.seal_entries.items()):
            s = rows.get(seal_id)
            if s is None or int(s["chain"]) != c.chain:
                detail = f"names seal {seal_id}, which is gone"
            elif hashlib.sha256(str(s["body"]).encode()).hexdigest() != body_sha:
                detail = f"names seal {seal_id}, whose body is not the one it recorded"
            else:
                continue
            checker.problems.append(
                AuditProblem(AuditProblemKind.seal, c.chain, c.tenant, seq, detail)
            )
    for seal_id, s in rows.items():
        owner = checker.chains.get(int(s["chain"]))
        if owner is None or seal_id not in owner.seal_entries:
            checker.problems.append(
                AuditProblem(
                    AuditProblemKind.seal,
                    int(s["chain"]),
                    owner.tenant if owner else None,
                    int(s["seq"]),
                    f"seal {seal_id} has no seal.made entry in its chain (slipped in)",
                )
            )


def check_witness(
    checker: ChainChecker, witness: Mapping[str, Any], sealed: Sequence[Mapping[str, Any]]
) -> None:
    """The appliance's seal the last seal run recorded outside the database must still
    be there, unchanged: cutting the appliance's chain back to an older seal shows."""
    path = witness.get("path")
    if "unreadable" in witness:
        detail = f"{path} cannot be read: {witness['unreadable']}"
    else:
        seal_id = witness.get("seal")
        row = next((s for s in sealed if s["id"] == seal_id and int(s["chain"]) == 0), None)
        body_sha = hashlib.sha256(str(row["body"]).encode()).hexdigest() if row else None
        if row is not None and body_sha == witness.get("body_sha256"):
            return
        state = "is gone" if row is None else "is not the seal it recorded"
        detail = (
            f"the appliance's seal {seal_id} (entry {witness.get('seq')}), recorded in {path} "
            f"as the newest, {state}: the appliance's chain lost its newest seals, or the "
            "database was restored from a backup older than the state directory"
        )
    seq = witness.get("seq")
    checker.problems.append(
        AuditProblem(
            AuditProblemKind.seal, SYSTEM_CHAIN, None, seq if isinstance(seq, int) else None, detail
        )
    )


def check_roster(
    checker: ChainChecker,
    newest: Mapping[str, Any] | None,
    why: list[str],
    roster: dict[int, tuple[int, str]],
    sealed: Sequence[Mapping[str, Any]],
) -> None:
    """The appliance's newest seal lists every tenant chain's head at its moment: each
    listed chain must still be there, at least that long, with that hash there; every
    tenant seal made before it must be listed (one made after it means the appliance
    chain lost its newest seals)."""
    latest: dict[int, Mapping[str, Any]] = {}
    for s in sealed:
        chain = int(s["chain"])
        if chain != SYSTEM_CHAIN and json.loads(str(s["body"])).get("format") == seals.FORMAT:
            latest[chain] = s  # sealed is ordered by chain, id: the last one wins
    if newest is None:
        for chain, s in sorted(latest.items()):
            c = checker.chains.get(chain) or ChainState(chain, None)
            detail = (
                f"seal {s['id']} is listed by no seal of the appliance's chain: its seals were "
                "removed, or a seal run did not finish (run `ingestd audit seal`)"
            )
            checker.problems.append(
                AuditProblem(AuditProblemKind.seal, chain, c.tenant, int(s["seq"]), detail)
            )
        return
    name = f"the appliance's seal {newest['id']}"
    for w in why:
        checker.problems.append(
            AuditProblem(
                AuditProblemKind.seal, SYSTEM_CHAIN, None, int(newest["seq"]), f"{name}: {w}"
            )
        )
    for chain, (seq, head) in sorted(roster.items()):
        c = checker.chains.setdefault(chain, ChainState(chain, None))
        if c.seq == 0:
            detail = f"the whole chain is gone, though {name} lists it up to entry {seq}"
            checker.problems.append(
                AuditProblem(AuditProblemKind.missing, chain, None, None, detail)
            )
        elif c.seq < seq:
            detail = f"entries {c.seq + 1} to {seq} are gone: {name} lists the chain up to {seq}"
            checker.problems.append(
                AuditProblem(AuditProblemKind.missing, chain, c.tenant, c.seq + 1, detail)
            )
        elif checker.hash_at(chain, seq) != head:
            detail = f"{name} names another hash here (the chain was rewritten)"
            checker.problems.append(
                AuditProblem(AuditProblemKind.seal, chain, c.tenant, seq, detail)
            )
    if why:
        return
    newest_id = int(newest["id"])
    for chain, s in sorted(latest.items()):
        c = checker.chains.get(chain) or ChainState(chain, None)
        listed = roster.get(chain)
        if int(s["id"]) > newest_id:
            detail = (
                f"seal {s['id']} is newer than {name}, the appliance's newest: the appliance's "
                "chain lost its newest seals, or a seal run did not finish (run `ingestd audit "
                "seal`)"
            )
        elif listed is None or listed[0] <= int(s["seq"]):
            detail = f"seal {s['id']} was made before {name}, which does not list it"
        else:
            continue
        checker.problems.append(
            AuditProblem(AuditProblemKind.seal, chain, c.tenant, int(s["seq"]), detail)
        )
