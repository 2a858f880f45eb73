"""Re-hash the archive against the database: missing, altered and orphaned files.

Each finished run is recorded in ``<state_dir>/verify/last.json`` (written atomically:
temp file, fsync, rename), which the daemon exports as ``ingestd_verify_last_*``. A file,
not a table: the daemon reads it while Postgres is down (when the question "is the
archive intact?" matters most), a verify describes the archive of this host (the state
directory is per host, the database is shared by every worker host), and no migration is
needed. A directory of its own, so that a sandboxed verify (ProtectSystem=strict) can be
given exactly that to write (``ReadWritePaths=``) and nothing of the archive. A run that
fails half-way records nothing: the age of the last run says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingestd.archive.store import FILE_MODE, ArchiveStore, is_temp
from ingestd.db.database import Database
from ingestd.runtime import statedir

LAST_RUN_DIR = "verify"
LAST_RUN_FILE = "last.json"
PROBLEM_KINDS = ("missing", "altered", "orphaned", "temp", "mode", "lineage")


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str  # missing | altered | orphaned | temp | mode | lineage
    path: str
    detail: str
    document_id: int | None = None


@dataclass(slots=True)
class VerifyReport:
    checked: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def count(self, kind: str) -> int:
        return sum(1 for p in self.problems if p.kind == kind)


def verify_archive(db: Database, archive: ArchiveStore, *, rehash: bool = True) -> VerifyReport:
    report = VerifyReport()
    with db.transaction() as tx:
        rows = tx.all("verify_documents")
        # Batches and their children (issue 16): every child is a document row above, so
        # its file is checked like any other; here, that the lineage itself holds.
        lineage = tx.all("verify_lineage")
    referenced: set[str] = set()
    for row in rows:
        rel = str(row["archive_path"])
        doc_id = int(row["id"])
        referenced.add(rel)
        report.checked += 1
        facts = archive.inspect(rel)
        if facts is None:
            report.problems.append(Problem("missing", rel, "file is gone", doc_id))
            continue
        if not facts.regular:
            report.problems.append(Problem("altered", rel, "not a regular file", doc_id))
            continue
        if facts.size != row["size_bytes"]:
            detail = f"size {facts.size}, recorded {row['size_bytes']}"
            report.problems.append(Problem("altered", rel, detail, doc_id))
            continue
        if rehash and archive.sha256(rel) != row["sha256"]:  # after the cheap checks: all bytes
            report.problems.append(Problem("altered", rel, "SHA-256 differs", doc_id))
            continue
        if facts.mode != FILE_MODE:
            detail = f"mode {facts.mode:o}, expected 440"
            report.problems.append(Problem("mode", rel, detail, doc_id))
    for rel in archive.iter_files():
        if rel in referenced:
            continue
        if is_temp(rel):
            report.problems.append(
                Problem("temp", rel, "incomplete copy left by an interrupted intake")
            )
        else:
            report.problems.append(Problem("orphaned", rel, "no document refers to this file"))
    for row in lineage:
        doc_id = int(row["id"])
        report.problems.append(Problem("lineage", f"document {doc_id}", str(row["detail"]), doc_id))
    return report


def record_run(state_dir: Path, report: VerifyReport, *, started: float, rehash: bool) -> Path:
    """Write the result of a finished run (``started``: its time.time() at the start)."""
    finished = time.time()
    data: dict[str, Any] = {
        "finished_at": datetime.fromtimestamp(finished, UTC).isoformat(timespec="seconds"),
        "finished_epoch": finished,
        "duration_seconds": round(finished - started, 3),
        "checked": report.checked,
        "problems": len(report.problems),
        "by_kind": {k: report.count(k) for k in PROBLEM_KINDS},
        "rehash": rehash,
        "ok": report.ok,
    }
    folder = state_dir / LAST_RUN_DIR
    statedir.make_dirs(state_dir, folder, 0o750)
    path = folder / LAST_RUN_FILE
    fd, tmp = tempfile.mkstemp(prefix=".last-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(data).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o640)
        statedir.adopt(state_dir, Path(tmp))  # root's run: the daemon's user must read it
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename durable; not worth failing the run
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return path


def last_run(state_dir: Path) -> dict[str, Any] | None:
    """The last recorded run, or None (never ran, unreadable)."""
    try:
        data = json.loads((state_dir / LAST_RUN_DIR / LAST_RUN_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
