"""The CLI's bulk commands and tables as real processes (issue #20): `documents analyze
--all`, `jobs retry --failed` with their confirmation, and listings that cut nothing."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from typing import Any

from ingestd.cli.common import CONFIRM_ABOVE
from ingestd.db.database import Database
from tests.conftest import Env, run_cli
from tests.fixtures.queue import make_jobs

LONG_SOURCE = "watch:/srv/hot/acme/invoices/2026/from-the-accounting-department-scanner"
LONG_TITLE = "Rechnung 2026-0815 der Stadtwerke Musterstadt für Strom und Gas, Januar bis März"


def _documents(
    db: Database, tenant: str, n: int, *, source: str = "test", title: str = "x"
) -> list[int]:
    """n documents of ``tenant`` (created active if missing), with no job at all."""
    with db.transaction() as tx:
        tx.raw(
            "INSERT INTO tenants (name, status) VALUES (%(t)s, 'active') ON CONFLICT DO NOTHING",
            {"t": tenant},
        )
        rows = tx.raw(
            """
            INSERT INTO documents (tenant_id, sha256, size_bytes, mime_type, extension,
                original_filename, source, archive_path, title, processing_status, trace_id)
            SELECT t.id, encode(sha256((t.name || g || random())::bytea), 'hex'), 1,
                   'application/pdf', 'pdf', 'x.pdf', %(source)s, 'x', %(title)s, 'done',
                   'trace-' || g
            FROM tenants t, generate_series(1, %(n)s) g WHERE t.name = %(t)s
            ORDER BY g RETURNING id
            """,
            {"t": tenant, "n": n, "source": source, "title": title},
        )
    return [int(r["id"]) for r in rows]


def _fail(db: Database, ids: list[int], error: str = "boom") -> None:
    with db.transaction() as tx:
        tx.raw(
            "UPDATE processing_jobs SET status = 'failed', finished_at = now(), "
            "error_message = %(e)s WHERE id = ANY(%(ids)s)",
            {"ids": ids, "e": error},
        )


def _jobs(db: Database, where: str = "true", params: dict[str, Any] | None = None) -> list[Any]:
    with db.transaction() as tx:
        return tx.raw(f"SELECT * FROM processing_jobs WHERE {where} ORDER BY id", params)


def _cli(env: Env, *args: str, stdin: Any = subprocess.DEVNULL) -> Any:
    """run_cli with stdin given: not a terminal unless a test passes one."""
    return subprocess.run(
        [sys.executable, "-m", "ingestd.cli", args[0], "--config", str(env.config_path), *args[1:]],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _at_terminal(env: Env, answer: str, *args: str) -> Any:
    """The command with a terminal as its stdin, ``answer`` typed at it in advance."""
    master, slave = pty.openpty()
    try:
        os.write(master, answer.encode() + b"\n")
        return _cli(env, *args, stdin=slave)
    finally:
        os.close(slave)
        os.close(master)


def test_analyze_all_queues_one_job_per_eligible_document_of_the_tenant(
    env: Env, db: Database
) -> None:
    """analyze --all queues one job per eligible document, none for another tenant."""
    plain = _documents(db, "acme", 2)
    trashed, parent, child = _documents(db, "acme", 3)
    busy = make_jobs(db, "acme", 1)  # its document has an analysis queued
    other = _documents(db, "beta", 2)
    with db.transaction() as tx:
        tx.raw("UPDATE documents SET trashed_at = now() WHERE id = %(id)s", {"id": trashed})
        tx.raw(
            "INSERT INTO document_parts (parent_id, position, first_page, last_page, child_id,"
            " tenant_id) SELECT %(p)s, 1, 1, 2, %(c)s, tenant_id FROM documents WHERE id = %(p)s",
            {"p": parent, "c": child},
        )
    before = {int(j["id"]) for j in _jobs(db)}

    proc = run_cli(env, "documents", "analyze", "--tenant", "acme", "--all", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "tenant": "acme",
        "queued": 3,
        "skipped": {"trashed": 1, "batches": 1, "already_queued": 1},
    }
    new = [j for j in _jobs(db) if int(j["id"]) not in before]
    assert sorted(j["document_id"] for j in new) == sorted([*plain, child])
    assert all(j["kind"] == "analyze-document" and j["status"] == "queued" for j in new)
    payloads = {j["document_id"]: j["payload"] for j in new}
    assert payloads[plain[0]]["reanalysis"] is True
    assert payloads[plain[0]]["document_id"] == plain[0]
    assert payloads[plain[0]]["trace"].startswith("trace-")
    assert not any(j["document_id"] in other for j in new)
    assert len(_jobs(db, "document_id = %(id)s", {"id": busy[0]})) == 1

    text = run_cli(env, "documents", "analyze", "--tenant", "beta", "--all", "--force")
    assert text.returncode == 0, text.stderr
    assert "analyze-document queued for 2 documents" in text.stdout
    beta_jobs = _jobs(db, "document_id = ANY(%(ids)s)", {"ids": other})
    assert len(beta_jobs) == 2 and all(j["payload"]["force"] for j in beta_jobs)


def test_analyze_all_refuses_an_inactive_tenant_and_a_mixed_command_line(
    env: Env, db: Database
) -> None:
    """analyze --all queues nothing for a suspended tenant (exit 6); --all with IDs is usage."""
    ids = _documents(db, "acme", 2)
    with db.transaction() as tx:
        tx.raw("UPDATE tenants SET status = 'suspended' WHERE name = 'acme'")
    proc = run_cli(env, "documents", "analyze", "--tenant", "acme", "--all")
    assert proc.returncode == 6 and "suspended" in proc.stderr
    assert _jobs(db) == []
    mixed = run_cli(env, "documents", "analyze", "--tenant", "acme", "--all", str(ids[0]))
    assert mixed.returncode == 2 and "not allowed" in mixed.stderr
    neither = run_cli(env, "documents", "analyze", "--tenant", "acme")
    assert neither.returncode == 2 and "required" in neither.stderr


def test_retry_failed_by_tenant_and_kind(env: Env, db: Database) -> None:
    """retry --failed retries the failed jobs --tenant and --kind choose, never cancelled ones."""
    acme = make_jobs(db, "acme", 3)
    acme_hooks = make_jobs(db, "acme", 2, kind="deliver-webhook")
    beta = make_jobs(db, "beta", 2)
    queued = make_jobs(db, "beta", 1)  # not failed: left alone
    _fail(db, acme + acme_hooks + beta)
    cancelled = make_jobs(db, "acme", 1)
    assert run_cli(env, "jobs", "cancel", str(cancelled[0])).returncode == 0

    def status(ids: list[int]) -> set[str]:
        return {j["status"] for j in _jobs(db, "id = ANY(%(ids)s)", {"ids": ids})}

    proc = run_cli(
        env, "jobs", "retry", "--failed", "--tenant", "acme", "--kind", "analyze-document", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"queued": 3}
    assert status(acme) == {"queued"} and status(beta) == {"failed"}
    assert status(acme_hooks) == {"failed"} and status(cancelled) == {"failed"}
    with db.transaction() as tx:
        docs = tx.raw(
            "SELECT processing_status FROM documents d JOIN processing_jobs j "
            "ON j.document_id = d.id WHERE j.id = ANY(%(ids)s)",
            {"ids": acme},
        )
    assert {d["processing_status"] for d in docs} == {"queued"}

    text = run_cli(env, "jobs", "retry", "--failed", "--tenant", "beta")
    assert text.returncode == 0, text.stderr
    assert "2 failed jobs of tenant beta queued again" in text.stdout
    assert status(beta) == {"queued"} and status(queued) == {"queued"}

    rest = json.loads(run_cli(env, "jobs", "retry", "--failed", "--json").stdout)
    assert rest == {"queued": 2} and status(acme_hooks) == {"queued"}
    assert status(cancelled) == {"failed"}  # an admin's cancel stands
    assert json.loads(run_cli(env, "jobs", "retry", "--failed", "--json").stdout) == {"queued": 0}

    unknown = run_cli(env, "jobs", "retry", "--failed", "--tenant", "nosuch")
    assert unknown.returncode == 6
    stray = run_cli(env, "jobs", "retry", "--kind", "notify", str(acme[0]))
    assert stray.returncode == 2 and "--failed" in stray.stderr


def test_retry_by_id_reports_each_job_in_json(env: Env, db: Database) -> None:
    """retry ID... --json lists the jobs queued again and why each other one was refused."""
    failed, ready = make_jobs(db, "acme", 2)
    _fail(db, [failed])
    proc = run_cli(env, "jobs", "retry", "--json", str(failed), str(ready), "999999")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["retried"] == [failed]
    assert [r["id"] for r in out["refused"]] == [ready, 999999]
    assert "is queued" in out["refused"][0]["reason"]
    assert "does not exist" in out["refused"][1]["reason"]


def test_a_large_retry_needs_yes_or_a_yes_at_the_terminal(env: Env, db: Database) -> None:
    """Above CONFIRM_ABOVE, retry --failed refuses without --yes (no terminal), asks at one."""
    n = CONFIRM_ABOVE + 1
    ids = make_jobs(db, "acme", n)
    _fail(db, ids)

    def failed() -> int:
        return len(_jobs(db, "status = 'failed'"))

    refused = _cli(env, "jobs", "retry", "--failed", "--json")
    assert refused.returncode == 2, refused.stderr
    assert "--yes" in refused.stderr and refused.stdout == ""
    assert failed() == n

    declined = _at_terminal(env, "n", "jobs", "retry", "--failed")
    assert f"retry {n:,} failed jobs? [y/N]" in declined.stderr
    assert declined.returncode == 1 and failed() == n

    asked = _at_terminal(env, "y", "jobs", "retry", "--failed", "--json")
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout) == {"queued": n} and failed() == 0

    _fail(db, ids)
    yes = _cli(env, "jobs", "retry", "--failed", "--yes", "--json")
    assert yes.returncode == 0, yes.stderr
    assert json.loads(yes.stdout) == {"queued": n} and failed() == 0


def test_a_large_analyze_all_needs_yes(env: Env, db: Database) -> None:
    """Above CONFIRM_ABOVE, analyze --all queues nothing without --yes, all with it."""
    n = CONFIRM_ABOVE + 1
    _documents(db, "acme", n)
    refused = _cli(env, "documents", "analyze", "--tenant", "acme", "--all")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert _jobs(db) == []
    yes = _cli(env, "documents", "analyze", "--tenant", "acme", "--all", "--yes", "--json")
    assert yes.returncode == 0, yes.stderr
    assert json.loads(yes.stdout)["queued"] == n and len(_jobs(db)) == n


def test_listings_show_long_values_whole(env: Env, db: Database) -> None:
    """documents list and jobs list print a long source, title and error whole, aligned."""
    _documents(db, "acme", 1, source=LONG_SOURCE, title=LONG_TITLE)
    _documents(db, "beta", 1, source="cli", title="short")
    lines = run_cli(env, "documents", "list").stdout.splitlines()
    assert any(LONG_SOURCE in line and LONG_TITLE in line for line in lines)
    header, *rows = lines
    # Every column starts where its header does: the short row is padded to the long one.
    assert {row.index("done") for row in rows} == {header.index("STATUS")}

    error = "tesseract: " + "a very long complaint about the scan " * 5
    ids = make_jobs(db, "acme", 1)
    _fail(db, ids, error)
    listed = run_cli(env, "jobs", "list").stdout
    assert " ".join(error.split()) in listed
