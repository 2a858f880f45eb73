"""What analyze-document reads, as typed values: the document's row and the text.

``JobDocument`` is the row of query ``job_document`` (the document, its names, tags and
workflows, what analysis set before, and what intake froze for its dating: migration
0024); ``SavedText`` is the OCR result as the job uses it and as ``text.json`` keeps it
beside the derived files, so a retry after a later step failed does not OCR again.
``verify_original`` checks the archived bytes against their record before anything is
derived from them (split-batch uses it too).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ingestd.archive import derived
from worker.jobs import NeedsAttention, PermanentError

CHUNK = 1 << 20
TEXT_FILE = "text.json"
TEXT_FORMAT = 1


@dataclass(frozen=True, slots=True)
class JobDocument:
    """A document as its analysis sees it (query ``job_document``)."""

    id: int
    tenant_id: int
    sha256: str
    size_bytes: int
    archive_path: str
    original_filename: str
    trace_id: str | None
    created_at: datetime.datetime
    title: str
    mime_type: str
    issued_date: datetime.date | None
    source: str
    source_subdir: str
    correspondent: str | None
    document_type: str | None
    tags: tuple[str, ...]
    workflows_run: frozenset[str]
    # What an earlier analysis set (document_content), to know whether it is still its.
    placeholder_title: str | None
    derived_title: str | None
    derived_issued_date: datetime.date | None
    # Frozen at intake (0024): the source's date_source then, and the file name's date.
    # NULL policy (recorded before 0024 and not yet filled): the default.
    date_policy: str | None
    name_date: datetime.date | None

    @classmethod
    def of(cls, row: dict[str, Any]) -> JobDocument:
        return cls(
            id=int(row["id"]),
            tenant_id=int(row["tenant_id"]),
            sha256=str(row["sha256"]),
            size_bytes=int(row["size_bytes"]),
            archive_path=str(row["archive_path"]),
            original_filename=str(row["original_filename"]),
            trace_id=row["trace_id"],
            created_at=row["created_at"],
            title=str(row["title"]),
            mime_type=str(row["mime_type"]),
            issued_date=row["issued_date"],
            source=str(row["source"]),
            source_subdir=str(row["source_subdir"]),
            correspondent=row["correspondent"],
            document_type=row["document_type"],
            tags=tuple(row["tags"]),
            workflows_run=frozenset(row["workflows_run"]),
            placeholder_title=row["placeholder_title"],
            derived_title=row["derived_title"],
            derived_issued_date=row["derived_issued_date"],
            date_policy=row["date_policy"],
            name_date=row["name_date"],
        )

    @property
    def text_first(self) -> bool:
        """Its source said the text's date wins over the file name's (``date_source``)."""
        return self.date_policy == "text-first"


@dataclass(frozen=True, slots=True)
class SavedText:
    """The text of a document's pages and its derived files (names inside its derived
    folder), from this attempt's OCR (``ran``) or an earlier attempt's ``text.json``."""

    pages: list[str]
    page_count: int
    engine: str
    languages: str
    searchable_pdf: str
    thumbnail: str
    ocr_pages: int = 0  # pages the engine read in this attempt
    engine_loads: int = 0  # models this attempt loaded
    ran: bool = False  # False: reused from text.json, nothing was read again

    @classmethod
    def load(cls, out_dir: Path, sha256: str) -> SavedText | None:
        """The text a previous attempt saved for the same bytes, or None."""
        try:
            saved = json.loads((out_dir / TEXT_FILE).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(saved, dict) or saved.get("format") != TEXT_FORMAT:
            return None
        if saved.get("sha256") != sha256 or not isinstance(saved.get("pages"), list):
            return None
        names = (saved.get("searchable_pdf"), saved.get("thumbnail"))
        if not all(isinstance(n, str) and (out_dir / n).is_file() for n in names):
            return None
        try:
            return cls(
                pages=[str(p) for p in saved["pages"]],
                page_count=int(saved["page_count"]),
                engine=str(saved["engine"]),
                languages=str(saved["languages"]),
                searchable_pdf=str(saved["searchable_pdf"]),
                thumbnail=str(saved["thumbnail"]),
                ocr_pages=int(saved.get("ocr_pages") or 0),
                engine_loads=int(saved.get("engine_loads") or 0),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def save(self, out_dir: Path, sha256: str) -> None:
        """``text.json``, written whole or not at all (fsynced, then renamed)."""
        fields = asdict(self)
        body = json.dumps(
            {**fields, "format": TEXT_FORMAT, "sha256": sha256, "ran": None}, ensure_ascii=False
        ).encode()
        fd, tmp = tempfile.mkstemp(prefix=".text-", suffix=".tmp", dir=out_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, out_dir / TEXT_FILE)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    @property
    def full(self) -> str:
        return "\n\n".join(self.pages)


def derived_dir(root: Path, archive_path: str) -> Path:
    """The document's derived folder (ingestd/archive/derived.py); a path that would
    escape is a permanent error of the job."""
    try:
        return derived.folder(root, archive_path)
    except ValueError as exc:
        raise PermanentError(str(exc)) from None


def verify_original(path: Path, *, archive_path: str, size_bytes: int, sha256: str) -> None:
    """The archived file is there and holds the recorded bytes: a document whose bytes
    are gone or altered must not get derived data from something else."""
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NeedsAttention(
            f"archived file {archive_path} is missing; run `ingestd verify`"
        ) from None
    size = 0
    try:
        while chunk := os.read(fd, CHUNK):
            size += len(chunk)
            digest.update(chunk)
    finally:
        os.close(fd)
    if size != size_bytes or digest.hexdigest() != sha256:
        raise NeedsAttention(
            f"archived file {archive_path} does not match its record "
            f"(size {size}, expected {size_bytes}); run `ingestd verify`"
        )
