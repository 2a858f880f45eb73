"""Titles read from OCR text: subject lines first, else the first line that reads like one."""

from __future__ import annotations

import pytest

from worker.analysis.content_title import title_from_text

LETTER = """Telekom Deutschland GmbH · Postfach 2000 · 53105 Bonn
Herrn
Max Mustermann
Musterstraße 12
12345 Berlin

Bonn, den 03.11.2026

Betreff: Kündigung Mobilfunkvertrag

Sehr geehrter Herr Mustermann,
wir bestätigen Ihre Kündigung.
"""


def test_betreff_line_is_the_title() -> None:
    """A letter's "Betreff:" line wins over everything above it."""
    assert title_from_text(LETTER) == "Kündigung Mobilfunkvertrag"


@pytest.mark.parametrize(
    ("text", "title"),
    [
        pytest.param("Betr.: Ihre Anfrage zur Rente", "Ihre Anfrage zur Rente", id="betr"),
        pytest.param("BETREFF : Mahnung", "Mahnung", id="capitals-and-space"),
        pytest.param("Subject: Quarterly report Q3", "Quarterly report Q3", id="subject"),
        pytest.param("Re: Your account statement", "Your account statement", id="re-line"),
        pytest.param("Betreff: AW: WG: Fwd: Angebot Dach", "Angebot Dach", id="reply-prefixes"),
        pytest.param("Subject: RE[2]: Meeting notes", "Meeting notes", id="counted-reply"),
        pytest.param(
            "Betreff:\nAngebot Küchenmodernisierung",
            "Angebot Küchenmodernisierung",
            id="label-alone-subject-below",
        ),
        pytest.param(
            "Firma Muster\nBetreff: „Mietvertrag Wohnung 3“.",
            "Mietvertrag Wohnung 3",
            id="quotes-and-full-stop",
        ),
    ],
)
def test_subject_lines(text: str, title: str) -> None:
    """Subject labels and reply/forward prefixes are removed, the subject kept."""
    assert title_from_text(text) == title


def test_subject_that_says_nothing_falls_back_to_first_line() -> None:
    """A subject that is only a reference ("Re: Ihr Schreiben vom …") is no title."""
    text = "Re: Ihr Schreiben vom 01.10.2026\nRechnung Nr. 2026-001\nText"
    assert title_from_text(text) == "Rechnung Nr. 2026-001"
    text = "Betreff: Ihre Anfrage vom 1. Oktober 2026\nRechnung Nr. 2026-001"
    assert title_from_text(text) == "Rechnung Nr. 2026-001"


def test_subject_that_refers_to_a_letter_and_says_more_is_kept() -> None:
    """A subject naming a letter ("Ihre Rechnung vom …") and more is kept."""
    text = "Betreff: Ihre Rechnung vom 01.10.2026 Nr. 4711 Widerspruch"
    assert title_from_text(text) == "Ihre Rechnung vom 01.10.2026 Nr. 4711 Widerspruch"


def test_address_blocks_dates_and_salutations_are_skipped() -> None:
    """Recipient address, postcode, place and date, salutation: none is a title."""
    text = (
        "Frau\nErika Muster\nAm Markt 5\nD-12345 Musterstadt\n"
        "Musterstadt, 3. November 2026\nSehr geehrte Frau Muster,\n"
        "Jahresverbrauchsabrechnung 2026\n"
    )
    assert title_from_text(text) == "Jahresverbrauchsabrechnung 2026"


