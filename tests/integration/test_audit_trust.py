"""The audit trail against an attacker who can write the database but does not hold the
sealing key: seals are judged by the public key the verifier holds (never one derived
from a private key on the verifying host), a key comes into being only at the first seal
or by a signed rotation, and a tenant's whole trail cannot vanish, nor be cut short,
without the appliance's roster showing it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import ingestd.archive.export_check as checker
from ingestd.archive import sealkey, seals
from ingestd.archive.audit_checker import Anchor
from ingestd.archive.audit_verify import verify_audit
from ingestd.archive.export_check import fingerprint, read_public_key
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import Env, run_cli
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.forger import forge
from tests.fixtures.sockproxy import forwarded_socket_dir

# A verifier without root's power to read any file: `unreadable` means unreadable to it.
WITHOUT_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


def _rows(db: Database, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(sql, params)


def _ingest(env: Env, db: Database, tenant: str, name: str, text: str) -> None:
    src = write(env.root / "in" / tenant / name, pdf_bytes(text))
    outcome = make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant)).outcome
    assert outcome is Outcome.ingested


def _docs(env: Env, db: Database, tenant: str, n: int = 3) -> None:
    for i in range(n):
        _ingest(env, db, tenant, f"doc{i}.pdf", f"{tenant} Brief {i}")


def _seal(env: Env) -> None:
    done = run_cli(env, "audit", "seal")
    assert done.returncode == 0, done.stdout + done.stderr


def _chain_of(db: Database, tenant: str) -> int:
    return int(_rows(db, "SELECT id FROM tenants WHERE name = %(t)s", {"t": tenant})[0]["id"])


def _state(env: Env) -> Path:
    return env.config.paths.state_dir


@dataclass(frozen=True)
class Runner:
    """How a command is run: a prefix (a user without rights) and the config it reads."""

    prefix: list[str]
    config: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [*self.prefix, sys.executable, "-m", "ingestd.cli", *args[:2]]
        cmd += ["--config", str(self.config), *args[2:]]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _verify_cli(env: Env, *args: str, runner: Runner | None = None) -> tuple[int, dict[str, Any]]:
    runner = runner or Runner([], env.config_path)
    done = runner.run("audit", "verify", "--json", *args)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def _details(out: dict[str, Any]) -> str:
    return "\n".join(f"{p['kind']} {p['chain']} {p['seq']}: {p['detail']}" for p in out["problems"])


@contextlib.contextmanager
def _spoiled_private_key(env: Env, how: str) -> Iterator[Runner]:
    """Leave the private key as a second host, a restore or a user without rights would
    find it; yields how to run a command as such a user (for ``unreadable``: root without
    its power to read any file, through a socket it may enter)."""
    path = sealkey.key_path(_state(env))
    if how == "missing":
        path.unlink()
    elif how == "wrong-mode":
        path.chmod(0o644)
    elif how == "garbage":
        path.write_text("this is not a key\n")
    if how != "unreadable":
        yield Runner([], env.config_path)
        return
    path.chmod(0o000)
    pgrun = Path(re.search(r"host=(\S+)", env.db_url).group(1))  # type: ignore[union-attr]
    port = re.search(r"port=(\d+)", env.db_url).group(1)  # type: ignore[union-attr]
    with forwarded_socket_dir(pgrun / f".s.PGSQL.{port}") as sockets:
        config = env.root / "as-verifier.toml"
        config.write_text(env.config_path.read_text().replace(str(pgrun), str(sockets)))
        yield Runner(WITHOUT_DAC, config)


def _edit_doc1(chain: int, body: dict[str, Any]) -> dict[str, Any]:
    """The forger's change: the archived entry of doc1 now names another file."""
    detail = body.get("detail") or {}
    if body.get("kind") == "document.archived" and detail.get("filename") == "doc1.pdf":
        return {**body, "detail": {**detail, "filename": "harmless.pdf"}}
    return body


