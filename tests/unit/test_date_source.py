"""Which issued date analysis gives a document: the file name's or the text's, as the
source's `date_source` said when it arrived (frozen at intake, worker/jobs/analyze.py);
a person's date is kept. Documents recorded before the policy was frozen get it from the
config once (ingestd/intake/policy_backfill.py)."""

from __future__ import annotations

import datetime

import pytest

from ingestd.config.load import parse_config
from ingestd.filenames.titles import TitleRules
from ingestd.intake.policy_backfill import date_source_of, name_date_of
from worker.jobs.analysis_input import JobDocument
from worker.jobs.analysis_record import Analysis
from worker.jobs.analyze import _derive_issued_date

NAME = datetime.date(2026, 11, 3)  # "2026-11-03 Rechnung.pdf"
TEXT = "Telekom Deutschland GmbH\nDatum: 15.01.2025\nRechnung"
IN_TEXT = datetime.date(2025, 1, 15)
PERSON = datetime.date(2020, 2, 2)


def _doc(
    issued: datetime.date | None, derived: datetime.date | None, text_first: bool
) -> JobDocument:
    return JobDocument(
        id=1, tenant_id=1, sha256="0" * 64, size_bytes=1, archive_path="acme/x.pdf",
        original_filename="2026-11-03 Rechnung.pdf", trace_id=None,
        created_at=datetime.datetime(2026, 11, 25, tzinfo=datetime.UTC), title="Rechnung",
        mime_type="application/pdf", issued_date=issued, source="watch:/srv/hot/a",
        source_subdir="", correspondent=None, document_type=None, tags=(),
        workflows_run=frozenset(), placeholder_title=None, derived_title=None,
        derived_issued_date=derived,
        date_policy="text-first" if text_first else "filename-first", name_date=NAME,
    )  # fmt: skip


def _derive(doc: JobDocument, text: str) -> tuple[datetime.date | None, Analysis]:
    data = Analysis(pages=[], page_count=0, engine="", languages="", searchable_pdf=None,
                    thumbnail=None)  # fmt: skip
    return _derive_issued_date(doc, text, data), data


# (issued now, analysis's own date before, text, text_first, expected date)
CASES = [
    pytest.param(NAME, None, TEXT, False, NAME, id="filename-first-keeps-the-name"),
    pytest.param(None, None, TEXT, False, IN_TEXT, id="filename-first-text-when-no-name"),
    pytest.param(NAME, None, TEXT, True, IN_TEXT, id="text-first-takes-the-text"),
    pytest.param(NAME, None, "keine Angabe", True, NAME, id="text-first-name-when-no-text"),
    pytest.param(None, None, TEXT, True, IN_TEXT, id="text-first-text-without-name"),
    pytest.param(None, None, "keine Angabe", True, None, id="text-first-neither"),
    pytest.param(IN_TEXT, IN_TEXT, TEXT, True, IN_TEXT, id="text-first-again-same"),
    pytest.param(IN_TEXT, IN_TEXT, "kein Datum", True, NAME, id="text-first-back-to-the-name"),
    pytest.param(PERSON, IN_TEXT, TEXT, True, PERSON, id="text-first-keeps-a-persons"),
    pytest.param(PERSON, IN_TEXT, TEXT, False, PERSON, id="filename-first-keeps-a-persons"),
]


@pytest.mark.parametrize(("issued", "derived", "text", "text_first", "expected"), CASES)
def test_precedence_of_file_name_and_text(
    issued: datetime.date | None,
    derived: datetime.date | None,
    text: str,
    text_first: bool,
    expected: datetime.date | None,
) -> None:
    """filename-first: the file name's date, the text's only without one; text-first: the
    text's, the file name's only without one; a person's date either way."""
    got, data = _derive(_doc(issued, derived, text_first), text)
    assert got == expected
    assert (data.issued is not None) == (expected != issued)
    if data.issued is not None:
        assert (data.issued.new, data.issued.was) == (expected, issued)


def test_a_document_recorded_before_the_freeze_gets_its_sources_setting() -> None:
    """A document recorded before 0024 has no policy of its own: its `source` names its
    hot folder or SFTP account, whose setting at the upgrade applies; the CLI and a source
    no longer configured get filename-first."""
    cfg = parse_config(
        {
            "watch": [
                {"path": "/srv/hot/a", "tenant": "acme"},
                {"path": "/srv/hot/b", "tenant": "acme", "date_source": "text-first"},
            ],
            "sftp": {
                "accounts": [
                    {
                        "username": "scan1",
                        "tenant": "acme",
                        "password_hash": "$2b$12$" + "a" * 53,
                        "date_source": "text-first",
                    }
                ]
            },
        }
    )
    assert date_source_of(cfg, "watch:/srv/hot/a") == "filename-first"
    assert date_source_of(cfg, "watch:/srv/hot/b") == "text-first"
    assert date_source_of(cfg, "sftp:scan1") == "text-first"
    assert date_source_of(cfg, "sftp:gone") == "filename-first"
    assert date_source_of(cfg, "watch:/srv/hot/gone") == "filename-first"
    assert date_source_of(cfg, "cli") == "filename-first"


def test_file_name_date_is_the_one_intake_took() -> None:
    """The file name's date as intake read it, also a scanner's auto-name (its scan time),
    with the day the document arrived as "today" (a date after it is none)."""
    cfg = parse_config({})
    arrived = datetime.datetime(2026, 11, 25, 9, 0, tzinfo=datetime.UTC)

    def of(name: str) -> datetime.date | None:
        return name_date_of(TitleRules(cfg.titles.placeholder_patterns), name, arrived)

    assert of("2026-11-03 Rechnung Telekom.pdf") == NAME
    assert of("Scan_20261124_101500.pdf") == datetime.date(2026, 11, 24)
    assert of("Rechnung Telekom.pdf") is None
    assert of("2026-12-24 Weihnachten.pdf") is None  # after it arrived: not a date
