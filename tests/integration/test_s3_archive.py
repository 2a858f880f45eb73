"""The S3 Object Lock archive against a real S3 endpoint (moto's server, real HTTP and
boto3): uploads verified by checksum and confirmed before they count, COMPLIANCE locks,
no overwrite, no early delete, no shorter retention, whatever the server would allow."""

from __future__ import annotations

import datetime
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from ingestd.archive.audit_verify import verify_audit
from ingestd.archive.backends import make_archive
from ingestd.archive.s3 import LOCK_MODE, S3Archive
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.errors import ArchiveError
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import Env, run_cli, wait_until
from tests.fixtures.drain import run_once
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.s3 import S3Endpoint, archive_section

WHEN = datetime.datetime(2026, 12, 1, 10, 0, tzinfo=datetime.UTC)


def _store(s3: S3Endpoint, tmp_path: Path, *, lock: datetime.timedelta) -> S3Archive:
    return S3Archive(
        s3.client(),
        s3.bucket(),
        tmp_path / "staging",
        prefix="ingestd/",
        retain_until=lambda tenant, now: now + lock,
    )


def _archive(store: S3Archive, tmp_path: Path, data: bytes) -> tuple[str, bool]:
    src = tmp_path / f"src-{hashlib.sha256(data).hexdigest()[:8]}"
    src.write_bytes(data)
    fd = os.open(src, os.O_RDONLY)
    try:
        staged = store.stage("acme", fd, max_bytes=10**9, when=WHEN)
    finally:
        os.close(fd)
    done = store.commit(staged, "pdf")
    assert not staged.temp_path.exists()
    return done.relpath, done.reused


def test_an_original_is_stored_locked_with_its_checksum_and_read_back(
    s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """The object carries our SHA-256 and a COMPLIANCE lock; reading gives its bytes."""
    store = _store(s3_endpoint, tmp_path, lock=datetime.timedelta(days=3650))
    data = b"%PDF-1.4 Rechnung " + os.urandom(200_000)
    rel, reused = _archive(store, tmp_path, data)
    sha = hashlib.sha256(data).hexdigest()
    assert rel == f"acme/2026/12/{sha}.pdf" and not reused
    found = store.locate(rel)
    assert found is not None and found.sha256 == sha and found.size == len(data)
    assert found.lock_mode == LOCK_MODE
    assert found.retain_until is not None
    assert found.retain_until > datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3600)
    with store.reading(rel) as path:
        assert path.read_bytes() == data
    assert not path.exists()
    assert list(store.iter_files()) == [rel]
    facts = store.inspect(rel)
    assert facts is not None and facts.size == len(data) and facts.mode == 0o440
    assert store.sha256(rel) == sha


