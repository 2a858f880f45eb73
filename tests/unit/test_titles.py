"""Titles, issued dates and placeholder flags derived from uploaded file names."""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from datetime import date

import pytest

from ingestd.filenames.titles import (
    DEFAULT_RULES,
    MAX_TITLE_LENGTH,
    FilenameInfo,
    TitleRules,
    parse_filename,
)

# Fixed so that "future" and "today + 1 day" do not depend on when the tests run.
TODAY = date(2026, 11, 30)
NOV_3 = date(2026, 11, 3)

# (file name, title, issued, placeholder)
CASES = [
    # --- meaningful names: leading dates in every format -----------------------------
    pytest.param("2026-11-03 Rechnung Telekom.pdf", "Rechnung Telekom", NOV_3, False, id="iso"),
    pytest.param(
        "2026_11_03_Kontoauszug_Oktober.pdf",
        "Kontoauszug Oktober",
        NOV_3,
        False,
        id="iso-underscore",
    ),
    pytest.param(
        "20261103 Mietvertrag Wohnung.pdf", "Mietvertrag Wohnung", NOV_3, False, id="compact"
    ),
    pytest.param(
        "03.11.2026 Arztbrief Dr. Müller.pdf", "Arztbrief Dr. Müller", NOV_3, False, id="dotted-dmy"
    ),
    pytest.param("3.11.2026_Steuerbescheid.pdf", "Steuerbescheid", NOV_3, False, id="dotted-d-mm"),
    pytest.param("2026.11.03 Lohnabrechnung.pdf", "Lohnabrechnung", NOV_3, False, id="dotted-ymd"),
    # A leading timestamp consumes its time part too.
    pytest.param(
        "20261103_141522_Rechnung_Strom.pdf", "Rechnung Strom", NOV_3, False, id="compact-timestamp"
    ),
    pytest.param(
        "2026-11-03 14.15.22 Gesprächsnotiz.pdf", "Gesprächsnotiz", NOV_3, False, id="iso-timestamp"
    ),
    pytest.param("2026-11-03 - Angebot Küche.pdf", "Angebot Küche", NOV_3, False, id="date-dash"),
    # --- meaningful names: trailing dates --------------------------------------------
    pytest.param(
        "Rechnung Telekom 2026-11-03.pdf", "Rechnung Telekom", NOV_3, False, id="trail-iso"
    ),
    pytest.param(
        "Lohnabrechnung_20261031.pdf",
        "Lohnabrechnung",
        date(2026, 10, 31),
        False,
        id="trail-compact",
    ),
    pytest.param(
        "Versicherungsschein Hausrat 01.10.2026.pdf",
        "Versicherungsschein Hausrat",
        date(2026, 10, 1),
        False,
        id="trail-dotted",
    ),
    pytest.param(
        "Invoice ACME Corp 2026.10.15.pdf",
        "Invoice ACME Corp",
        date(2026, 10, 15),
        False,
        id="trail-dotted-ymd",
    ),
    # Decision: a trailing timestamp is taken off like a leading one.
    pytest.param("Protokoll_20261103_141522.pdf", "Protokoll", NOV_3, False, id="trail-timestamp"),
    # --- not dates: invalid, future, too old, mid-name -------------------------------
    pytest.param("2026-13-45 Rechnung.pdf", "2026-13-45 Rechnung", None, False, id="invalid-iso"),
    pytest.param("20261399_Angebot.pdf", "20261399 Angebot", None, False, id="invalid-compact"),
    pytest.param(
        "2026-12-24 Geschenkliste.pdf", "2026-12-24 Geschenkliste", None, False, id="future"
    ),
    pytest.param(
        "2026-12-01 Terminbestätigung.pdf",
        "Terminbestätigung",
        date(2026, 12, 1),
        False,
        id="today-plus-one-day",
    ),
    pytest.param("1899-12-31 Chronik.pdf", "1899-12-31 Chronik", None, False, id="before-1900"),
    pytest.param(
        "Vertrag 2026-11-03 Entwurf.pdf",
        "Vertrag 2026-11-03 Entwurf",
        None,
        False,
        id="mid-name-iso",
    ),
    pytest.param(
        "Nebenkosten_2025_Abrechnung.pdf",
        "Nebenkosten 2025 Abrechnung",
        None,
        False,
        id="mid-name-year",
    ),
    # --- meaningful names: separators, Unicode, paths, extensions --------------------
    pytest.param(
        "Kündigung_Mobilfunkvertrag.pdf", "Kündigung Mobilfunkvertrag", None, False, id="umlaut"
    ),
    pytest.param(
        "Ku\u0308ndigung_Mobilfunkvertrag.pdf", "Kündigung Mobilfunkvertrag", None, False, id="nfd"
    ),
    # Decision: a hyphen between two letters *or two digits* stays (invoice numbers).
    pytest.param("Rechnung-2026-001.pdf", "Rechnung-2026-001", None, False, id="invoice-number"),
    pytest.param(
        "E-Mail_von_Müller-Lüdenscheid.pdf",
        "E-Mail von Müller-Lüdenscheid",
        None,
        False,
        id="word-hyphens",
    ),
    pytest.param(
        "Angebot - Küche--Entwurf.pdf", "Angebot Küche Entwurf", None, False, id="dash-separators"
    ),
    pytest.param(
        "Rechnung.Telekom.Oktober.pdf", "Rechnung Telekom Oktober", None, False, id="dotted-words"
    ),
    pytest.param(
        "Lease   Agreement__12 Baker Street.pdf",
        "Lease Agreement 12 Baker Street",
        None,
        False,
        id="whitespace-runs",
    ),
    pytest.param(
        "Scan Rechnung Telekom.pdf",
        "Scan Rechnung Telekom",
        None,
        False,
        id="scan-word-in-real-title",
    ),
    pytest.param(
        "C:\\Users\\anna\\Desktop\\Steuer 2025.pdf", "Steuer 2025", None, False, id="windows-path"
    ),
    pytest.param(
        "uploads/tenant-7/Bewerbung Anschreiben.docx",
        "Bewerbung Anschreiben",
        None,
        False,
        id="posix-path",
    ),
    pytest.param("Meeting Notes.PDF", "Meeting Notes", None, False, id="upper-extension"),
    # Only the last suffix goes; the remaining dot separates words.
    pytest.param("archive.tar.gz", "archive tar", None, False, id="double-extension"),
    # Decision: an all-digit suffix is not an extension (it is a version or a time).
    pytest.param("Angebot v2.1", "Angebot v2.1", None, False, id="digit-suffix-kept"),
    pytest.param(
        "Jahresbericht.backup", "Jahresbericht backup", None, False, id="six-char-suffix-kept"
    ),
    # --- only a date: title is the cleaned stem, placeholder -------------------------
    pytest.param(
        "2026-11-03T14:15:22.json", "2026-11-03T14:15:22", NOV_3, True, id="only-iso-timestamp"
    ),
    pytest.param("___.pdf", "Untitled", None, True, id="nothing-usable"),
    # --- Brother ---------------------------------------------------------------------
    pytest.param("BRN3C2AF4123456_000123.pdf", "BRN3C2AF4123456 000123", None, True, id="brn"),
    pytest.param("BRW0080927AFBCE_000045.pdf", "BRW0080927AFBCE 000045", None, True, id="brw"),
    pytest.param("brn3c2af4123456.pdf", "brn3c2af4123456", None, True, id="brn-no-counter"),
    # --- Canon / HP --------------------------------------------------------------------
    pytest.param("SCAN0001.PDF", "SCAN0001", None, True, id="canon-scan"),
    pytest.param("IMG_0001.pdf", "IMG 0001", None, True, id="canon-img"),
    pytest.param("scan_0001.pdf", "scan 0001", None, True, id="hp-scan-underscore"),
    pytest.param("scan0001.pdf", "scan0001", None, True, id="hp-scan"),
    pytest.param("Scan_20261103_141522.pdf", "Scan 20261103 141522", NOV_3, True, id="hp-smart"),
    pytest.param(
        "Scan 2026-11-03 14.15.22.pdf", "Scan 2026-11-03 14.15.22", NOV_3, True, id="hp-smart-iso"
    ),
    # Day/month order unknown: no issued date is guessed.
    pytest.param(
        "Scan 12-03-2026 10.15.01.pdf",
        "Scan 12-03-2026 10.15.01",
        None,
        True,
        id="scan-ambiguous-dmy",
    ),
    # --- Xerox -------------------------------------------------------------------------
    pytest.param("Scan_20261103141522.pdf", "Scan 20261103141522", NOV_3, True, id="xerox-scan"),
    pytest.param(
        "Xerox Scan_11032026141522.pdf", "Xerox Scan 11032026141522", None, True, id="xerox-mmdd"
    ),
    pytest.param(
        "DOC031126-03112026141522.pdf", "DOC031126-03112026141522", None, True, id="xerox-doc"
    ),
    # --- Ricoh / Fujitsu ScanSnap --------------------------------------------------------
    pytest.param("20261103141522123.pdf", "20261103141522123", NOV_3, True, id="ricoh-17"),
    pytest.param("20261103_141522.pdf", "20261103 141522", NOV_3, True, id="ricoh-underscore"),
    pytest.param("2026-11-03_14-15-22.pdf", "2026-11-03 14-15-22", NOV_3, True, id="ricoh-iso"),
    pytest.param("20261103141522.pdf", "20261103141522", NOV_3, True, id="scansnap"),
    pytest.param(
        "2026_11_03_14_15_22.pdf", "2026 11 03 14 15 22", NOV_3, True, id="scansnap-underscores"
    ),
    # --- Kyocera / Konica Minolta --------------------------------------------------------
    # Counter and timestamp run together; not split, so no issued date.
    pytest.param(
        "doc00123420261103141522.pdf", "doc00123420261103141522", None, True, id="kyocera"
    ),
    pytest.param("SKM_C25826110314150.pdf", "SKM C25826110314150", None, True, id="konica-skm"),
    pytest.param("KM_C36826110314150.pdf", "KM C36826110314150", None, True, id="konica-km"),
    # --- Epson ---------------------------------------------------------------------------
    pytest.param("EPSON001.PDF", "EPSON001", None, True, id="epson"),
    pytest.param("img20261103_14152201.pdf", "img20261103 14152201", NOV_3, True, id="epson-img"),
    # --- phone apps and generic auto-names -----------------------------------------------
    pytest.param("Scanned Document.pdf", "Scanned Document", None, True, id="ios-scanned"),
    pytest.param("Scanned Document 2.pdf", "Scanned Document 2", None, True, id="ios-scanned-2"),
    # Decision: month-name dates are not parsed.
    pytest.param(
        "Scan 3 Nov 2026 at 14.15.pdf", "Scan 3 Nov 2026 at 14.15", None, True, id="ios-notes"
    ),
    pytest.param("Adobe Scan 03.11.2026.pdf", "Adobe Scan 03.11.2026", NOV_3, True, id="adobe"),
    pytest.param(
        "CamScanner 11-03-2026 14.15.pdf",
        "CamScanner 11-03-2026 14.15",
        None,
        True,
        id="camscanner",
    ),
    pytest.param("Genius Scan 20261103.pdf", "Genius Scan 20261103", NOV_3, True, id="genius"),
    pytest.param(
        "Office Lens 20261103-141522.pdf",
        "Office Lens 20261103-141522",
        NOV_3,
        True,
        id="office-lens",
    ),
    pytest.param("Document 12.pdf", "Document 12", None, True, id="document-n"),
    pytest.param("Untitled.pdf", "Untitled", None, True, id="untitled"),
    pytest.param("New Document.docx", "New Document", None, True, id="new-document"),
    pytest.param("Dokument.pdf", "Dokument", None, True, id="dokument"),
    pytest.param("Scan.pdf", "Scan", None, True, id="scan"),
    pytest.param("Scan 2.pdf", "Scan 2", None, True, id="scan-2"),
    pytest.param("Scan_0001.pdf", "Scan 0001", None, True, id="scan-underscore"),
    pytest.param("scan (3).pdf", "scan (3)", None, True, id="scan-duplicate"),
    pytest.param("PXL_20261103_141522123.jpg", "PXL 20261103 141522123", NOV_3, True, id="pixel"),
    pytest.param("IMG_20261103_141522.jpg", "IMG 20261103 141522", NOV_3, True, id="android"),
    pytest.param("IMG_1234.HEIC", "IMG 1234", None, True, id="iphone"),
    pytest.param("DSC01234.JPG", "DSC01234", None, True, id="camera"),
    pytest.param("image0001.png", "image0001", None, True, id="image-n"),
    pytest.param(
        "3f2b6c1e-8a4d-4c1b-9f6e-2d7a1b3c4e5f.pdf",
        "3f2b6c1e-8a4d-4c1b-9f6e-2d7a1b3c4e5f",
        None,
        True,
        id="uuid",
    ),
    pytest.param("2026-11-03.pdf", "2026-11-03", NOV_3, True, id="bare-date"),
    pytest.param("03.11.2026.pdf", "03.11.2026", NOV_3, True, id="bare-dotted-date"),
    pytest.param("0001.pdf", "0001", None, True, id="counter"),
    pytest.param("00042.tif", "00042", None, True, id="counter-5"),
    # Placeholders keep the date rules: future and impossible dates are not issued dates.
    pytest.param(
        "Scan_20261224_101500.pdf", "Scan 20261224 101500", None, True, id="placeholder-future"
    ),
    pytest.param(
        "IMG_20261399_101500.jpg", "IMG 20261399 101500", None, True, id="placeholder-invalid"
    ),
]


