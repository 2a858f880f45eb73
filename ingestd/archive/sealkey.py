"""The sealing key: its files, the key the trail says the appliance has, and the only two
ways a key comes into being (the very first seal, and ``ingestd audit rotate-key``).

Files, in ``<state_dir>/audit/``: ``seal-ed25519.key`` (the raw private key, hex, 0600)
and ``seal-ed25519.pub`` (the public key, hex, 0644: what verify checks seals against by
default, and what an auditor pins).

The appliance's chain (0) records the keys: ``key.created`` at the first seal (the key
and its fingerprint), ``key.rotated`` at each rotation (a statement naming the old and the
new key, signed by both; by the new one only when the old one was lost). So:

- verification never derives a key from a secret on the verifying host: it reads the
  public key it is given and follows the signed rotations from it
  (``export_check.trusted_keys``);
- sealing never makes a key where the trail says one exists: a missing, unreadable or
  different private key is a ``SealKeyError`` (exit 11) naming the key the trail expects,
  never a new key that would make every earlier seal look forged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ingestd.archive import audit
from ingestd.archive.audit import SYSTEM_CHAIN, AuditKind
from ingestd.archive.export_check import (
    ROTATION,
    KeyUnusable,
    Rotation,
    fingerprint,
    read_public_key,
)
from ingestd.config.filemodes import read_secret_file
from ingestd.db.database import Database, Tx
from ingestd.durable import fsync_dir, publish_new, replace_whole
from ingestd.errors import ConfigError, ExitCode, IngestdError
from ingestd.runtime import statedir

KEY_DIR = "audit"
KEY_FILE = "seal-ed25519.key"
PUBLIC_FILE = "seal-ed25519.pub"
# The appliance's newest seal as the last run left it: a witness outside the database
# (whoever cuts the appliance's chain back to an older seal must also reach this file).
WITNESS_FILE = "last-seal.json"
NEXT_SUFFIX = ".next"  # a rotation's new key, until the trail has recorded it
# pg_advisory_lock key of seal runs (and, shared, of verify snapshots); any constant
# that no other lock of ingestd uses.
SEAL_LOCK = 0x5EA1


class SealKeyError(IngestdError):
    """The seals cannot be made or checked with the key at hand; the message names the
    key the trail expects and the way out. Nothing was sealed."""

    exit_code = ExitCode.key_unusable


def key_path(state_dir: Path) -> Path:
    return state_dir / KEY_DIR / KEY_FILE


def public_path(state_dir: Path) -> Path:
    return state_dir / KEY_DIR / PUBLIC_FILE


def public_hex(key: Ed25519PrivateKey) -> str:
    return key.public_key().public_bytes_raw().hex()


@dataclass(slots=True)
class KeyHistory:
    """The appliance's keys as its chain records them."""

    first: str | None = None  # the key of ``key.created``
    first_seq: int | None = None
    rotations: list[Rotation] = field(default_factory=list)

    @property
    def current(self) -> str | None:
        return self.rotations[-1].new if self.rotations else self.first


def history(tx: Tx) -> KeyHistory:
    h = KeyHistory()
    for row in tx.all("audit_key_entries"):
        detail = json.loads(str(row["body"])).get("detail") or {}
        if row["kind"] == AuditKind.key_created and h.first is None:
            h.first, h.first_seq = str(detail.get("public_key")), int(row["seq"])
        elif row["kind"] == AuditKind.key_rotated:
            h.rotations.append(Rotation.from_detail(detail))
    return h


@contextmanager
def seal_lock(db: Database, *, shared: bool = False) -> Iterator[None]:
    """Hold the seal runs' lock for the block (exclusive to seal or rotate; shared to take
    a verify snapshot that never falls between a run's tenant seals and its appliance
    seal). A session lock on a connection of its own, released however the block ends."""
    with db.autocommit() as lock:
        lock.run("seal_lock_shared" if shared else "seal_lock", {"k": SEAL_LOCK})
        try:
            yield
        finally:
            lock.run("seal_unlock_shared" if shared else "seal_unlock", {"k": SEAL_LOCK})


def load_private(path: Path) -> Ed25519PrivateKey:
    """The private key at ``path``; ``SealKeyError`` with the reason when it is missing,
    unreadable, open to others or not a key."""
    try:
        raw = read_secret_file(path, f"the sealing key {path}")
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(raw.decode()))
    except ConfigError as exc:
        raise SealKeyError(exc.message) from None
    except (ValueError, UnicodeDecodeError):
        raise SealKeyError(f"the sealing key {path}: not a sealing key (64 hex digits)") from None