def test_the_same_bytes_again_reuse_the_object_and_other_bytes_are_never_written(
    s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """A retry after a crash finds its object (reused); a key holding other bytes (put
    there behind our back) is refused, never overwritten."""
    store = _store(s3_endpoint, tmp_path, lock=datetime.timedelta(days=1))
    data = b"%PDF-1.4 Vertrag"
    rel, _ = _archive(store, tmp_path, data)
    assert _archive(store, tmp_path, data) == (rel, True)
    other = S3Archive(
        store.client, store.bucket, tmp_path / "other", retain_until=store.retain_until
    )
    store.client.put_object(Bucket=store.bucket, Key=store.key(rel), Body=b"forged")
    with pytest.raises(ArchiveError, match="different content"):
        _archive(store, tmp_path, data)
    assert other.sha256(f"ingestd/{rel}") == hashlib.sha256(b"forged").hexdigest()


def test_no_early_delete_and_no_shorter_retention(s3_endpoint: S3Endpoint, tmp_path: Path) -> None:
    """Purge and tenant removal are refused while an object is locked; a retention is
    extended, never shortened (moto, like a bucket without lock, would shorten it)."""
    store = _store(s3_endpoint, tmp_path, lock=datetime.timedelta(days=30))
    rel, _ = _archive(store, tmp_path, b"%PDF-1.4 Beleg")
    with pytest.raises(ArchiveError, match=r"locked \(COMPLIANCE\) until"):
        store.remove(rel)
    with pytest.raises(ArchiveError, match="nothing was deleted"):
        store.remove_tenant("acme")
    assert store.locate(rel) is not None
    found = store.locate(rel)
    assert found is not None and found.retain_until is not None
    shorter = found.retain_until - datetime.timedelta(days=10)
    assert store.extend_retention(rel, shorter) is False
    longer = found.retain_until + datetime.timedelta(days=365)
    assert store.extend_retention(rel, longer) is True
    moved = store.locate(rel)
    assert moved is not None and moved.retain_until is not None
    assert moved.retain_until.date() == longer.date()


def test_an_expired_lock_lets_purge_remove_every_version(
    s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """Once its retain-until date has passed the object goes, all its versions."""
    store = _store(s3_endpoint, tmp_path, lock=datetime.timedelta(seconds=2))
    rel, _ = _archive(store, tmp_path, b"%PDF-1.4 alt")
    found = store.locate(rel)
    assert found is not None and found.retain_until is not None
    until = found.retain_until
    wait_until(lambda: datetime.datetime.now(datetime.UTC) > until, timeout=60)
    assert store.remove(rel) is True
    assert store.locate(rel) is None
    assert store.remove(rel) is False
    versions = store.client.list_object_versions(Bucket=store.bucket).get("Versions", [])
    assert versions == []


def test_paths_that_walk_elsewhere_are_refused(s3_endpoint: S3Endpoint, tmp_path: Path) -> None:
    """A relpath with .. or an empty part never becomes a key."""
    store = _store(s3_endpoint, tmp_path, lock=datetime.timedelta(days=1))
    for bad in ("../x.pdf", "acme//x.pdf", "acme/./x.pdf", ""):
        with pytest.raises(ArchiveError, match="not an archive path"):
            store.key(bad)


def test_intake_workers_and_verify_use_the_bucket_alone(
    make_env: Any, db: Database, tenant: str, s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """With backend = "s3" originals go to the bucket only, workers analyse them from
    there, audit verify re-hashes the objects; an object replaced or deleted behind our
    back is reported with the position of the entry that archived it."""
    section = archive_section(s3_endpoint, tmp_path)
    env: Env = make_env(archive=section, worker={"poll_interval": 0.1}, analysis={"jobs": 1})
    docs = []
    for i in range(2):
        src = write(env.root / "in" / f"Brief {i}.pdf", pdf_bytes(f"Brief Nummer {i}", seed=i))
        res = make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant))
        assert res.outcome is Outcome.ingested
        docs.append(res)
    assert not any(p.is_file() for p in env.config.paths.archive_dir.rglob("*"))
    run_once(env, db, "w-s3")
    with db.transaction() as tx:
        states = tx.raw("SELECT processing_status FROM documents ORDER BY id")
    assert [s["processing_status"] for s in states] == ["done", "done"]
    report = verify_audit(db, make_archive(env.config))
    assert report.ok and report.files == 2, report.problems
    client, bucket = s3_endpoint.client(), section["s3"]["bucket"]
    client.put_object(Bucket=bucket, Key=f"ingestd/{docs[0].archive_path}", Body=b"forged")
    client.delete_object(Bucket=bucket, Key=f"ingestd/{docs[1].archive_path}")
    report = verify_audit(db, make_archive(env.config))
    found = {(str(p.kind), p.seq, p.detail.split(":")[0]) for p in report.problems}
    assert found == {("file", 1, "altered"), ("file", 2, "missing")}, report.problems


def test_analysis_locks_an_original_as_long_as_its_class_keeps_it(
    make_env: Any, db: Database, tenant: str, s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """Locked for the tenant's default at intake; once analysis knows the class (a tag
    kept 30 years) the lock is extended; a shorter class (6 years) never shortens it."""
    rules = [
        {"match": "tag", "name": "Vertrag", "years": 30},
        {"match": "tag", "name": "Korrespondenz", "years": 6},
    ]
    env: Env = make_env(
        archive=archive_section(s3_endpoint, tmp_path),
        retention={"rules": rules},
        worker={"poll_interval": 0.1},
        analysis={"jobs": 1},
    )
    made = {}
    for tag in ("Vertrag", "Korrespondenz"):
        src = write(env.root / "in" / f"{tag}.pdf", pdf_bytes(f"{tag} vom Januar"))
        res = make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant, tags=(tag,)))
        assert res.outcome is Outcome.ingested and res.archive_path
        made[tag] = res.archive_path
    store = make_archive(env.config)
    assert isinstance(store, S3Archive)
    year = datetime.datetime.now(datetime.UTC).year

    def lock_year(rel: str) -> int:
        found = store.locate(rel)
        assert found is not None and found.retain_until is not None
        return found.retain_until.year

    assert {t: lock_year(r) for t, r in made.items()} == {
        "Vertrag": year + 11,
        "Korrespondenz": year + 11,
    }
    run_once(env, db, "w-s3-lock")
    assert {t: lock_year(r) for t, r in made.items()} == {
        "Vertrag": year + 31,
        "Korrespondenz": year + 11,
    }


def test_a_purge_the_lock_still_forbids_fails_at_once_and_deletes_nothing(
    make_env: Any, db: Database, tenant: str, s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """Retention shortened in the config after intake: our check lets the purge through,
    the object's lock does not; the job fails at once naming the date, nothing deleted
    (not even derived data)."""
    section = archive_section(s3_endpoint, tmp_path)
    opts = {"worker": {"poll_interval": 0.1, "max_retries": 3}, "analysis": {"jobs": 1}}
    env: Env = make_env(archive=section, **opts)
    src = write(env.root / "in" / "Brief.pdf", pdf_bytes("Brief zum Löschen"))
    res = make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant))
    assert res.document_id is not None and res.archive_path
    run_once(env, db, "w-s3-purge")
    env = make_env(archive=section, retention={"years": 0}, **opts)
    doc = str(res.document_id)
    for cmd in ("trash", "purge"):
        assert run_cli(env, "document", cmd, "--tenant", tenant, doc).returncode == 0
    run_once(env, db, "w-s3-purge")
    with db.transaction() as tx:
        job = tx.raw("SELECT * FROM processing_jobs WHERE kind = 'purge-document'")[0]
        left = tx.raw("SELECT count(*) AS n FROM documents")[0]["n"]
    assert (job["status"], job["retry_count"]) == ("failed", 0)
    assert "locked (COMPLIANCE) until" in job["error_message"]
    assert "nothing was deleted" in job["error_message"]
    assert left == 1
    store = make_archive(env.config)
    assert isinstance(store, S3Archive) and store.locate(res.archive_path) is not None
    derived = env.config.paths.derived_dir / Path(res.archive_path).with_suffix("")
    assert derived.is_dir() and any(derived.iterdir())