@pytest.mark.parametrize(("name", "title", "issued", "placeholder"), CASES)
def test_parse_filename(name: str, title: str, issued: date | None, placeholder: bool) -> None:
    """Each real-world file name yields the expected title, issued date and placeholder flag."""
    assert parse_filename(name, today=TODAY) == FilenameInfo(title, issued, placeholder)


def test_table_is_large_enough() -> None:
    """The table keeps covering at least 40 real-world names."""
    assert len(CASES) >= 40


def test_nfd_and_nfc_names_give_identical_results() -> None:
    """macOS NFD names produce exactly the NFC title."""
    nfc = "Bescheinigung Übungsleiterpauschale für Jörg.pdf"
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfd != nfc
    assert parse_filename(nfd, today=TODAY) == parse_filename(nfc, today=TODAY)
    assert parse_filename(nfd, today=TODAY).title == "Bescheinigung Übungsleiterpauschale für Jörg"


def test_long_title_is_cut_at_word_boundary() -> None:
    """Titles longer than 200 characters are cut after the last whole word."""
    words = [f"Wort{i:03d}" for i in range(60)]  # 7 chars + space each
    info = parse_filename("_".join(words) + ".pdf", today=TODAY)
    assert len(info.title) <= MAX_TITLE_LENGTH
    assert info.title.split(" ") == words[: len(info.title.split(" "))]
    assert len(info.title) > MAX_TITLE_LENGTH - len("Wort000 ")
    assert info.placeholder is False