def _write_key_files(state_dir: Path, key: Ed25519PrivateKey, private: Path) -> None:
    statedir.make_dirs(state_dir, private.parent, 0o700)

    def prepare(p: Path) -> None:  # root's first seal: the service user must read it
        statedir.adopt(state_dir, p)

    raw = key.private_bytes_raw().hex().encode() + b"\n"
    if not publish_new(private, raw, 0o600, prepare=prepare):
        raise SealKeyError(f"{private} appeared while a new key was being made: not replaced")


def _write_public(state_dir: Path, pub: str) -> None:
    """``seal-ed25519.pub`` says ``pub`` (written whole, replacing a stale one)."""
    replace_whole(
        public_path(state_dir),
        pub.encode() + b"\n",
        0o644,
        prepare=lambda tmp: statedir.adopt(state_dir, tmp),
    )


def write_witness(state_dir: Path, *, seal: int, seq: int, body_sha256: str) -> None:
    """Record the appliance's newest seal in ``last-seal.json`` (written whole)."""
    data = {"seal": seal, "chain": SYSTEM_CHAIN, "seq": seq, "body_sha256": body_sha256}
    replace_whole(
        state_dir / KEY_DIR / WITNESS_FILE,
        json.dumps(data).encode() + b"\n",
        0o644,
        prepare=lambda tmp: statedir.adopt(state_dir, tmp),
    )


def read_witness(state_dir: Path) -> dict[str, object] | None:
    """What ``last-seal.json`` says; None when there is none (a host that never sealed).
    A file that cannot be read is a witness that says so (verify reports it)."""
    path = state_dir / KEY_DIR / WITNESS_FILE
    try:
        data = json.loads(path.read_bytes()[:4096])
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"path": str(path), "unreadable": str(exc)}
    if not isinstance(data, dict):
        return {"path": str(path), "unreadable": "not a JSON object"}
    return {**data, "path": str(path)}


def _public_file_says(state_dir: Path) -> str | None:
    try:
        return read_public_key(public_path(state_dir))
    except KeyUnusable:
        return None


def key_for_sealing(db: Database, state_dir: Path) -> Ed25519PrivateKey:
    """The key to seal with, as the trail expects it; called with the seal lock held.

    The first seal of an appliance makes the key and records it (``key.created``). A key
    made by a release before keys were recorded is adopted if every seal was made with it.
    Otherwise the key file must hold exactly the key the trail names last: a missing,
    unusable or different file is refused with the way out (restore it from the backup;
    ``ingestd audit rotate-key`` to replace it)."""
    private = key_path(state_dir)
    with db.transaction() as tx:
        hist = history(tx)
        made_with = {str(r["public_key"]) for r in tx.all("audit_seal_keys")}
    _finish_rotation(state_dir, hist)
    if hist.current is None and not made_with and not os.path.lexists(private):
        key = Ed25519PrivateKey.generate()
        _write_key_files(state_dir, key, private)
        _record_created(db, public_hex(key), adopted=False)
    else:
        key = _expected(private, hist, made_with)
        if hist.current is None:
            _record_created(db, public_hex(key), adopted=True)
    if _public_file_says(state_dir) != public_hex(key):
        _write_public(state_dir, public_hex(key))
    return key


def ensure_key(db: Database, state_dir: Path) -> str | None:
    """Make the sealing key now (``migrate``, daemon start) if none was ever made, so the
    first backup of the state directory holds it; the same path the first ``audit seal``
    takes (``key_for_sealing`` under the seal lock, with its ``key.created`` entry). Never
    where a key is expected: a trail that records a key, seals made with one, or a key
    file already there are left to ``audit seal`` to check or adopt (the #29 rule).
    Returns the new key's public hex, or None when nothing was made."""
    with seal_lock(db):
        with db.transaction() as tx:
            hist = history(tx)
            made_with = tx.all("audit_seal_keys")
        if hist.current is not None or made_with or os.path.lexists(key_path(state_dir)):
            return None
        if os.path.lexists(key_path(state_dir).with_name(KEY_FILE + NEXT_SUFFIX)):
            return None  # a rotation's leftover: the next seal decides
        return public_hex(key_for_sealing(db, state_dir))


