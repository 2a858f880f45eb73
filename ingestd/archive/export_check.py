#!/usr/bin/env python3
"""Check an audit export (``ingestd audit export``) on its own: no ingestd, no database.

This file depends on the Python standard library and ``cryptography`` only (and
``openssl`` for RFC 3161 timestamps), so an auditor can copy it out and run it:

    python3 export_check.py acme-2026.jsonl [--public-key HEX] [--tsa-ca ca.pem]

It recomputes every entry's hash (``sha256(prev_hash + body)``), checks that each entry
follows the one before it and carries its own position, that every seal's signature is
valid for the body it signs (and made with the pinned key, when given), that every
sealed position still has the sealed hash, and, with ``--tsa-ca``, every timestamp.
Exit 0: the export is intact; 5: what is wrong is printed, one line per problem, with
the entry's position. (The rules are the ones ``ingestd audit verify`` applies; this
copy exists so that the check needs nothing of the software it checks.)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

FORMAT = "ingestd-audit-export/1"


def _hash(prev_hash: str, body: str) -> str:
    return hashlib.sha256((prev_hash + body).encode()).hexdigest()


def check(path: Path, *, public_key: str | None = None, tsa_ca: Path | None = None) -> list[str]:
    """Every problem found in the export at ``path`` (an empty list: intact)."""
    problems: list[str] = []
    header: dict[str, Any] | None = None
    hashes: dict[int, str] = {}
    seals: list[dict[str, Any]] = []
    head: dict[str, Any] | None = None
    last_seq: int | None = None
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
            elif "head" in item:
                head = item["head"]
    if header is None:
        return ["the file is empty"]
    for s in seals:
        problems.extend(_seal_problems(s, hashes, public_key, tsa_ca))
        if header.get("complete") and int(s["seq"]) not in hashes:
            problems.append(f"seal {s.get('id')}: sealed entry {s['seq']} is not in the export")
    complete = head is not None and header.get("complete") and last_seq is not None
    if complete and head and (int(head["seq"]), head["hash"]) != (last_seq, last_hash):
        problems.append(
            f"head: the chain's head is entry {head['seq']}, the export ends at {last_seq}"
        )
    return problems


def _seal_problems(
    s: dict[str, Any], hashes: dict[int, str], public_key: str | None, tsa_ca: Path | None
) -> list[str]:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    found = []
    name = f"seal {s.get('id')} (entry {s.get('seq')})"
    body_text = str(s["body"])
    body = json.loads(body_text)
    if public_key is not None and s["public_key"] != public_key:
        found.append(f"{name}: signed by another key than the one given")
    if body.get("public_key") != s["public_key"] or body.get("seq") != s["seq"]:
        found.append(f"{name}: its fields differ from what was signed")
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(s["public_key"]))
        key.verify(bytes.fromhex(s["signature"]), body_text.encode())
    except (ValueError, InvalidSignature):
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="check an ingestd audit export on its own")
    p.add_argument("file", type=Path)
    p.add_argument("--public-key", help="the appliance's sealing key (hex) to pin")
    p.add_argument("--tsa-ca", type=Path, help="CA file the timestamp authority chains to")
    args = p.parse_args(argv)
    problems = check(args.file, public_key=args.public_key, tsa_ca=args.tsa_ca)
    for line in problems:
        print(line)
    print(f"{args.file}: " + ("intact" if not problems else f"{len(problems)} problem(s)"))
    return 0 if not problems else 5


if __name__ == "__main__":
    sys.exit(main())