def test_long_title_on_exact_boundary_keeps_all_fitting_words() -> None:
    """A word ending exactly at character 200 is kept whole."""
    title = "x" * 199 + "y"
    assert len(title) == MAX_TITLE_LENGTH
    assert parse_filename(f"{title} Anhang.pdf", today=TODAY).title == title


def test_long_single_word_is_hard_cut() -> None:
    """A title without spaces is cut hard at 200 characters."""
    assert parse_filename("A" * 300 + ".pdf", today=TODAY).title == "A" * MAX_TITLE_LENGTH


def test_default_today_is_the_current_date() -> None:
    """Without today, past dates are issued dates and far-future ones are not."""
    assert parse_filename("2001-02-03 Altvertrag.pdf").issued == date(2001, 2, 3)
    assert parse_filename("2999-01-01 Plan.pdf").title == "2999-01-01 Plan"


def test_extra_patterns_make_names_placeholders() -> None:
    """Config patterns are full-match and case-insensitive, on top of the built-ins."""
    rules = TitleRules([r"Posteingang \d+", r"Fax_\d{8}"])
    assert parse_filename("posteingang 17.pdf", rules, TODAY).placeholder is True
    assert parse_filename("FAX_20261103.pdf", rules, TODAY) == FilenameInfo(
        "FAX 20261103", NOV_3, True
    )
    # Full match only: a longer meaningful name is not swallowed.
    assert parse_filename("Posteingang 17 Mahnung.pdf", rules, TODAY).placeholder is False
    # Built-ins still apply, and the default rules know nothing of the extras.
    assert parse_filename("IMG_1234.jpg", rules, TODAY).placeholder is True
    assert parse_filename("Posteingang 17.pdf", DEFAULT_RULES, TODAY).placeholder is False