def _expected(private: Path, hist: KeyHistory, made_with: set[str]) -> Ed25519PrivateKey:
    expected = hist.current
    if expected is None and made_with:
        expected = next(iter(made_with)) if len(made_with) == 1 else None
    named = f"the appliance's key is {fingerprint(expected)}" if expected else "earlier seals exist"
    restore = (
        "restore the file from your backup of the state directory; if the key is lost, "
        "`ingestd audit rotate-key --old-key-lost` makes a new one (auditors must then "
        "pin its .pub)"
    )
    if not os.path.lexists(private):
        raise SealKeyError(f"the sealing key {private} is missing, and {named}: {restore}")
    try:
        key = load_private(private)
    except SealKeyError as exc:
        raise SealKeyError(
            f"{exc.message}; {named}: run as the owner of the state directory, or {restore}"
        ) from None
    pub = public_hex(key)
    if expected is not None and pub != expected:
        raise SealKeyError(
            f"the sealing key {private} is {fingerprint(pub)}, but {named}: seals made with "
            f"it would not verify; {restore}"
        )
    if hist.current is None and made_with - {pub}:
        others = ", ".join(sorted(fingerprint(k) for k in made_with - {pub}))
        raise SealKeyError(
            f"the sealing key {private} is {fingerprint(pub)}, but seals were made with "
            f"{others}: {restore}"
        )
    return key


def _record_created(db: Database, pub: str, *, adopted: bool) -> None:
    with db.transaction() as tx:
        audit.append(
            tx,
            chain=SYSTEM_CHAIN,
            tenant=None,
            kind=AuditKind.key_created,
            detail={"public_key": pub, "fingerprint": fingerprint(pub), "adopted": adopted},
        )


def _finish_rotation(state_dir: Path, hist: KeyHistory) -> None:
    """A rotation interrupted after the trail recorded it: the new key is still under its
    ``.next`` name. Move it in place (a ``.next`` the trail never recorded is left for
    the next rotation to replace)."""
    private = key_path(state_dir)
    pending = private.with_name(private.name + NEXT_SUFFIX)
    if not os.path.lexists(pending) or hist.current is None:
        return
    try:
        key = load_private(pending)
    except SealKeyError:
        return
    if public_hex(key) == hist.current:
        os.replace(pending, private)
        fsync_dir(private.parent)


@dataclass(frozen=True, slots=True)
class Rotated:
    old: str | None
    new: str
    seq: int


def rotate(db: Database, state_dir: Path, *, old_key_lost: bool = False) -> Rotated:
    """Replace the sealing key: a new key, a statement naming the old and the new key
    signed by both (by the new one only with ``old_key_lost``), recorded in the
    appliance's chain, then the key files swapped. Seals made before stay valid: a
    verifier holding either key trusts the other through the statement."""
    private = key_path(state_dir)
    pending = private.with_name(private.name + NEXT_SUFFIX)
    with seal_lock(db):
        with db.transaction() as tx:
            hist = history(tx)
            made_with = {str(r["public_key"]) for r in tx.all("audit_seal_keys")}
        _finish_rotation(state_dir, hist)
        old_key: Ed25519PrivateKey | None = None
        if old_key_lost:
            if os.path.lexists(private):
                try:
                    _expected(private, hist, made_with)
                except SealKeyError:
                    pass
                else:
                    raise SealKeyError(
                        f"the sealing key {private} is there and usable: rotate without "
                        "--old-key-lost, so that the old key signs its successor"
                    )
            old = hist.current or (next(iter(made_with)) if len(made_with) == 1 else None)
            if old is None:
                raise SealKeyError("no sealing key yet: `ingestd audit seal` makes the first")
        else:
            if hist.current is None and not made_with:
                raise SealKeyError("no sealing key yet: `ingestd audit seal` makes the first")
            old_key = _expected(private, hist, made_with)
            old = public_hex(old_key)
            if hist.current is None:
                _record_created(db, old, adopted=True)
        new_key = Ed25519PrivateKey.generate()
        new = public_hex(new_key)
        statement = json.dumps(
            {
                "statement": ROTATION,
                "from": old,
                "to": new,
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "old_key_lost": old_key is None,
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        pending.unlink(missing_ok=True)  # a rotation that never reached the trail
        _write_key_files(state_dir, new_key, pending)
        with db.transaction() as tx:
            entry = audit.append(
                tx,
                chain=SYSTEM_CHAIN,
                tenant=None,
                kind=AuditKind.key_rotated,
                detail={
                    "from": old,
                    "to": new,
                    "from_fingerprint": fingerprint(old) if old else None,
                    "to_fingerprint": fingerprint(new),
                    "statement": statement,
                    "signature_from": old_key.sign(statement.encode()).hex() if old_key else None,
                    "signature_to": new_key.sign(statement.encode()).hex(),
                },
            )
        os.replace(pending, private)
        fsync_dir(private.parent)
        _write_public(state_dir, new)
    return Rotated(old, new, entry.seq)
