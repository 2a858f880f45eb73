#!/usr/bin/env python3
"""Check an audit export (``ingestd audit export``) on its own: no ingestd, no database.

This file depends on the Python standard library and ``cryptography`` only (and
``openssl`` for RFC 3161 timestamps), so an auditor can copy it out and run it:

    python3 export_check.py acme-2026.jsonl --public-key seal-ed25519.pub [--tsa-ca ca.pem]

It recomputes every entry's hash (``sha256(prev_hash + body)``), checks that each entry
follows the one before it and carries its own position, and checks every seal against the
key the auditor holds (``--public-key``: the appliance's ``seal-ed25519.pub``, or its 64
hex digits): a seal counts only when it is signed by that key, or by a key that key
vouches for through a signed rotation shipped in the export. It checks that every sealed
position still has the sealed hash, that the appliance's newest seal (which commits to
the head of every tenant chain, its roster) still finds this chain's entry where it was,
and, with ``--tsa-ca``, every timestamp.

Exit 0: the export is intact; 5: what is wrong is printed, one line per problem, with
the entry's position; 11: no usable public key was given, so the seals could not be
checked (never a silent pass). The rules are the ones ``ingestd audit verify`` applies;
ingestd imports the shared ones from here, so the check needs nothing of the software it
checks.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "ingestd-audit-export/1"
ROTATION = "ingestd-seal-key-rotation/1"
EXIT_INTACT, EXIT_PROBLEMS, EXIT_KEY = 0, 5, 11
_HEX_KEY = re.compile(r"^[0-9a-f]{64}$")
_MAX_KEY_FILE = 4096


class KeyUnusable(Exception):
    """The public key to check seals against cannot be used; the message says why."""


def _hash(prev_hash: str, body: str) -> str:
    return hashlib.sha256((prev_hash + body).encode()).hexdigest()


def fingerprint(public_hex: str) -> str:
    """``SHA256:`` and the unpadded base64 of the raw key's SHA-256 (as OpenSSH shows)."""
    try:
        raw = bytes.fromhex(public_hex)
    except ValueError:
        return f"(not a key: {public_hex[:16]!r})"
    digest = base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def parse_public_key(data: bytes, what: str) -> str:
    """The raw Ed25519 public key (64 hex digits) in a ``.pub`` file's bytes: the hex line
    ingestd writes, or a PEM ``PUBLIC KEY``."""
    text = data.decode("ascii", "replace").strip()
    if _HEX_KEY.match(text.lower()):
        return text.lower()
    if text.startswith("-----BEGIN PUBLIC KEY-----"):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.hazmat.primitives.serialization import load_pem_public_key

        try:
            key = load_pem_public_key(text.encode())
        except ValueError:
            raise KeyUnusable(f"{what}: not a PEM public key") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyUnusable(f"{what}: a PEM key, but not Ed25519")
        return key.public_bytes_raw().hex()
    raise KeyUnusable(f"{what}: not an Ed25519 public key (64 hex digits or PEM)")


