"""Sub-folder names as tags: folders that only say when (2026/11, 2026-11-30) are left
out unless a source asks for them (ingestd/intake/tags.py, ingestd/sources/handoff.py)."""

from __future__ import annotations

import pytest

from ingestd.config.load import parse_config
from ingestd.errors import ConfigError
from ingestd.intake.tags import date_folder_flags
from ingestd.sources.handoff import subfolder_tags

# (path below the hot folder or inbox, which of its folder names only say when)
CASES = [
    pytest.param("2026", [True], id="year"),
    pytest.param("1999", [True], id="year-1900s"),
    pytest.param("2026/11", [True, True], id="year-month"),
    pytest.param("2026/1", [True, True], id="year-month-one-digit"),
    pytest.param("2026/01", [True, True], id="year-month-padded"),
    pytest.param("2026/12", [True, True], id="december"),
    pytest.param("2026/13", [True, False], id="no-month-13"),
    pytest.param("2026/0", [True, False], id="no-month-0"),
    pytest.param("2026/11/30", [True, True, True], id="year-month-day"),
    pytest.param("2026/11/32", [True, True, False], id="no-day-32"),
    pytest.param("2026/11 November", [True, True], id="month-number-and-name"),
    pytest.param("2026/Nov", [True, True], id="month-abbreviation"),
    pytest.param("2026/März", [True, True], id="month-german"),
    pytest.param("2026/december", [True, True], id="month-english-lower-case"),
    pytest.param("2026-11-30", [True], id="iso-date"),
    pytest.param("2026_11_30", [True], id="underscore-date"),
    pytest.param("2026.11.30", [True], id="dotted-iso-date"),
    pytest.param("20261130", [True], id="compact-date"),
    pytest.param("30.11.2026", [True], id="german-date"),
    pytest.param("2026-11", [True], id="iso-year-month"),
    pytest.param("11.2026", [True], id="german-month-year"),
    pytest.param("2026-11/30", [True, True], id="day-below-year-month"),
    pytest.param("2026-13-01", [False], id="no-month-13-in-a-date"),
    pytest.param("20261131", [False], id="no-november-31"),
    pytest.param("2026-report", [False], id="year-and-word"),
    pytest.param("Q4", [False], id="quarter"),
    pytest.param("2026/Q4", [True, False], id="quarter-below-year"),
    pytest.param("11", [False], id="month-number-alone"),
    pytest.param("November", [False], id="month-name-alone"),
    pytest.param("Buchhaltung/11", [False, False], id="number-below-a-name"),
    pytest.param("2026/Rechnungen/11", [True, False, False], id="number-below-a-name-below-year"),
    pytest.param("4711", [False], id="not-a-plausible-year"),
    pytest.param("202611", [False], id="six-digits"),
    pytest.param("Buchhaltung", [False], id="name"),
    pytest.param("Rechnungen 2026", [False], id="name-and-year"),
    # A folder named for a year dates the month below it (the name itself stays a tag).
    pytest.param("Rechnungen 2026/12", [False, True], id="month-below-a-named-year"),
    pytest.param("Rechnungen_2026/Dezember", [False, True], id="month-name-below-a-named-year"),
    pytest.param("2026 Steuer/03/15", [False, True, True], id="day-below-a-named-year"),
    pytest.param("Kunden/2026-Projekte/7", [False, False, True], id="deeper-named-year"),
    pytest.param("Rechnungen 2026/13", [False, False], id="no-month-13-below-a-named-year"),
    pytest.param("Rechnungen 4711/12", [False, False], id="not-a-year-below-a-name"),
    pytest.param("Rechnung-2026-001/12", [False, False], id="year-inside-a-number"),
    pytest.param("Rechnungen 2026/Telekom/12", [False, False, False], id="not-directly-below"),
]


@pytest.mark.parametrize(("subdir", "flags"), CASES)
def test_date_folder_flags(subdir: str, flags: list[bool]) -> None:
    """A folder name is a date folder exactly when it only says when, given its parents."""
    assert date_folder_flags(subdir.split("/")) == flags


def test_date_folders_do_not_become_tags_by_default() -> None:
    """subfolder_tags: names become tags, date folders not (unless date_folders)."""
    sub = "Buchhaltung/2026/11/Telekom"
    assert subfolder_tags(["Eingang"], sub, enabled=True) == ("Eingang", "Buchhaltung", "Telekom")
    assert subfolder_tags(["Eingang"], sub, enabled=True, date_folders=True) == (
        "Eingang",
        "Buchhaltung",
        "2026",
        "11",
        "Telekom",
    )
    assert subfolder_tags(["Eingang"], "2026-11-30", enabled=True) == ("Eingang",)
    assert subfolder_tags(["Eingang"], sub, enabled=False, date_folders=True) == ("Eingang",)
    assert subfolder_tags([], "", enabled=True) == ()


def test_month_below_a_named_year_is_no_tag() -> None:
    """Rechnungen 2026/12/ tags the file "Rechnungen 2026", not "12" (issue #30)."""
    assert subfolder_tags(["Eingang"], "Rechnungen 2026/12", enabled=True) == (
        "Eingang",
        "Rechnungen 2026",
    )
    assert subfolder_tags(["Eingang"], "Buchhaltung/12", enabled=True) == (
        "Eingang",
        "Buchhaltung",
        "12",
    )


def test_date_folder_tags_and_date_source_default_per_source() -> None:
    """Both keys exist on hot folders and SFTP accounts; default: no date tags,
    filename-first; other values are refused."""
    data = {
        "watch": [
            {"path": "/srv/hot/a", "tenant": "acme"},
            {
                "path": "/srv/hot/b",
                "tenant": "acme",
                "date_folder_tags": True,
                "date_source": "text-first",
            },
        ],
        "sftp": {
            "accounts": [
                {"username": "s1", "tenant": "acme", "password_hash": "$2b$12$" + "a" * 53},
                {
                    "username": "s2",
                    "tenant": "acme",
                    "password_hash": "$2b$12$" + "a" * 53,
                    "date_folder_tags": True,
                    "date_source": "text-first",
                },
            ]
        },
    }
    cfg = parse_config(data)
    assert [(w.date_folder_tags, w.date_source) for w in cfg.watch] == [
        (False, "filename-first"),
        (True, "text-first"),
    ]
    assert [(a.date_folder_tags, a.date_source) for a in cfg.sftp.accounts] == [
        (False, "filename-first"),
        (True, "text-first"),
    ]
    bad = {"watch": [{"path": "/srv/hot/a", "tenant": "acme", "date_source": "newest"}]}
    with pytest.raises(ConfigError) as exc:
        parse_config(bad)
    assert "watch[0].date_source: input should be 'filename-first' or 'text-first'" in str(
        exc.value.problems
    )
