"""SIGKILL at each step of intake, then re-run: nothing lost, nothing duplicated.

The intake process is a real ``ingestd ingest`` killed by SIGKILL at a named crash
point (``INGESTD_CRASHPOINT``); the re-run is a second real process over the same files.
"""

from __future__ import annotations

import hashlib
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from ingestd.db.database import Database
from tests.conftest import Env, run_cli
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.s3 import S3Endpoint, archive_section
from tests.fixtures.sql import INTEGRITY_COUNTS

N_FILES = 5


@pytest.mark.parametrize(
    ("point", "orphans_expected"),
    [
        ("after_stage", "temp"),  # copy complete and fsynced, not yet under its final name
        ("after_archive", "orphaned"),  # final WORM file exists, no row yet
        ("before_commit", "orphaned"),  # rows and COMMIT never sent, nothing committed
        ("after_commit", None),  # committed, source not yet removed
    ],
)
def test_sigkill_at_each_step_then_rerun(
    env: Env, db: Database, tenant: str, point: str, orphans_expected: str | None
) -> None:
    """0 files lost, 0 duplicate documents, 0 documents without job, verify sees the orphan."""
    _crash_then_rerun(env, db, tenant, point, orphans_expected, temp_kept=point == "after_stage")


@pytest.mark.parametrize(
    ("point", "orphans_expected"),
    [
        ("after_stage", None),  # staged locally: nothing in the bucket yet
        ("after_archive", "orphaned"),  # the object is uploaded and confirmed, no row yet
        ("before_commit", "orphaned"),  # rows and COMMIT never sent, nothing committed
        ("after_commit", None),  # committed, source not yet removed
    ],
)
def test_sigkill_at_each_step_then_rerun_on_s3(
    make_env: Any,
    db: Database,
    tenant: str,
    s3_endpoint: S3Endpoint,
    tmp_path: Path,
    point: str,
    orphans_expected: str | None,
) -> None:
    """The same matrix with the S3 Object Lock archive: the object confirmed before
    COMMIT, an orphan object found by verify and reused by the re-run."""
    env: Env = make_env(archive=archive_section(s3_endpoint, tmp_path))
    _crash_then_rerun(env, db, tenant, point, orphans_expected, temp_kept=False)


def _crash_then_rerun(
    env: Env, db: Database, tenant: str, point: str, orphans_expected: str | None, temp_kept: bool
) -> None:
    files = [
        write(env.root / "in" / f"Brief {i}.pdf", pdf_bytes(seed=i, pad_to=50_000))
        for i in range(N_FILES)
    ]
    shas = {hashlib.sha256(f.read_bytes()).hexdigest() for f in files}

    crashed = run_cli(
        env, "ingest", "--tenant", tenant, *map(str, files), extra_env={"INGESTD_CRASHPOINT": point}
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert all(f.exists() for f in files), "a crash before source removal must keep every source"

    verify = run_cli(env, "verify", "--json")
    report = json.loads(verify.stdout)
    kinds = [p["kind"] for p in report["problems"]]
    if orphans_expected:
        assert verify.returncode == 5
        assert kinds == [orphans_expected], report
    else:
        assert verify.returncode == 0 and kinds == []

    rerun = run_cli(env, "ingest", "--tenant", tenant, "--json", *map(str, files))
    assert rerun.returncode == 0, rerun.stderr
    outcomes = sorted(r["outcome"] for r in json.loads(rerun.stdout))
    expected_dups = 1 if point == "after_commit" else 0
    assert outcomes == ["duplicate"] * expected_dups + ["ingested"] * (N_FILES - expected_dups)

    with db.transaction() as tx:
        docs = tx.raw("SELECT sha256 FROM documents")
        integrity = tx.raw(INTEGRITY_COUNTS)[0]
        per_doc = tx.raw("SELECT document_id, count(*) AS n FROM processing_jobs GROUP BY 1")
    assert sorted(d["sha256"] for d in docs) == sorted(shas)  # 0 lost, 0 duplicates
    assert integrity == {"documents_without_job": 0, "jobs_without_document": 0}
    assert all(r["n"] == 1 for r in per_doc)
    assert not any(f.exists() for f in files)

    after = run_cli(env, "verify", "--json")
    if temp_kept:
        # The abandoned temp copy is still reported until an operator removes it.
        assert [p["kind"] for p in json.loads(after.stdout)["problems"]] == ["temp"]
    else:
        assert after.returncode == 0, after.stdout
