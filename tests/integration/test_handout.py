"""`ingestd documents get`: a document handed out under its original name, re-hashed
against the archive on the way out (local disk and S3 on moto's server), every hand-out an
audit entry, a tampered file refused with nothing written, names from outside made safe.
Real PostgreSQL, real intake, the CLI as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ingestd.archive.audit_verify import verify_audit
from ingestd.archive.backends import make_archive
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import Env, run_cli
from tests.fixtures.drain import run_once
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.s3 import S3Endpoint, archive_section


def _ingest(env: Env, db: Database, tenant: str, name: str, data: bytes, **item: Any) -> int:
    """One file through the real intake, recorded under ``name`` (the client's name)."""
    src = write(env.root / "in" / f"src-{len(data)}-{abs(hash(name))}.pdf", data)
    res = make_intake(env.config, db).ingest(
        IntakeItem(path=src, tenant=tenant, filename=name, **item)
    )
    assert res.outcome is Outcome.ingested, res
    assert res.document_id is not None
    return res.document_id


def _handed_out(db: Database) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(
            "SELECT chain, tenant, document_id, body FROM audit_events "
            "WHERE kind = 'document.handed_out' ORDER BY chain, seq"
        )


def _get_bytes(env: Env, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`ingestd documents get ... -o -` with stdout as bytes (run_cli decodes text)."""
    cli = [sys.executable, "-m", "ingestd.cli", "documents", "--config", str(env.config_path)]
    return subprocess.run([*cli, "get", *args], capture_output=True, timeout=120, check=False)


def _tamper(path: Path, data: bytes) -> None:
    """Overwrite an archived (0440) file in place, as root or its owner could."""
    os.chmod(path, 0o640)
    path.write_bytes(data)
    os.chmod(path, 0o440)


def test_get_writes_the_original_under_its_name_verified_and_audited(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """The original lands under its original name with the archive's bytes; a second
    hand-out into the same directory becomes "name (2)" (the first is not overwritten);
    `-o -` gives the bytes on stdout; each hand-out is a document.handed_out entry of the
    tenant's chain naming the OS user and SUDO_USER, and the chain still verifies."""
    data = pdf_bytes("Rechnung März", seed=1)
    doc = _ingest(env, db, tenant, "Rechnung März.pdf", data)
    out = tmp_path / "out"
    out.mkdir()
    first = run_cli(
        env, "documents", "get", str(doc), "-o", str(out), "--json",
        extra_env={"SUDO_USER": "anna", "SUDO_UID": "1234"},
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["name"] == "Rechnung März.pdf" and report["variant"] == "original"
    assert (out / "Rechnung März.pdf").read_bytes() == data
    second = run_cli(env, "documents", "get", str(doc), "-o", str(out), "--tenant", tenant)
    assert second.returncode == 0, second.stderr
    assert "Rechnung März (2).pdf" in second.stdout and "verified" in second.stdout
    assert sorted(p.name for p in out.iterdir()) == ["Rechnung März (2).pdf", "Rechnung März.pdf"]
    assert (out / "Rechnung März.pdf").read_bytes() == data
    piped = _get_bytes(env, str(doc), "-o", "-")
    assert piped.returncode == 0 and piped.stdout == data, piped.stderr

    entries = _handed_out(db)
    assert len(entries) == 3
    body = json.loads(entries[0]["body"])
    assert entries[0]["tenant"] == tenant and entries[0]["document_id"] == doc
    detail = body["detail"]
    assert detail["by"]["sudo_user"] == "anna" and detail["by"]["sudo_uid"] == 1234
    assert detail["by"]["uid"] == os.geteuid()
    assert detail["sha256"] == report["sha256"] and detail["variant"] == "original"
    assert [json.loads(e["body"])["detail"]["to"] for e in entries] == ["file", "file", "stdout"]
    assert "sudo_user" not in json.loads(entries[1]["body"])["detail"]["by"]
    assert verify_audit(db, make_archive(env.config)).ok


def test_a_tampered_original_is_refused_and_nothing_is_written(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """An archived file whose bytes no longer hash to the recorded SHA-256 is not handed
    out: exit 5 (archive_inconsistent) with a message naming the file, no file and no
    temp file left in the directory, nothing on stdout, the refusal logged, no audit
    entry of a hand-out."""
    doc = _ingest(env, db, tenant, "Vertrag.pdf", pdf_bytes("Vertrag", seed=2))
    with db.transaction() as tx:
        rel = tx.raw("SELECT archive_path FROM documents WHERE id = %(id)s", {"id": doc})[0]
    _tamper(env.config.paths.archive_dir / rel["archive_path"], pdf_bytes("Fälschung", seed=3))
    out = tmp_path / "out"
    out.mkdir()
    res = run_cli(env, "documents", "get", str(doc), "-o", str(out))
    assert res.returncode == 5, (res.returncode, res.stderr)
    assert "does not match its recorded SHA-256" in res.stderr
    assert "nothing was written" in res.stderr
    assert "document.handout_refused" in res.stderr
    assert list(out.iterdir()) == []
    res = run_cli(env, "documents", "get", str(doc), "-o", str(out / "named.pdf"))
    assert res.returncode == 5 and list(out.iterdir()) == []
    piped = _get_bytes(env, str(doc), "-o", "-")
    assert piped.returncode == 5 and piped.stdout == b""
    assert _handed_out(db) == []


def test_the_s3_archive_hands_out_verified_and_refuses_a_replaced_object(
    make_env: Any, db: Database, tenant: str, s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """With backend = "s3" the original comes from the bucket, verified; an object
    replaced behind ingestd's back (a new version without our checksum) is refused with
    nothing written and no audit entry."""
    section = archive_section(s3_endpoint, tmp_path)
    env: Env = make_env(archive=section)
    data = pdf_bytes("Lieferschein", seed=4)
    doc = _ingest(env, db, tenant, "Lieferschein 4711.pdf", data)
    out = tmp_path / "out"
    out.mkdir()
    res = run_cli(env, "documents", "get", str(doc), "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert (out / "Lieferschein 4711.pdf").read_bytes() == data
    assert len(_handed_out(db)) == 1

    with db.transaction() as tx:
        rel = tx.raw("SELECT archive_path FROM documents WHERE id = %(id)s", {"id": doc})[0]
    client, bucket = s3_endpoint.client(), section["s3"]["bucket"]
    client.put_object(Bucket=bucket, Key=f"ingestd/{rel['archive_path']}", Body=b"forged")
    again = tmp_path / "again"
    again.mkdir()
    res = run_cli(env, "documents", "get", str(doc), "-o", str(again))
    assert res.returncode == 5, (res.returncode, res.stderr)
    assert "does not match" in res.stderr
    assert list(again.iterdir()) == []
    assert len(_handed_out(db)) == 1


@pytest.mark.parametrize(
    ("original", "written"),
    [
        ("../../etc/passwd.pdf", "_.._etc_passwd.pdf"),
        ("Rech\nnung\x1b[31m\u202e.pdf", "Rech_nung_[31m_.pdf"),
        ("=?utf-8?q?Rechnung_M=C3=BCller=2F2026?=.pdf", "Rechnung Müller_2026.pdf"),
        ("=?utf-8?b?Li4vLi4vZXRjL3Bhc3N3ZA==?=", "_.._etc_passwd.pdf"),
        (".bashrc.pdf", "bashrc.pdf"),
        ("..", "document-{id}.pdf"),
    ],
)
def test_names_from_outside_are_written_safely_inside_the_directory(
    env: Env, db: Database, tenant: str, tmp_path: Path, original: str, written: str
) -> None:
    """A recorded name with path separators, `../`, control and bidi characters, RFC 2047
    encoded words (decoded, then made safe) or a leading dot is written as one plain
    file inside the directory asked for, under the safe name. (Intake refuses a name
    with a separator; a record from elsewhere - an older release, a restored database,
    a mail attachment - may hold one, so the name is set on the row.)"""
    doc = _ingest(env, db, tenant, "plain.pdf", pdf_bytes(original, seed=5))
    with db.transaction() as tx:
        tx.raw(
            "UPDATE documents SET original_filename = %(n)s WHERE id = %(id)s RETURNING id",
            {"n": original, "id": doc},
        )
    out = tmp_path / "out" / "here"
    out.mkdir(parents=True)
    res = run_cli(env, "documents", "get", str(doc), "-o", str(out), "--json")
    assert res.returncode == 0, res.stderr
    assert [p.name for p in out.iterdir()] == [written.format(id=doc)]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["here"]
    assert json.loads(res.stdout)["path"] == str(out / written.format(id=doc))


def test_an_existing_file_is_never_overwritten_and_a_missing_document_says_so(
    env: Env, db: Database, tenant: str, tmp_path: Path
) -> None:
    """`-o FILE` naming an existing file is refused (exit 1) and the file keeps its bytes;
    an unknown id, or another tenant's document, exits 7 (not_found) writing nothing."""
    doc = _ingest(env, db, tenant, "Brief.pdf", pdf_bytes("Brief", seed=6))
    target = tmp_path / "Brief.pdf"
    target.write_bytes(b"mine")
    res = run_cli(env, "documents", "get", str(doc), "-o", str(target))
    assert res.returncode == 1 and "not overwritten" in res.stderr
    assert target.read_bytes() == b"mine"
    res = run_cli(env, "documents", "get", str(doc + 1000), "-o", str(tmp_path))
    assert res.returncode == 7 and "no such document" in res.stderr
    res = run_cli(env, "documents", "get", str(doc), "--tenant", "other", "-o", str(tmp_path))
    assert res.returncode == 7
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".pdf") == ["Brief.pdf"]
    assert _handed_out(db) == []


def test_the_searchable_pdf_is_handed_out_once_analysis_made_it(
    env: Env, db: Database, tenant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before analysis `--searchable` exits 7 saying it does not exist yet and why; after
    it, the searchable PDF is written (into the current directory by default) under the
    original name with .pdf, and audited as the searchable variant with its own hash."""
    doc = _ingest(env, db, tenant, "Scan Angebot.pdf", pdf_bytes("Angebot Nummer 17", seed=7))
    out = tmp_path / "cwd"
    out.mkdir()
    monkeypatch.chdir(out)
    res = run_cli(env, "documents", "get", str(doc), "--searchable")
    assert res.returncode == 7, res.stderr
    assert "no searchable PDF yet" in res.stderr and "queued" in res.stderr
    assert list(out.iterdir()) == []
    run_once(env, db, "w-handout")
    res = run_cli(env, "documents", "get", str(doc), "--searchable", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["variant"] == "searchable" and report["name"] == "Scan Angebot.pdf"
    written = out / "Scan Angebot.pdf"
    assert written.read_bytes().startswith(b"%PDF")
    with db.transaction() as tx:
        rel = tx.raw(
            "SELECT searchable_pdf FROM document_content WHERE document_id = %(id)s", {"id": doc}
        )[0]["searchable_pdf"]
    assert written.read_bytes() == (env.config.paths.derived_dir / rel).read_bytes()
    detail = json.loads(_handed_out(db)[0]["body"])["detail"]
    assert detail["variant"] == "searchable" and detail["sha256"] == report["sha256"]