def test_extra_patterns_match_the_nfc_stem() -> None:
    """Extra patterns match NFC stems, whichever normal form either side was written in."""
    rules = TitleRules([unicodedata.normalize("NFD", r"Kündigung \d+")])
    assert parse_filename("Ku\u0308ndigung 3.pdf", rules, TODAY).placeholder is True
    assert parse_filename("Kündigung 3.pdf", rules, TODAY).placeholder is True


@pytest.mark.parametrize("pattern", [r"Scan_(\d+", r"[a-", r"a{99999999999}"])
def test_broken_extra_pattern_raises_value_error_naming_it(pattern: str) -> None:
    """A pattern that does not compile raises ValueError quoting the pattern."""
    with pytest.raises(ValueError, match=re.escape(repr(pattern))):
        TitleRules(["Posteingang", pattern])


def test_single_string_instead_of_list_is_rejected() -> None:
    """A lone string is refused rather than split into one pattern per character."""
    with pytest.raises(TypeError, match="not a str"):
        TitleRules("Posteingang")


def test_filename_info_is_immutable() -> None:
    """FilenameInfo is frozen so results can be shared safely."""
    info = parse_filename("Rechnung.pdf", today=TODAY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.title = "x"  # type: ignore[misc]


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    "name",
    [
        "Scan" + " Nov. at" * 3000 + " Rechnung",  # once exponential: "Nov." parsed two ways
        "scan" + " 1" * 5000 + "x",
        "1 " * 10000 + "x",
        "a-" * 10000,
    ],
    ids=["month-dots", "scan-counters", "digit-runs", "hyphens"],
)
def test_long_hostile_names_parse_quickly(name: str) -> None:
    """Long near-miss names do not trigger catastrophic regex backtracking."""
    assert len(parse_filename(name, today=TODAY).title) <= MAX_TITLE_LENGTH