@pytest.mark.parametrize(
    "noise",
    [
        pytest.param("Seite 1 von 3", id="page-marker"),
        pytest.param("Page 2 of 7", id="page-marker-en"),
        pytest.param("- 2 -", id="page-number"),
        pytest.param("03.11.2026", id="date"),
        pytest.param("Datum: Montag, 3. November 2026", id="labelled-date"),
        pytest.param("Berlin, den 03.11.2026", id="place-and-date"),
        pytest.param("12345 67890", id="numbers"),
        pytest.param("Musterstraße 12", id="street"),
        pytest.param("Hauptstr. 1-3", id="street-abbreviated"),
        pytest.param("12345 Berlin", id="postcode"),
        pytest.param("Tel. 030 123456", id="phone"),
        pytest.param("Fax: 030 123457", id="fax"),
        pytest.param("info@example.de", id="email"),
        pytest.param("www.example.de", id="url"),
        pytest.param("https://example.de/kontakt", id="https"),
        pytest.param("Kundennummer: 4711", id="reference"),
        pytest.param("Ihr Zeichen: AB/12", id="reference-sign"),
        pytest.param("Ihre Nachricht vom 12.10.2026", id="answered-letter"),
        pytest.param("IBAN DE02 1203 0000 0000 2020 51", id="iban"),
        pytest.param("Sehr geehrte Damen und Herren,", id="salutation"),
        pytest.param("Mit freundlichen Grüßen", id="closing"),
        pytest.param("Ab", id="too-short"),
        pytest.param("~~ ., ;; ’’ i |", id="ocr-specks"),
        pytest.param("lll Il1 rn", id="ocr-letters-without-a-word"),
        pytest.param("Stadtwerke GmbH · Postfach 10 · 12345 Berlin", id="sender-line"),
    ],
)
def test_noise_lines_are_skipped(noise: str) -> None:
    """Lines that only carry dates, numbers, addresses, contacts or OCR specks are skipped."""
    assert title_from_text(f"{noise}\nAngebot Dachsanierung") == "Angebot Dachsanierung"


def test_first_meaningful_line_is_cleaned() -> None:
    """Bullets, stray punctuation and runs of spaces go; inner punctuation stays."""
    text = "•  Mietvertrag   (Entwurf) —\nmehr"
    assert title_from_text(text) == "Mietvertrag (Entwurf)"


def test_abbreviation_keeps_its_dot() -> None:
    """A full stop after a word goes, an abbreviation's stays."""
    assert title_from_text("Praxis Dr. med.") == "Praxis Dr. med."
    assert title_from_text("Die Kündigung wird bestätigt.") == "Die Kündigung wird bestätigt"


def test_long_title_is_cut_at_a_word_with_ellipsis() -> None:
    """A long line is cut at a word boundary to at most max_length, with "…"."""
    subject = "Betreff: Eine sehr lange Betreffzeile, die irgendwo abgeschnitten werden muss"
    title = title_from_text(subject, max_length=30)
    assert title == "Eine sehr lange Betreffzeile…"
    assert title is not None and len(title) <= 30


def test_one_long_word_is_cut_hard() -> None:
    """Without a space to cut at, the word itself is cut."""
    title = title_from_text("Donaudampfschifffahrtsgesellschaftskapitän", max_length=10)
    assert title == "Donaudamp…"


def test_nothing_meaningful_is_none() -> None:
    """Text with no usable line (or no text at all) gives None, not a bad title."""
    assert title_from_text("") is None
    assert title_from_text("Seite 1 von 2\n03.11.2026\n12345\n") is None


def test_only_the_top_of_the_text_is_read() -> None:
    """A heading after hundreds of noise lines is not taken (and a huge text stays cheap)."""
    assert title_from_text("12345\n" * 10_000 + "Angebot Dach") is None


def test_megabyte_on_one_line_stays_cheap() -> None:
    """OCR text without line breaks is one huge line; it is still read in linear time."""
    text = "Telekom GmbH · Postfach 2000 · 53105 Bonn, " * 25_000
    # Linear: a quadratic scan of these lines would not finish within the CI run.
    assert title_from_text("~ ·, " * 200_000) is None
    assert title_from_text(text) is None


def test_max_length_must_be_positive() -> None:
    """max_length 0 is a programming error."""
    with pytest.raises(ValueError, match="max_length"):
        title_from_text("Angebot", max_length=0)
