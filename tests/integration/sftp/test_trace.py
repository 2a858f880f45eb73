"""``ingestd trace`` (issue 30 point 2) on files that met every outcome, answered from the
database alone: the log is deleted before each question. An archived and a duplicate
SFTP upload, an upload the SFTP server refused, a corrupt PDF a hot folder quarantined, a
file waiting for its suspended tenant; and arrivals decided while PostgreSQL was down,
which appear once it is back."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.db.pgcluster import EmbeddedPostgres
from ingestd.db.schema import migrate
from ingestd.events.outbox import EventLog
from ingestd.sources.hotfolders import HotFolders
from tests.conftest import private_cluster, wait_until, write_config
from tests.fixtures.files import pdf_bytes, write
from tests.integration.sftp.conftest import Rig
from tests.integration.sftp.test_refusal_messages import elf

FAST = {"stable_seconds": 0.3, "poll_interval": 0.2, "retry_max_delay": 2}


def _arrival(db: Database, name: str) -> dict[str, Any] | None:
    with db.transaction() as tx:
        rows = tx.raw("SELECT * FROM arrivals WHERE original_name = %(n)s", {"n": name})
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def _wait_arrival(db: Database, name: str, outcome: str) -> dict[str, Any]:
    wait_until(lambda: (a := _arrival(db, name)) is not None and a["outcome"] == outcome, 60)
    row = _arrival(db, name)
    assert row is not None
    return row


def _cli(rig: Rig, *args: str) -> subprocess.CompletedProcess[str]:
    """``ingestd`` as a helpdesk person runs it, against the rig's database and paths."""
    config = rig.root / "cli.toml"
    if not config.exists():
        write_config(
            config,
            {
                "database": {"url": rig.db.conninfo},
                "paths": {
                    "state_dir": str(rig.config.paths.state_dir),
                    "archive": str(rig.config.paths.archive_dir),
                    "spool": str(rig.config.paths.spool),
                },
                "log": {"format": "json"},
            },
        )
    return subprocess.run(
        [sys.executable, "-m", "ingestd.cli", args[0], "--config", str(config), *args[1:]],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _trace(rig: Rig, name: str) -> tuple[dict[str, Any], str]:
    """The story of ``name`` as --json and as text, with every log line gone first."""
    rig.log_path.write_text("")  # the journal rotated away: only the database may answer
    as_json = _cli(rig, "trace", name, "--json")
    assert as_json.returncode == 0, as_json.stderr
    text = _cli(rig, "trace", name)
    assert text.returncode == 0, text.stderr
    (story,) = json.loads(as_json.stdout)
    return story, text.stdout


@pytest.fixture
def hot(tmp_path: Path) -> Iterator[Callable[[Rig], HotFolders]]:
    """Start the rig's hot folders as the daemon runs them (with its event log)."""
    started: list[tuple[HotFolders, Database]] = []

    def start(rig: Rig) -> HotFolders:
        db = Database(rig.db.conninfo, max_size=4).open()
        folders = HotFolders(
            rig.config, make_intake(rig.config, db), events=EventLog(db, rig.config.paths.state_dir)
        )
        folders.start()
        started.append((folders, db))
        return folders

    yield start
    for folders, db in started:
        folders.stop()
        db.close()


def test_trace_tells_each_files_story_from_the_database_alone(
    make_rig: Callable[..., Rig], hot: Callable[[Rig], HotFolders], tmp_path: Path, db: Database
) -> None:
    """Archived, duplicate, refused by the SFTP server, quarantined from a hot folder and
    waiting for a suspended tenant: each has its arrival row, and `trace` tells its
    story (outcome, reason, where, document, jobs, audit) with the log deleted."""
    for name in ("acme", "beta"):
        (tmp_path / "hot" / name).mkdir(parents=True)
    rig = make_rig(
        watch=[
            {
                "path": str(tmp_path / "hot" / t),
                "tenant": t,
                "failed": str(tmp_path / f"failed-{t}"),
            }
            for t in ("acme", "beta")
        ],
        hotfolders=FAST,
    )
    with db.transaction() as tx:
        tx.one(
            "tenant_set_status",
            {"name": "beta", "status": "suspended", "from_statuses": ["active"]},
        )
    hot(rig)
    data = pdf_bytes("Rechnung Anna", pad_to=20_000, seed=815)
    with rig.paramiko() as sftp:
        with sftp.open("Scan_0815.pdf", "wb") as fh:
            fh.write(data)
        rig.wait_documents(1)
        with sftp.open("Scan_0815 Kopie.pdf", "wb") as fh:
            fh.write(data)
        with contextlib.suppress(OSError), sftp.open("Rechnung.pdf", "wb") as fh:
            fh.write(elf(20_000))  # the server refuses it at this WRITE or at CLOSE
    write(tmp_path / "hot" / "acme" / "kaputt.pdf", b"PDF? no: " + bytes(range(256)) * 40)
    write(tmp_path / "hot" / "beta" / "wartet.pdf", pdf_bytes("Beta", seed=816))

    archived = _wait_arrival(db, "Scan_0815.pdf", "archived")
    dup = _wait_arrival(db, "Scan_0815 Kopie.pdf", "duplicate")
    refused = _wait_arrival(db, "Rechnung.pdf", "refused")
    quarantined = _wait_arrival(db, "kaputt.pdf", "quarantined")
    waiting = _wait_arrival(db, "wartet.pdf", "waiting")
    assert (archived["source"], archived["origin"]) == ("sftp", "scan1")
    assert dup["document_id"] == archived["document_id"]
    assert refused["reason"] == "bad_type" and "ELF" in refused["detail"]
    assert (quarantined["source"], quarantined["reason"]) == ("watch", "bad_type")
    assert quarantined["location"] == str(tmp_path / "failed-acme" / "kaputt.pdf")
    assert quarantined["size_bytes"] == 9 + 256 * 40 and waiting["size_bytes"] > 0
    assert waiting["reason"] == "tenant_suspended" and waiting["tenant"] == "beta"

    story, text = _trace(rig, "Scan_0815.pdf")
    assert (story["outcome"], story["document_id"]) == ("archived", archived["document_id"])
    steps = [s["what"] for s in story["steps"]]
    assert steps[:2] == ["arrived", "archived"]
    assert "job" in steps and "audit" in steps
    assert any("analyze-document" in s["text"] for s in story["steps"])
    assert any("document.archived" in s["text"] for s in story["steps"])
    assert any("the same content arrived again" in s["text"] for s in story["steps"])
    assert f"document {archived['document_id']}" in text and "via sftp scan1" in text

    story, text = _trace(rig, "scan_0815 kopie.pdf")  # any case
    assert story["outcome"] == "duplicate"
    assert f"same content as document {archived['document_id']}" in text

    story, text = _trace(rig, "Rechnung.pdf")
    assert story["outcome"] == "refused" and "refused" in text and "ELF" in text

    story, text = _trace(rig, "kaputt.pdf")
    assert story["outcome"] == "quarantined"
    assert f"moved to {tmp_path / 'failed-acme' / 'kaputt.pdf'}" in text
    assert "via watch" in text

    story, text = _trace(rig, quarantined["trace_id"])  # by trace id as well
    assert story["arrival"]["original_name"] == "kaputt.pdf"

    story, text = _trace(rig, "wartet.pdf")
    assert story["outcome"] == "waiting" and "tenant_suspended" in text
    assert "'beta' is suspended" in text

    missing = _cli(rig, "trace", "nie-gesehen.pdf")
    assert missing.returncode == 7 and "documents find" in missing.stderr


@pytest.fixture
def own_cluster() -> Iterator[EmbeddedPostgres]:
    """A private cluster this test may stop and start."""
    with private_cluster(5487, prefix="ingestd-test-arrivals-") as cluster:
        yield cluster


@pytest.mark.sftp_processes(2)  # as serve runs: the refusal travels to the supervisor's log
def test_arrivals_decided_while_the_database_is_down_appear_once_it_is_back(
    make_rig: Callable[..., Rig], own_cluster: EmbeddedPostgres
) -> None:
    """With PostgreSQL stopped, an upload waits in the spool and one is refused by the
    server: both are kept on disk and become rows when it returns, one row per file (a
    second flush after a crash adds none), the upload's arrival time its upload's."""
    with Database(own_cluster.conninfo, connect_timeout=2) as pg:
        migrate(pg)
        with pg.transaction() as tx:
            tx.one("tenant_insert", {"name": "acme", "status": "active"})
            tx.one("tenant_insert", {"name": "beta", "status": "active"})
        rig = make_rig(database=pg)
        own_cluster.stop("fast")
        before = datetime.now(UTC).replace(microsecond=0)  # received_at: whole seconds
        with rig.paramiko() as sftp:
            with sftp.open("Nachtschicht.pdf", "wb") as fh:
                fh.write(pdf_bytes("Nacht", pad_to=20_000, seed=900))
            with contextlib.suppress(OSError), sftp.open("Virus.pdf", "wb") as fh:
                fh.write(elf(20_000))
        wait_until(lambda: rig.logs("spool.retry"), timeout=60)
        buffer = rig.config.paths.state_dir / "events"
        wait_until(lambda: len(list(buffer.glob("*.json"))) >= 2, timeout=60)
        restarted = datetime.now(UTC)
        own_cluster.start()
        rig.wait_documents(1, timeout=120)
        events = EventLog(pg, rig.config.paths.state_dir)
        wait_until(lambda: events.flush() >= 0 and events.pending() == 0, timeout=60)
        night = _wait_arrival(pg, "Nachtschicht.pdf", "archived")
        virus = _wait_arrival(pg, "Virus.pdf", "refused")
        # Its arrival time is the upload's (the spool entry's), not the database's return.
        assert before <= night["arrived_at"] < restarted <= night["decided_at"]
        assert virus["reason"] == "bad_type"
        # A buffered file flushed twice (a crash between its COMMIT and its removal) is
        # still one row, and a late "waiting" never undoes "archived".
        with pg.transaction() as tx:
            params = {"t": night["trace_id"]}
            n = tx.raw("SELECT count(*) AS n FROM arrivals WHERE trace_id = %(t)s", params)
        assert n[0]["n"] == 1
        rig.service.stop()
