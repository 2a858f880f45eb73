"""What a hand-off to intake is made of: the item a source hands over, the outcome it
gets back, and the refusals (a refused file is final; its reason names what is wrong)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ingestd.config.settings import DateSource
from ingestd.config.split import SplitPolicy
from ingestd.errors import ExitCode, IngestdError

MAX_TAG_LENGTH = 100  # tags.name CHECK in 0002_tags.sql


class Outcome(enum.StrEnum):
    ingested = "ingested"
    duplicate = "duplicate"
    refused = "refused"


class Reason(enum.StrEnum):
    """Why a file was refused. Permanent: retrying the same file cannot succeed."""

    bad_filename = "bad_filename"
    symlink = "symlink"
    not_regular = "not_regular"
    hardlink = "hardlink"
    empty = "empty"
    too_large = "too_large"
    bad_type = "bad_type"
    duplicate = "duplicate"


class Disposal(enum.Enum):
    delete = "delete"  # remove the source after COMMIT (default)
    keep = "keep"  # leave it (the caller moves it, or the user asked to keep it)


class FileChanged(IngestdError):
    """Transient: the source changed while it was copied (a writer is still at work)."""

    transient = True


@dataclass(frozen=True, slots=True)
class IntakeItem:
    path: Path
    tenant: str
    source: str = "cli"  # "cli", "sftp:<account>", "watch:<folder>"
    filename: str | None = None  # the name the client chose; defaults to path.name
    subdir: str = ""  # sub-folder below the inbox / hot folder, kept as context
    tags: tuple[str, ...] = ()  # assigned in the intake transaction
    # The source is a file ingestd wrote and fsynced itself (the SFTP spool): it is linked
    # into the archive instead of copied, and nobody else can hold a hard link to it.
    owned: bool = False
    # The correlation id the file arrived with (the SFTP spool id); one is made if None.
    trace: str | None = None
    # Its source's split policy: a PDF or TIFF is then a batch, split by a split-batch
    # job into documents (None: one document, analysed as it is).
    split: SplitPolicy | None = None
    # Its source's date_source (``watch[].date_source``, ``sftp.accounts[].date_source``):
    # recorded with the document, so its analysis dates it as the source said when the
    # file arrived (migration 0024).
    date_source: DateSource = "filename-first"
    # When the file reached its source (the SFTP upload's CLOSE, a hot folder file first
    # seen); None: now. Its arrival row keeps the earliest (ingestd/arrivals/record.py).
    arrived: datetime | None = None

    @property
    def name(self) -> str:
        return self.filename if self.filename is not None else self.path.name

    @property
    def source_kind(self) -> str:
        return self.source.split(":", 1)[0]


@dataclass(frozen=True, slots=True)
class SourcePolicy:
    """What a hot folder or an SFTP account decides for the files it hands over, as
    values to freeze into each ``IntakeItem``: its split policy and its date source."""

    split: SplitPolicy | None = None
    date_source: DateSource = "filename-first"


@dataclass(frozen=True, slots=True)
class IntakeResult:
    item: IntakeItem
    outcome: Outcome
    sha256: str | None = None
    document_id: int | None = None
    job_id: int | None = None
    reason: Reason | None = None
    detail: str = ""
    archive_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Committed, but the source could not be removed after COMMIT (why, for the
    # operator). The caller must not ingest or copy it again: only retry the removal.
    source_left: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is not Outcome.refused


class Refused(IngestdError):
    """Permanent: the file itself is not taken (its type, size, name, a link, a
    duplicate); intake answers with ``Outcome.refused`` and the reason."""

    exit_code = ExitCode.refused

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
