"""`ingestd backup DIR` / `ingestd restore DIR`, run as root on an appliance that belongs
to a service user: the dump, the archive, the state (sealing key included) and the config
(drop-ins included) with a manifest; a restore onto an empty machine puts all of it back
for that user and reports success only after `verify` and `audit verify` passed; a
damaged backup and a non-empty target are refused."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ingestd.archive import sealkey
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.db.pgcluster import SUPERUSER, find_bindir
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import run_cli
from tests.fixtures.files import pdf_bytes
from tests.fixtures.s3 import S3Endpoint, archive_section
from tests.fixtures.service_user import ServiceInstall, as_root_prefix


def _cli(inst: ServiceInstall, *args: str) -> subprocess.CompletedProcess[str]:
    """``ingestd ARGS`` as root, as an admin would type it (no runuser)."""
    cli = [sys.executable, "-m", "ingestd.cli", "--config", str(inst.config_path)]
    return subprocess.run(
        [*as_root_prefix(inst.root), *cli, *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=inst.root,
        env={k: v for k, v in os.environ.items() if k != "INGESTD_USER"},
        check=False,
    )


def _pg_ctl(inst: ServiceInstall, *args: str) -> None:
    """The embedded cluster started or stopped as its owner, the service user: kept
    running between the commands (which then leave it running)."""
    pgdata = inst.state_dir / "pgdata"
    subprocess.run(
        [str(find_bindir() / "pg_ctl"), "-D", str(pgdata), "-l", f"{pgdata}.log", "-w", *args],
        check=True,
        capture_output=True,
        user=inst.user.pw_uid,
        group=inst.user.pw_gid,
        cwd="/",
        timeout=120,
    )


def _db(inst: ServiceInstall) -> Database:
    conninfo = f"host={inst.state_dir / 'pgrun'} port=5432 user={SUPERUSER} dbname=ingestd"
    return Database(conninfo, min_size=1, max_size=1).open()


def _owners(root: Path) -> set[str]:
    names = {pwd.getpwuid(root.stat().st_uid).pw_name}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            names.add(pwd.getpwuid(os.lstat(os.path.join(dirpath, name)).st_uid).pw_name)
    return names


def _appliance(inst: ServiceInstall) -> dict[str, Any]:
    """An appliance with two archived documents and a seal; what a restore must bring back."""
    inst.write({})
    dropins = inst.config_path.parent / "conf.d"
    dropins.mkdir()
    (dropins / "10-accounts.toml").write_text("# scanner accounts live here\n")
    migrated = _cli(inst, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    _pg_ctl(inst, "start")
    with _db(inst) as db, db.transaction() as tx:
        tx.one("tenant_insert", {"name": "acme", "status": "active"})
    inbox = inst.root / "in"
    inbox.mkdir(mode=0o755)
    for i in range(2):
        (inbox / f"Rechnung {i}.pdf").write_bytes(pdf_bytes(f"Rechnung {i} von Anna"))
        (inbox / f"Rechnung {i}.pdf").chmod(0o644)
    files = sorted(str(p) for p in inbox.iterdir())
    ingested = _cli(inst, "ingest", "--tenant", "acme", "--keep-source", *files)
    assert ingested.returncode == 0, ingested.stdout + ingested.stderr
    sealed = _cli(inst, "audit", "seal")
    assert sealed.returncode == 0, sealed.stdout + sealed.stderr
    with _db(inst) as db, db.transaction() as tx:
        docs = tx.raw("SELECT archive_path, sha256 FROM documents ORDER BY id")
    return {
        "docs": {str(r["archive_path"]): str(r["sha256"]) for r in docs},
        "key": sealkey.key_path(inst.state_dir).read_bytes(),
        "pub": sealkey.public_path(inst.state_dir).read_bytes(),
    }


def _wipe_machine(inst: ServiceInstall) -> None:
    """The new, empty machine: no cluster, no state directory, no archive, no config."""
    _pg_ctl(inst, "-m", "fast", "stop")
    for p in (
        inst.state_dir,
        inst.archive,
        inst.root / "derived",
        inst.config_path.parent / "conf.d",
    ):
        shutil.rmtree(p)
    inst.config_path.unlink()


def test_backup_then_restore_onto_an_empty_machine(service_install: ServiceInstall) -> None:
    """Backup as root (into a directory the service user can reach; one it cannot is
    refused up front) holds dump, archive files (with their SHA-256), sealing key and .pub,
    config and drop-in; restore onto an empty machine brings back the documents, the
    same key, the drop-in, all owned by the service user, and passes both checks."""
    inst = service_install
    before = _appliance(inst)
    closed = inst.root / "root-only"
    closed.mkdir(mode=0o700)
    unreachable = _cli(inst, "backup", str(closed / "backup-1"))
    assert unreachable.returncode == 2 and "cannot enter" in unreachable.stderr
    target = inst.root / "backups" / "backup-1"
    done = _cli(inst, "backup", str(target), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((target / "manifest.json").read_text())
    files = manifest["files"]
    assert "database.dump" in files
    assert "state/audit/seal-ed25519.key" in files and "state/audit/seal-ed25519.pub" in files
    assert not any(f.startswith("state/pgdata") for f in files)
    assert {"config/ingestd.toml", "config/conf.d/10-accounts.toml"} <= set(files)
    for rel, sha in before["docs"].items():
        assert files[f"archive/{rel}"]["sha256"] == sha
    assert manifest["state_owner"] == inst.user.pw_name

    _wipe_machine(inst)
    restored = _cli(inst, "restore", str(target), "--json")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    out = json.loads(restored.stdout)
    assert out["checks"] == {"verify": 0, "audit verify": 0}
    assert out["user"] == inst.user.pw_name
    assert sealkey.key_path(inst.state_dir).read_bytes() == before["key"]
    assert sealkey.public_path(inst.state_dir).read_bytes() == before["pub"]
    assert (inst.config_path.parent / "conf.d" / "10-accounts.toml").exists()
    assert _owners(inst.state_dir) == {inst.user.pw_name}
    assert _owners(inst.archive) == {inst.user.pw_name}
    listed = _cli(inst, "documents", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 2
    # The restored appliance seals on with the restored key.
    assert _cli(inst, "audit", "seal").returncode == 0


def test_restore_refuses_a_damaged_backup_and_a_machine_in_use(
    service_install: ServiceInstall,
) -> None:
    """A file that differs from the manifest refuses the restore (exit 5, naming it) and
    writes nothing; a state directory in use refuses it (exit 2) without --force."""
    inst = service_install
    _appliance(inst)
    target = inst.root / "backup-2"
    assert _cli(inst, "backup", str(target)).returncode == 0
    # In use: the appliance is still there.
    busy = _cli(inst, "restore", str(target))
    assert busy.returncode == 2, busy.stdout + busy.stderr
    assert "is not empty" in busy.stderr and "--force" in busy.stderr
    _wipe_machine(inst)
    copy = target / "config" / "ingestd.toml"
    good = copy.read_bytes()
    copy.write_bytes(good + b"\n# edited\n")
    damaged = _cli(inst, "restore", str(target))
    assert damaged.returncode == 5, damaged.stdout + damaged.stderr
    assert "config/ingestd.toml: altered" in damaged.stderr
    assert not inst.config_path.exists() and not inst.state_dir.exists()


def test_an_s3_archive_is_backed_up_as_a_listing_and_restored_in_place(
    s3_endpoint: S3Endpoint, make_env: Any, db: Database, tenant: str, tmp_path: Path
) -> None:
    """With the archive on S3 the backup holds every object version with its checksum and
    COMPLIANCE retention (not the objects); a restore into an emptied configured
    database leaves the bucket alone and passes verify, which finds every object."""
    env = make_env(archive=archive_section(s3_endpoint, tmp_path))
    src = env.root / "in" / "Scan_0815.pdf"
    src.parent.mkdir()
    src.write_bytes(pdf_bytes("Anna Lieferschein"))
    intake = make_intake(env.config, db)
    assert intake.ingest(IntakeItem(path=src, tenant=tenant)).outcome is Outcome.ingested
    target = env.root / "backup"
    done = run_cli(env, "backup", str(target), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (target / "archive").exists()
    listing = json.loads((target / "archive-listing.json").read_text())
    (obj,) = listing["versions"]
    assert obj["key"].startswith("ingestd/acme/") and obj["version"]
    assert obj["lock_mode"] == "COMPLIANCE" and obj["retain_until"] and obj["checksum_sha256"]
    with db.transaction() as tx:
        tx.raw("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    shutil.rmtree(env.config.paths.state_dir)
    restored = run_cli(env, "restore", str(target), "--json")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert json.loads(restored.stdout)["checks"] == {"verify": 0, "audit verify": 0}
    with db.transaction() as tx:
        assert tx.raw("SELECT count(*) AS n FROM documents")[0]["n"] == 1


def _rewrite_manifest(target: Path, *, drop: str | None = None, add: str | None = None) -> None:
    """A backup changed with its manifest changed to match: consistent, but not what
    was backed up (an archive file added, or one taken away)."""
    from ingestd.ops.backup import sha256_file

    manifest = json.loads((target / "manifest.json").read_text())
    if drop:
        (target / drop).unlink()
        del manifest["files"][drop]
    if add:
        manifest["files"][add] = {
            "sha256": sha256_file(target / add),
            "size": (target / add).stat().st_size,
        }
    (target / "manifest.json").write_text(json.dumps(manifest))


def _empty_machine(env: Any, db: Database) -> None:
    with db.transaction() as tx:
        tx.raw("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    for p in (env.config.paths.state_dir, env.config.paths.archive_dir):
        shutil.rmtree(p, ignore_errors=True)


def test_restore_sets_aside_files_after_the_dump_and_fails_on_a_failed_check(
    env: Any, db: Database, tenant: str
) -> None:
    """An archive file no dumped row names (archived after the dump) is kept under
    restored-after-dump/ and the checks pass; a backup missing a document's file passes
    its manifest but fails `ingestd verify`, and the restore exits 5 naming that check."""
    src = env.root / "in" / "Scan_0815.pdf"
    src.parent.mkdir()
    src.write_bytes(pdf_bytes("Anna Lieferschein"))
    intake = make_intake(env.config, db)
    assert intake.ingest(IntakeItem(path=src, tenant=tenant)).outcome is Outcome.ingested
    with db.transaction() as tx:
        (rel,) = [str(r["archive_path"]) for r in tx.raw("SELECT archive_path FROM documents")]
    target = env.root / "backup"
    assert run_cli(env, "backup", str(target)).returncode == 0

    later = env.root / "later"
    shutil.copytree(target, later)
    late = f"archive/{tenant}/2026/01/{'ab' * 32}.pdf"
    (later / late).parent.mkdir(parents=True, exist_ok=True)
    (later / late).write_bytes(pdf_bytes("after the dump"))
    _rewrite_manifest(later, add=late)
    _empty_machine(env, db)
    done = run_cli(env, "restore", str(later), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["after_dump"] == [late.removeprefix("archive/")]
    state = env.config.paths.state_dir
    assert (state / "restored-after-dump" / late.removeprefix("archive/")).is_file()

    broken = env.root / "broken"
    shutil.copytree(target, broken)
    _rewrite_manifest(broken, drop=f"archive/{rel}")
    _empty_machine(env, db)
    failed = run_cli(env, "restore", str(broken))
    assert failed.returncode == 5, failed.stdout + failed.stderr
    assert "`ingestd verify` failed" in failed.stderr and "file is gone" in failed.stderr
