"""Issued dates read from OCR text: formats, plausibility, labels, OCR noise."""

from __future__ import annotations

from datetime import date

import pytest

from worker.analysis.dates import date_from_text

# Fixed so that "future" does not depend on when the tests run.
TODAY = date(2026, 11, 30)
NOV_3 = date(2026, 11, 3)

# (text, issued date or None)
CASES = [
    # --- German numeric ---------------------------------------------------------------
    pytest.param("03.11.2026", NOV_3, id="dotted"),
    pytest.param("Bonn 3.11.2026", NOV_3, id="dotted-single-digit-day"),
    pytest.param("am 3. 11. 2026 erhalten", NOV_3, id="dotted-spaced"),
    pytest.param("03.11.26", NOV_3, id="two-digit-year"),
    pytest.param("Kassenbon 12.05.85 Filiale", date(1985, 5, 12), id="two-digit-year-1900s"),
    pytest.param("Abschnitt 3.11.26 der Satzung", None, id="two-digit-year-unpadded-is-no-date"),
    # --- month names --------------------------------------------------------------------
    pytest.param("3. November 2026", NOV_3, id="de-month"),
    pytest.param("3. Nov. 2026", NOV_3, id="de-month-abbrev"),
    pytest.param("Köln, 03. März 2026", date(2026, 3, 3), id="maerz-umlaut"),
    pytest.param("03. Maerz 2026", date(2026, 3, 3), id="maerz-ae"),
    pytest.param("03. MÄRZ 2026", date(2026, 3, 3), id="maerz-capitals"),
    pytest.param("1. Jänner 2026", date(2026, 1, 1), id="jaenner-austrian"),
    pytest.param("17. Dez. 2025", date(2025, 12, 17), id="dez"),
    pytest.param("3 November 2026", NOV_3, id="en-dmy"),
    pytest.param("3rd of November 2026", NOV_3, id="en-ordinal"),
    pytest.param("November 3, 2026", NOV_3, id="en-mdy"),
    pytest.param("Nov 3, 2026", NOV_3, id="en-mdy-abbrev"),
    pytest.param("Nov. 3rd, 2026", NOV_3, id="en-mdy-ordinal"),
    pytest.param("03-Nov-2026", NOV_3, id="erp-dashed-month"),
    pytest.param("Mainz 2026 Jahresbericht", None, id="mai-in-mainz-is-no-month"),
    # --- ISO and slashes ------------------------------------------------------------------
    pytest.param("2026-11-03", NOV_3, id="iso"),
    pytest.param("Generated 2026-11-03T14:15:22Z", NOV_3, id="iso-timestamp"),
    pytest.param("2026/11/03", NOV_3, id="iso-slashes"),
    pytest.param("03/11/2026", NOV_3, id="slash-day-first"),
    pytest.param("11/23/2026", date(2026, 11, 23), id="slash-month-first-when-day-cannot-be"),
    pytest.param("03-11-2026", NOV_3, id="dashed-day-first"),
    # --- OCR noise ------------------------------------------------------------------------
    pytest.param("Datum 03 .11.2026", NOV_3, id="ocr-space-before-dot"),
    pytest.param("O3.11.2026", NOV_3, id="ocr-letter-o"),
    pytest.param("03.1l.2026", NOV_3, id="ocr-letter-l"),
    pytest.param("Typ XO1.O1.2026", None, id="ocr-letters-inside-a-word-are-no-date"),
    pytest.param("Oo.OI.2026", None, id="ocr-too-many-letters"),
    pytest.param("Datum:\u00a003.11.2026", NOV_3, id="no-break-space"),
    pytest.param("０３.１１.２０２６", NOV_3, id="full-width-digits"),
    # --- plausibility ---------------------------------------------------------------------
    pytest.param("Gültig bis 31.12.2027", None, id="future-refused"),
    pytest.param("geboren 01.01.1899", None, id="before-1900-refused"),
    pytest.param("31.02.2026 oder 01.03.2026", date(2026, 3, 1), id="invalid-day-skipped"),
    pytest.param("13.13.2026", None, id="invalid-month"),
    pytest.param("01.12.2026", date(2026, 12, 1), id="tomorrow-tolerated-for-time-zones"),
    pytest.param("Preis 1.234.567,89 EUR", None, id="amount-is-no-date"),
    pytest.param("Art.-Nr. 123.11.2026", None, id="no-date-inside-a-longer-number"),
    pytest.param("", None, id="empty"),
    pytest.param("Keine Daten hier", None, id="no-date"),
    # --- reading order and labels ---------------------------------------------------------
    pytest.param("Lieferung 01.10.2026\nAuftrag 02.10.2026", date(2026, 10, 1), id="first-wins"),
    pytest.param(
        "Zeitraum 01.10.2026 - 31.10.2026\nRechnungsdatum: 03.11.2026", NOV_3, id="label-wins"
    ),
    pytest.param("Leistung 01.10.2026\nDatum: 3. November 2026", NOV_3, id="datum-label"),
    pytest.param("Leistung 01.10.2026\nDate: Nov 3, 2026", NOV_3, id="date-label"),
    pytest.param("Leistung 01.10.2026\nDatum: Montag, 03.11.2026", NOV_3, id="label-weekday"),
    pytest.param("Kunde seit 01.01.2010\nRechnungsdatum\n03.11.2026", NOV_3, id="label-line-above"),
    pytest.param("Ihr Schreiben vom 01.10.2026\nBerlin, den 03.11.2026", NOV_3, id="place-den"),
    pytest.param(
        "Ihr Schreiben vom 01.10.2026\nFrankfurt am Main, 3. November 2026", NOV_3, id="place"
    ),
    pytest.param(
        "Lieferung erfolgt am Montag, 01.10.2026\nZahlung 03.11.2026",
        date(2026, 10, 1),
        id="sentence-is-no-place",
    ),
    pytest.param(
        "Due date: 15.11.2026\nDelivery date: 10.11.2026\nDate: 03.11.2026", NOV_3, id="due-date"
    ),
    pytest.param("Lieferdatum: 01.10.2026\nBelegdatum: 03.11.2026", NOV_3, id="compound-label"),
    pytest.param("Liefer-Datum 01.10.2026\n03.11.2026", date(2026, 10, 1), id="hyphen-compound"),
    pytest.param("Datum: 31.12.2027\nam 03.11.2026", NOV_3, id="future-label-skipped"),
    pytest.param("Kasse 4 03.11.26\nKunde seit 01.01.2010", date(2010, 1, 1), id="full-year-first"),
    pytest.param("Datum 03.11.26\nKunde seit 01.01.2010", NOV_3, id="labelled-short-year"),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_date_from_text(text: str, expected: date | None) -> None:
    """Each snippet yields the issued date a person would read from it."""
    assert date_from_text(text, today=TODAY) == expected


def test_today_defaults_to_the_real_date() -> None:
    """Without `today`, a date in the far future is still refused."""
    assert date_from_text("01.01.2999") is None
    assert date_from_text("01.01.2000") == date(2000, 1, 1)


def test_megabyte_of_text_without_line_breaks_is_fast() -> None:
    """A megabyte of OCR text, one line, thousands of dates: read in linear time."""
    text = "Betrag 12,50 EUR vom 01.10.2026 Mainz " * 30000
    # Linear: a quadratic scan of this line would not finish within the CI run.
    assert date_from_text(text + "Datum: 03.11.2026", today=TODAY) == NOV_3