@pytest.mark.parametrize("key_state", ["missing", "unreadable", "wrong-mode", "garbage"])
def test_a_forged_and_re_signed_trail_is_caught_whatever_the_private_key_is(
    env: Env, db: Database, tenant: str, key_state: str
) -> None:
    """The superuser rewrites an entry, recomputes every hash and head and re-signs every
    seal with a key of their own. Whatever the private key file is like on the verifying
    host, verify judges the seals by the .pub it holds: exit 5, each forged seal named
    with the key that signed it (before: `intact`, exit 0, when the key was unusable)."""
    _docs(env, db, tenant)
    _seal(env)
    code, out = _verify_cli(env)
    assert code == 0 and out["ok"], _details(out)
    attacker = Ed25519PrivateKey.generate()
    forge(db, attacker, edit=_edit_doc1)
    with _spoiled_private_key(env, key_state) as verifier:
        if key_state == "unreadable":  # the verifier cannot read it indeed
            cat = subprocess.run([*verifier.prefix, "cat", str(sealkey.key_path(_state(env)))])
            assert cat.returncode != 0
        code, out = _verify_cli(env, "--no-files", runner=verifier)
    assert code == 5, _details(out)
    forged = fingerprint(attacker.public_key().public_bytes_raw().hex())
    text = _details(out)
    assert f"signed by key {forged}, which the pinned key does not vouch for" in text
    assert "the appliance's first sealing key" in text  # key.created names the forger's key
    assert out["key"] == fingerprint(read_public_key(sealkey.public_path(_state(env))))


@pytest.mark.parametrize("key_state", ["missing", "unreadable", "wrong-mode", "garbage"])
def test_seal_never_makes_a_key_where_one_was_expected(
    env: Env, db: Database, tenant: str, key_state: str
) -> None:
    """With the sealing key missing or unusable, `audit seal` exits 11 naming the key the
    trail expects and the way out, and makes nothing: no new key file, no seal (before:
    a quiet new key, and every earlier genuine seal then reported as forged)."""
    _docs(env, db, tenant)
    _seal(env)
    expected = fingerprint(read_public_key(sealkey.public_path(_state(env))))
    _ingest(env, db, tenant, "later.pdf", "Nachtrag")
    before = _rows(db, "SELECT count(*) AS n FROM audit_seals")[0]["n"]
    with _spoiled_private_key(env, key_state) as sealer:
        done = sealer.run("audit", "seal")
    assert done.returncode == 11, done.stdout + done.stderr
    assert "sealing key" in done.stderr and "restore" in done.stderr, done.stderr
    if key_state == "missing":
        assert expected in done.stderr
        assert not sealkey.key_path(_state(env)).exists()
    assert _rows(db, "SELECT count(*) AS n FROM audit_seals")[0]["n"] == before
    # The genuine seals still verify against the .pub (the attacker-free case).
    code, out = _verify_cli(env, "--no-files")
    assert code == 0, _details(out)