def read_public_key(path: Path) -> str:
    """The key in the file at ``path``; ``KeyUnusable`` with the reason when it is missing,
    unreadable, not a regular file, writable by anyone (then anyone could swap the key
    the seals are judged by), too large or not a key."""
    what = f"public key {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise KeyUnusable(f"{what}: no such file") from None
    except OSError as exc:
        raise KeyUnusable(f"{what}: cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyUnusable(f"{what}: not a regular file")
        if st.st_mode & stat.S_IWOTH:
            raise KeyUnusable(
                f"{what}: writable by everyone (mode {stat.S_IMODE(st.st_mode):04o}): "
                "it cannot anchor anything; chmod o-w it after checking its fingerprint"
            )
        data = os.read(fd, _MAX_KEY_FILE + 1)
    except OSError as exc:
        raise KeyUnusable(f"{what}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > _MAX_KEY_FILE:
        raise KeyUnusable(f"{what}: larger than {_MAX_KEY_FILE} bytes: not a key")
    return parse_public_key(data, what)


def resolve_public_key(value: str) -> str:
    """``--public-key``: a file holding the key, or the key's 64 hex digits themselves."""
    if _HEX_KEY.match(value.strip().lower()) and not os.path.exists(value):
        return value.strip().lower()
    return read_public_key(Path(value))


def verify_signature(public_hex: str | None, signature_hex: str | None, message: str) -> bool:
    """Whether ``signature_hex`` is ``public_hex``'s Ed25519 signature of ``message``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if not public_hex or not signature_hex:
        return False
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_hex))
        key.verify(bytes.fromhex(signature_hex), message.encode())
    except (ValueError, InvalidSignature):
        return False
    return True


@dataclass(frozen=True, slots=True)
class Rotation:
    """A change of sealing key as recorded in the appliance's chain: the statement (which
    names both keys) signed by the old key and by the new one; by the new one only when
    the statement says the old key was lost (``old_key_lost``)."""

    old: str | None
    new: str
    statement: str
    signature_old: str | None
    signature_new: str | None

    @classmethod
    def from_detail(cls, d: dict[str, Any]) -> Rotation:
        return cls(
            d.get("from"),
            str(d.get("to")),
            str(d.get("statement")),
            d.get("signature_from"),
            d.get("signature_to"),
        )

    def problems(self) -> list[str]:
        """What is wrong with the record itself (not whether anyone trusts it)."""
        found = []
        try:
            said = json.loads(self.statement)
        except ValueError:
            return ["its statement is not JSON"]
        if not isinstance(said, dict) or said.get("statement") != ROTATION:
            return [f"its statement is not an {ROTATION} statement"]
        if (said.get("from"), said.get("to")) != (self.old, self.new):
            found.append("its keys differ from the ones its statement names")
        if not verify_signature(self.new, self.signature_new, self.statement):
            found.append("the new key's signature does not verify")
        if self.signature_old is not None:
            if not verify_signature(self.old, self.signature_old, self.statement):
                found.append("the old key's signature does not verify")
        elif not said.get("old_key_lost"):
            found.append("the old key's signature is missing")
        return found


def trusted_keys(pinned: str, rotations: Iterable[Rotation]) -> set[str]:
    """The keys whose seals count for someone who holds ``pinned``: the pinned key, and
    every key a trusted key vouches for. A rotation statement signed by one of its two
    keys, when that key is trusted, makes the other trusted (an old key vouches for its
    successor, a new key for its predecessor); a statement signed only by an untrusted
    key vouches for nothing, so a key made by someone else never joins."""
    trusted = {pinned}
    pending = [r for r in rotations if not r.problems()]
    grew = True
    while grew:
        grew = False
        for r in pending:
            if r.signature_old is not None and r.old in trusted and r.new not in trusted:
                trusted.add(r.new)
                grew = True
            elif r.new in trusted and r.old is not None and r.old not in trusted:
                trusted.add(r.old)
                grew = True
    return trusted


def roster_text(heads: Iterable[tuple[int, int, str]]) -> str:
    """The canonical text of a roster: every tenant chain's ``[chain, seq, head]``,
    sorted by chain, as compact JSON. A seal of the appliance's chain signs its SHA-256."""
    rows = sorted((int(c), int(s), str(h)) for c, s, h in heads)
    return json.dumps([list(r) for r in rows], separators=(",", ":"))


def roster_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def roster_problems(seal: dict[str, Any]) -> tuple[list[str], dict[int, tuple[int, str]]]:
    """An appliance seal's roster checked against its signed digest; the problems and the
    roster as ``chain -> (seq, head)`` (empty when it cannot be read)."""
    body = json.loads(str(seal["body"]))
    text = seal.get("roster")
    if "roster" not in body:
        return [], {}
    if not isinstance(text, str) or roster_digest(text) != body["roster"]:
        return ["its list of chains differs from what was signed"], {}
    try:
        rows = json.loads(text)
        roster = {int(c): (int(s), str(h)) for c, s, h in rows}
    except (ValueError, TypeError):
        return ["its list of chains cannot be read"], {}
    if len(roster) != body.get("chains"):
        return ["its list of chains has another length than what was signed"], {}
    return [], roster


def check(
    path: Path, *, public_key: str, tsa_ca: Path | None = None
) -> tuple[list[str], dict[str, Any]]:
    """Every problem found in the export at ``path`` (an empty list: intact), and a few
    facts for the summary (seals checked, the key's fingerprint)."""
    problems: list[str] = []
    header: dict[str, Any] | None = None
    hashes: dict[int, str] = {}
    seals: list[dict[str, Any]] = []
    rotations: list[Rotation] = []
    appliance: dict[str, Any] | None = None
    head: dict[str, Any] | None = None
    last_seq: int | None = None
    first_seq: int | None = None
    last_hash = ""
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                item = json.loads(line)
            except ValueError:
                problems.append(f"line {n}: not JSON")
                continue
            if n == 1:
                header = item
                if item.get("format") != FORMAT:
                    problems.append(f"line 1: not an {FORMAT} file")
                continue
            if "entry" in item:
                e = item["entry"]
                seq, body = int(e["seq"]), str(e["body"])
                if _hash(str(e["prev_hash"]), body) != e["hash"]:
                    problems.append(f"entry {seq}: its content no longer matches its hash")
                if last_seq is not None:
                    if seq != last_seq + 1:
                        problems.append(f"entry {seq}: follows entry {last_seq} (a gap or a move)")
                    elif e["prev_hash"] != last_hash:
                        problems.append(f"entry {seq}: does not follow entry {last_seq}")
                else:
                    first_seq = seq
                try:
                    b = json.loads(body)
                    if b.get("seq") != seq or (header and b.get("chain") != header.get("chain")):
                        problems.append(f"entry {seq}: written as entry {b.get('seq')}")
                except ValueError:
                    problems.append(f"entry {seq}: its body is not JSON")
                last_seq, last_hash = seq, str(e["hash"])
                hashes[seq] = last_hash
            elif "seal" in item:
                seals.append(item["seal"])
            elif "rotation" in item:
                rotations.append(Rotation.from_detail(item["rotation"]))
            elif "appliance_seal" in item:
                appliance = item["appliance_seal"]
            elif "head" in item:
                head = item["head"]
    if header is None:
        return ["the file is empty"], {}
    for r in rotations:
        problems.extend(f"key rotation to {fingerprint(r.new)}: {p}" for p in r.problems())
    trusted = trusted_keys(public_key, rotations)
    complete = bool(header.get("complete"))
    for s in seals:
        problems.extend(_seal_problems(s, hashes, trusted, tsa_ca))
        if complete and int(s["seq"]) not in hashes:
            problems.append(f"seal {s.get('id')}: sealed entry {s['seq']} is not in the export")
    if appliance is not None:
        problems.extend(
            _appliance_problems(
                appliance, header, hashes, trusted, complete, first_seq, seals, tsa_ca
            )
        )
    ends = (int(head["seq"]), head["hash"]) if head else None
    if complete and ends is not None and last_seq is not None and ends != (last_seq, last_hash):
        problems.append(f"head: the chain's head is entry {ends[0]}, the export ends at {last_seq}")
    facts = {
        "seals": len(seals) + (appliance is not None),
        "key": fingerprint(public_key),
        "exported_key": header.get("fingerprint"),
    }
    return problems, facts


def _seal_problems(
    s: dict[str, Any], hashes: dict[int, str], trusted: set[str], tsa_ca: Path | None
) -> list[str]:
    found = []
    name = f"seal {s.get('id')} (entry {s.get('seq')})"
    body_text = str(s["body"])
    try:
        body = json.loads(body_text)
    except ValueError:
        return [f"{name}: its body is not JSON"]
    if s["public_key"] not in trusted:
        found.append(
            f"{name}: signed by key {fingerprint(str(s['public_key']))}, which the key you "
            "hold does not vouch for (a seal made elsewhere, or forged)"
        )
    if body.get("public_key") != s["public_key"] or body.get("seq") != s["seq"]:
        found.append(f"{name}: its fields differ from what was signed")
    if not verify_signature(str(s["public_key"]), str(s["signature"]), body_text):
        found.append(f"{name}: the signature does not verify")
    seq = int(body.get("seq", -1))
    if seq in hashes and hashes[seq] != body.get("head"):
        found.append(f"{name}: entry {seq} is not what was sealed (the chain was rewritten)")
    if s.get("tsa_reply") and tsa_ca is not None:
        digest = hashlib.sha256(body_text.encode()).hexdigest()
        why = _tsa_verify(base64.b64decode(s["tsa_reply"]), digest, tsa_ca)
        if why:
            found.append(f"{name}: the timestamp does not verify: {why}")
    return found


def _appliance_problems(
    s: dict[str, Any],
    header: dict[str, Any],
    hashes: dict[int, str],
    trusted: set[str],
    complete: bool,
    first_seq: int | None,
    sealed_before: list[dict[str, Any]],
    tsa_ca: Path | None,
) -> list[str]:
    """The appliance's newest seal: signed by a trusted key, its roster intact, and this
    chain's entry in it still where and what it was (a truncated or replaced chain)."""
    name = f"the appliance's seal {s.get('id')}"
    found = [
        p.replace(f"seal {s.get('id')}", name, 1) for p in _seal_problems(s, {}, trusted, tsa_ca)
    ]
    why, roster = roster_problems(s)
    found.extend(f"{name}: {w}" for w in why)
    chain = header.get("chain")
    if not isinstance(chain, int) or why:
        return found
    listed = roster.get(chain)
    if listed is None:
        if any(int(t.get("id", 0)) < int(s.get("id", 0)) for t in sealed_before):
            found.append(
                f"{name}: does not list chain {chain}, though the chain was sealed before it"
            )
        return found
    seq, head = listed
    if seq in hashes:
        if hashes[seq] != head:
            found.append(f"entry {seq}: {name} names another hash here (the chain was rewritten)")
    elif complete or (first_seq is not None and seq >= first_seq):
        found.append(
            f"entry {seq}: {name} lists this chain up to entry {seq}; the export does not have "
            "it (entries were removed from the end of the chain)"
        )
    return found


def _tsa_verify(reply: bytes, digest: str, ca: Path) -> str | None:
    fd, name = tempfile.mkstemp(prefix="tsr-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(reply)
        cmd = ["openssl", "ts", "-verify", "-digest", digest, "-in", name, "-CAfile", str(ca)]
        done = subprocess.run(cmd, capture_output=True, timeout=30, check=False)
    finally:
        os.unlink(name)
    if done.returncode == 0:
        return None
    said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
    return said[-1] if said else "openssl failed"


def summary(path: Path, problems: list[str], facts: dict[str, Any]) -> str:
    if problems:
        return f"{path}: {len(problems)} problem(s)"
    seals = facts.get("seals", 0)
    if not seals:
        return f"{path}: intact by its hashes, but it holds no seal: nothing in it is signed"
    return f"{path}: intact ({seals} seal(s) checked against {facts['key']})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="check an ingestd audit export on its own")
    p.add_argument("file", type=Path)
    p.add_argument(
        "--public-key",
        metavar="FILE",
        help="the appliance's public sealing key you hold (seal-ed25519.pub, or its 64 hex "
        "digits); required: the seals are checked against it",
    )
    p.add_argument("--tsa-ca", type=Path, help="CA file the timestamp authority chains to")
    args = p.parse_args(argv)
    if not args.public_key:
        print("no public key given: pass --public-key FILE (the appliance's seal-ed25519.pub)")
        return EXIT_KEY
    try:
        key = resolve_public_key(args.public_key)
    except KeyUnusable as exc:
        print(f"{exc}: the seals cannot be checked")
        return EXIT_KEY
    problems, facts = check(args.file, public_key=key, tsa_ca=args.tsa_ca)
    for line in problems:
        print(line)
    print(summary(args.file, problems, facts))
    return EXIT_INTACT if not problems else EXIT_PROBLEMS


if __name__ == "__main__":
    sys.exit(main())
