"""Re-hash the archive against the database: missing, altered and orphaned files."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from ingestd.archive import FILE_MODE, LocalArchive, is_temp, sha256_of
from ingestd.db import Database


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str  # missing | altered | orphaned | temp | mode
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


def verify_archive(db: Database, archive: LocalArchive, *, rehash: bool = True) -> VerifyReport:
    report = VerifyReport()
    with db.transaction() as tx:
        rows = tx.all("verify_documents")
    referenced: set[str] = set()
    for row in rows:
        rel = str(row["archive_path"])
        referenced.add(rel)
        report.checked += 1
        path = archive.root / rel
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            report.problems.append(Problem("missing", rel, "file is gone", int(row["id"])))
            continue
        if not stat.S_ISREG(st.st_mode):
            report.problems.append(Problem("altered", rel, "not a regular file", int(row["id"])))
            continue
        if st.st_size != row["size_bytes"]:
            report.problems.append(
                Problem(
                    "altered",
                    rel,
                    f"size {st.st_size}, recorded {row['size_bytes']}",
                    int(row["id"]),
                )
            )
            continue
        if rehash and sha256_of(path) != row["sha256"]:
            report.problems.append(Problem("altered", rel, "SHA-256 differs", int(row["id"])))
            continue
        if stat.S_IMODE(st.st_mode) != FILE_MODE:
            report.problems.append(
                Problem(
                    "mode", rel, f"mode {stat.S_IMODE(st.st_mode):o}, expected 440", int(row["id"])
                )
            )
    for rel in archive.iter_files():
        if rel in referenced:
            continue
        if is_temp(rel):
            report.problems.append(
                Problem("temp", rel, "incomplete copy left by an interrupted intake")
            )
        else:
            report.problems.append(Problem("orphaned", rel, "no document refers to this file"))
    return report