def test_verify_without_a_usable_public_key_is_its_own_exit_code(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """A sealed trail and no usable key to check the seals: exit 11 with the reason, never
    a skipped check: the .pub missing, writable by everyone, or garbage; an explicit
    --public-key that does not exist. A trail never sealed and no key: exit 0."""
    _docs(env, db, tenant)
    code, out = _verify_cli(env, "--no-files")
    assert code == 0 and out["key"] is None and out["seals"] == 0
    _seal(env)
    pub = sealkey.public_path(_state(env))
    saved = pub.read_bytes()
    for spoil, why in (
        (lambda: pub.unlink(), "no such file"),
        (lambda: pub.chmod(0o666), "writable by everyone"),
        (lambda: pub.write_text("garbage\n"), "not an Ed25519 public key"),
    ):
        spoil()
        code, out = _verify_cli(env, "--no-files")
        assert code == 11, _details(out)
        assert {p["kind"] for p in out["problems"]} == {"key"}
        assert why in out["problems"][0]["detail"]
        pub.unlink(missing_ok=True)
        pub.write_bytes(saved)
        pub.chmod(0o644)
    code, out = _verify_cli(env, "--no-files", "--public-key", str(tmp_path / "nope.pub"))
    assert code == 11 and "no such file" in _details(out)
    # The key given as a PEM file an auditor converted works as well as the hex one.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    pem = tmp_path / "appliance.pem"
    raw = bytes.fromhex(saved.decode().strip())
    pem.write_bytes(
        Ed25519PublicKey.from_public_bytes(raw).public_bytes(
            Encoding.PEM, PublicFormat.SubjectPublicKeyInfo
        )
    )
    code, out = _verify_cli(env, "--no-files", "--public-key", str(pem))
    assert code == 0, _details(out)


def _delete_tenant_behind_the_trails_back(db: Database, chain: int) -> None:
    with db.transaction() as tx:
        tx.raw("SET LOCAL session_replication_role = replica")
        for statement in (
            "DELETE FROM processing_jobs WHERE tenant_id = %(c)s",
            "DELETE FROM documents WHERE tenant_id = %(c)s",
            "DELETE FROM tenants WHERE id = %(c)s",
        ):
            tx.raw(statement, {"c": chain})


@pytest.mark.parametrize("attack", ["re-signed", "appliance-seals-removed"])
@pytest.mark.parametrize("files", ["no-files", "files-gone-too"])
def test_a_whole_tenant_deleted_with_its_chain_opened_entry_is_found(
    env: Env, db: Database, attack: str, files: str
) -> None:
    """Tenant beta deleted whole: its chain, head, seals, document rows and its
    chain.opened entry in the appliance's chain (which is renumbered and rehashed), and
    either every seal re-signed with another key, or the appliance chain's seals removed.
    Found with --no-files and with the files gone too (before: intact)."""
    for name in ("acme", "beta"):
        with db.transaction() as tx:
            tx.one("tenant_insert", {"name": name, "status": "active"})
        _docs(env, db, name)
    _seal(env)
    beta = _chain_of(db, "beta")
    _delete_tenant_behind_the_trails_back(db, beta)
    attacker = Ed25519PrivateKey.generate()
    drop_seals = frozenset({0}) if attack == "appliance-seals-removed" else frozenset()
    forge(db, attacker, drop_chains=frozenset({beta}), drop_seals_of=drop_seals)
    if files == "files-gone-too":
        shutil.rmtree(env.config.paths.archive_dir / "beta")
        code, out = _verify_cli(env)
    else:
        code, out = _verify_cli(env, "--no-files")
    assert code == 5, _details(out)
    text = _details(out)
    if attack == "re-signed":
        assert "which the pinned key does not vouch for" in text
    else:
        acme = _chain_of(db, "acme")
        assert any(
            p["chain"] == acme and "listed by no seal of the appliance's chain" in p["detail"]
            for p in out["problems"]
        ), text


def test_a_tenant_chain_cut_short_is_found_by_the_appliances_roster(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """A tenant's last entries and its newest seal removed, its head moved back to what is
    left (consistent by itself): verify names the gone entries against the roster of the
    appliance's seal, and so does the auditor's check of an export made afterwards."""
    _docs(env, db, tenant, 5)
    _seal(env)
    chain = _chain_of(db, tenant)
    with db.transaction() as tx:
        tx.raw("SET LOCAL session_replication_role = replica")
        tx.raw("DELETE FROM audit_events WHERE chain = %(c)s AND seq > 3", {"c": chain})
        tx.raw("DELETE FROM audit_seals WHERE chain = %(c)s", {"c": chain})
        tx.raw(
            "UPDATE audit_heads SET seq = 3, hash = (SELECT hash FROM audit_events "
            "WHERE chain = %(c)s AND seq = 3) WHERE chain = %(c)s",
            {"c": chain},
        )
        tx.raw(
            "DELETE FROM documents WHERE tenant_id = %(c)s AND id NOT IN (SELECT document_id "
            "FROM audit_events WHERE chain = %(c)s AND document_id IS NOT NULL)",
            {"c": chain},
        )
    pub = sealkey.public_path(_state(env))
    report = verify_audit(db, None, anchor=Anchor(path=str(pub), key=read_public_key(pub)))
    assert any(
        p.kind == "missing" and p.chain == chain and "lists the chain up to 6" in p.detail
        for p in report.problems
    ), report.problems
    out = tmp_path / "acme.jsonl"
    assert run_cli(env, "audit", "export", "--tenant", tenant, "-o", str(out)).returncode == 0
    done = subprocess.run(
        [sys.executable, "-I", checker.__file__, str(out), "--public-key", str(pub)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 5, done.stdout
    assert "entries were removed from the end of the chain" in done.stdout


def test_the_auditors_check_needs_the_key_and_judges_seals_by_it(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """The standalone checker exits 11 without a usable --public-key; an export whose
    trail was re-signed by someone else fails against the key the auditor holds, though
    it is consistent by itself."""
    _docs(env, db, tenant)
    _seal(env)
    pub = sealkey.public_path(_state(env))
    auditor_copy = tmp_path / "pinned.pub"
    shutil.copy(pub, auditor_copy)
    out = tmp_path / "acme.jsonl"
    assert run_cli(env, "audit", "export", "--tenant", tenant, "-o", str(out)).returncode == 0
    header = json.loads(out.read_text().splitlines()[0])
    assert header["fingerprint"] == fingerprint(read_public_key(pub))

    def check(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-I", checker.__file__, str(out), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)

    assert check().returncode == 11
    assert check("--public-key", str(tmp_path / "missing.pub")).returncode == 11
    ok = check("--public-key", str(auditor_copy))
    assert ok.returncode == 0 and "seal(s) checked against" in ok.stdout, ok.stdout
    forge(db, Ed25519PrivateKey.generate(), edit=_edit_doc1)
    out.unlink()
    assert run_cli(env, "audit", "export", "--tenant", tenant, "-o", str(out)).returncode == 0
    bad = check("--public-key", str(auditor_copy))
    assert bad.returncode == 5, bad.stdout
    assert "which the key you hold does not vouch for" in bad.stdout
    # `ingestd audit check` reads the state directory's .pub by default.
    own = run_cli(env, "audit", "check", str(out))
    assert own.returncode == 5 and "does not vouch for" in own.stdout, own.stdout + own.stderr


def test_a_rotated_key_keeps_old_seals_valid_for_holders_of_either_key(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """rotate-key: the old key and the new sign the change in the appliance's chain; an
    auditor holding the old .pub and one holding the new both find the whole trail
    intact (old seals and new), in verify and in an export; a key nobody vouched for is
    still refused."""
    _docs(env, db, tenant)
    _seal(env)
    pub = sealkey.public_path(_state(env))
    old_copy = tmp_path / "old.pub"
    shutil.copy(pub, old_copy)
    done = run_cli(env, "audit", "rotate-key", "--json")
    assert done.returncode == 0, done.stderr
    rotated = json.loads(done.stdout)
    assert rotated["from"] == fingerprint(read_public_key(old_copy))
    assert read_public_key(pub) == rotated["public_key"] != read_public_key(old_copy)
    _ingest(env, db, tenant, "after.pdf", "nach der Rotation")
    _seal(env)
    keys = {str(r["public_key"]) for r in _rows(db, "SELECT public_key FROM audit_seals")}
    assert keys == {read_public_key(old_copy), read_public_key(pub)}
    for holder in (old_copy, pub):
        code, out = _verify_cli(env, "--no-files", "--public-key", str(holder))
        assert code == 0, _details(out)
    stranger = tmp_path / "stranger.pub"
    stranger.write_text(Ed25519PrivateKey.generate().public_key().public_bytes_raw().hex())
    code, out = _verify_cli(env, "--no-files", "--public-key", str(stranger))
    assert code == 5 and "does not vouch for" in _details(out)
    out_file = tmp_path / "acme.jsonl"
    assert run_cli(env, "audit", "export", "--tenant", tenant, "-o", str(out_file)).returncode == 0
    problems, facts = checker.check(out_file, public_key=read_public_key(old_copy))
    assert problems == [] and facts["seals"] >= 2


def test_a_lost_key_is_replaced_only_on_purpose_and_old_holders_are_told(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """The private key lost: seal refuses (11); `rotate-key --old-key-lost` makes a new
    key whose statement only it signs. Holding the new .pub, the old seals still verify
    (the new key vouches for its predecessor); holding the old .pub, the new seals are
    named as not vouched for (the old key never signed the change). Without the flag,
    and with the flag while the old key is there, rotation is refused."""
    _docs(env, db, tenant)
    _seal(env)
    old_copy = tmp_path / "old.pub"
    shutil.copy(sealkey.public_path(_state(env)), old_copy)
    sealkey.key_path(_state(env)).unlink()
    assert run_cli(env, "audit", "rotate-key").returncode == 11
    done = run_cli(env, "audit", "rotate-key", "--old-key-lost")
    assert done.returncode == 0, done.stderr
    assert "signed by the new key only" in done.stdout
    _ingest(env, db, tenant, "after.pdf", "nach dem Verlust")
    _seal(env)
    code, out = _verify_cli(env, "--no-files")
    assert code == 0, _details(out)
    code, out = _verify_cli(env, "--no-files", "--public-key", str(old_copy))
    assert code == 5 and "does not vouch for" in _details(out)
    again = run_cli(env, "audit", "rotate-key", "--old-key-lost")
    assert again.returncode == 11 and "there and usable" in again.stderr


def test_an_interrupted_rotation_is_finished_by_the_next_seal(
    env: Env, db: Database, tenant: str
) -> None:
    """The trail recorded the new key but the process died before the key file was
    swapped (the new key still under .next): the next seal finishes the swap instead of
    refusing, and everything verifies."""
    _docs(env, db, tenant)
    _seal(env)
    private = sealkey.key_path(_state(env))
    old = private.read_bytes()
    assert run_cli(env, "audit", "rotate-key").returncode == 0
    new = private.read_bytes()
    # Back to the moment after the COMMIT: the old key in place, the new one pending.
    pending = private.with_name(private.name + sealkey.NEXT_SUFFIX)
    pending.write_bytes(new)
    pending.chmod(0o600)
    private.write_bytes(old)
    _ingest(env, db, tenant, "after.pdf", "Nachtrag")
    _seal(env)
    assert private.read_bytes() == new and not pending.exists()
    code, out = _verify_cli(env, "--no-files")
    assert code == 0, _details(out)


def test_a_key_made_by_the_previous_release_is_adopted_at_the_next_seal(
    env: Env, db: Database, tenant: str
) -> None:
    """A trail sealed before keys were recorded (no key.created, seals without a format):
    the next seal records the key it finds, since every seal was made with it; verify is
    intact. A different key file in its place is refused instead."""
    from ingestd.archive import audit
    from ingestd.archive.audit import AuditKind

    _docs(env, db, tenant)
    key = Ed25519PrivateKey.generate()
    state = _state(env)
    (state / "audit").mkdir(mode=0o700, parents=True, exist_ok=True)
    sealkey.key_path(state).write_text(key.private_bytes_raw().hex() + "\n")
    sealkey.key_path(state).chmod(0o600)
    chain = _chain_of(db, tenant)
    with db.transaction() as tx:
        head = tx.raw("SELECT seq, hash FROM audit_heads WHERE chain = %(c)s", {"c": chain})[0]
        body = json.dumps(
            {
                "chain": chain,
                "tenant": tenant,
                "seq": head["seq"],
                "head": head["hash"],
                "sealed_at": "2026-01-01T00:00:00+00:00",
                "public_key": key.public_key().public_bytes_raw().hex(),
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        row = tx.raw(
            "INSERT INTO audit_seals (chain, seq, head, body, signature, public_key) VALUES "
            "(%(c)s, %(s)s, %(h)s, %(b)s, %(sig)s, %(p)s) RETURNING id",
            {
                "c": chain,
                "s": head["seq"],
                "h": head["hash"],
                "b": body,
                "sig": key.sign(body.encode()).hex(),
                "p": key.public_key().public_bytes_raw().hex(),
            },
        )[0]
        audit.append(
            tx,
            chain=chain,
            tenant=tenant,
            kind=AuditKind.sealed,
            detail={
                "seal": row["id"],
                "seq": head["seq"],
                "head": head["hash"],
                "body_sha256": hashlib.sha256(body.encode()).hexdigest(),
                "timestamped": False,
            },
        )
    saved = sealkey.key_path(state).read_bytes()
    sealkey.key_path(state).write_text(Ed25519PrivateKey.generate().private_bytes_raw().hex())
    refused = run_cli(env, "audit", "seal")
    assert refused.returncode == 11 and "but the appliance's key is" in refused.stderr
    sealkey.key_path(state).write_bytes(saved)
    _seal(env)
    created = _rows(db, "SELECT body FROM audit_events WHERE chain = 0 AND kind = 'key.created'")
    assert json.loads(created[0]["body"])["detail"]["adopted"] is True
    code, out = _verify_cli(env, "--no-files")
    assert code == 0, _details(out)
    assert os.path.exists(sealkey.public_path(state))
    assert seals.FORMAT == 2


def test_the_appliance_chain_cut_back_to_an_older_seal_shows_against_the_witness(
    env: Env, db: Database, tenant: str
) -> None:
    """beta, made after the appliance's first seal, is listed only by the newest one. The
    superuser deletes beta whole and cuts the appliance's chain back to its first seal
    (the newest seal, its entry and beta's chain.opened gone): by the database alone that
    is a consistent older trail, but the seal run's witness outside the database
    (<state_dir>/audit/last-seal.json) names the seal that is gone."""
    _docs(env, db, tenant)
    _seal(env)
    first = _rows(db, "SELECT max(seq) AS s FROM audit_events WHERE chain = 0")[0]["s"]
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": "beta", "status": "active"})
    _docs(env, db, "beta")
    _seal(env)
    witness = json.loads((_state(env) / "audit" / "last-seal.json").read_text())
    beta = _chain_of(db, "beta")
    _delete_tenant_behind_the_trails_back(db, beta)
    with db.transaction() as tx:
        tx.raw("SET LOCAL session_replication_role = replica")
        for statement in (
            "DELETE FROM audit_events WHERE chain = %(b)s OR (chain = 0 AND seq > %(f)s)",
            "DELETE FROM audit_seals WHERE chain = %(b)s OR (chain = 0 AND seq >= %(f)s)",
            "DELETE FROM audit_heads WHERE chain = %(b)s",
            "UPDATE audit_heads SET seq = %(f)s, hash = (SELECT hash FROM audit_events "
            "WHERE chain = 0 AND seq = %(f)s) WHERE chain = 0",
        ):
            tx.raw(statement, {"b": beta, "f": first})
    shutil.rmtree(env.config.paths.archive_dir / "beta")
    code, out = _verify_cli(env)
    assert code == 5, _details(out)
    assert [p["detail"] for p in out["problems"]] == [
        f"the appliance's seal {witness['seal']} (entry {witness['seq']}), recorded in "
        f"{_state(env) / 'audit' / 'last-seal.json'} as the newest, is gone: the appliance's "
        "chain lost its newest seals, or the database was restored from a backup older than "
        "the state directory"
    ]


def test_a_key_made_before_any_seal_is_intact_and_every_seal_deleted_shows(
    env: Env, db: Database, tenant: str
) -> None:
    """`migrate` makes the sealing key before any seal (so the first backup holds it): a
    trail with that key and no seal yet is intact. Once a seal run has recorded its
    witness, the superuser deleting every seal is found."""
    assert run_cli(env, "migrate").returncode == 0
    _docs(env, db, tenant)
    code, out = _verify_cli(env)
    assert code == 0, _details(out)
    _seal(env)
    with db.transaction() as tx:  # as the superuser, past the append-only trigger
        tx.raw("SET LOCAL session_replication_role = replica")
        tx.raw("DELETE FROM audit_seals")
    code, out = _verify_cli(env)
    assert code == 5, _details(out)
    assert any("recorded in" in p["detail"] and "is gone" in p["detail"] for p in out["problems"])
