"""A document title read from its OCR text, for documents whose file name said nothing.

Only used when the file name was a scanner auto-name (``derive_title``). Letters state
their subject after a label ("Betreff: Kündigung Mobilfunkvertrag", "Subject: ..."), so
a subject line wins. Otherwise the first line that reads like a heading: the top of a
page also holds the sender's small print, the recipient's address, dates, reference
numbers, page markers and the salutation, and OCR adds specks read as punctuation; all
of those are skipped. Only the top of the text is read (``_MAX_LINES``): a title further
down is a guess, and the text can be a megabyte.
"""

from __future__ import annotations

import re
import unicodedata

from worker.analysis.dates import DATE_PATTERN

ELLIPSIS = "…"
_MAX_LINES = 200
# A heading is short; OCR text without line breaks is one line of a megabyte.
_MAX_LINE_LENGTH = 1000

# "Betreff:", "Betr.:", "Subject:", and a bare "Re:" line (English letters put the
# subject there). The label may stand alone, with the subject on the next line.
_SUBJECT = re.compile(
    r"^(?:betreff|betr\.?|betrifft|subject|subj\.?|re)[ \t]*:[ \t]*(?P<subject>.*)$", re.IGNORECASE
)
# Reply and forward markers in front of a subject, possibly several: "AW: WG: Fwd:".
_REPLY_PREFIX = re.compile(
    r"^(?:(?:re|aw|antw|wg|wtr|fw|fwd)(?:\[\d+\])?[ \t]*:[ \t]*)+", re.IGNORECASE
)

# Lines that are never a title. Each pattern is matched at the start of a stripped line.
_NEVER_TITLES = [
    # Page markers: "Seite 1 von 3", "Seite 2/3", "Page 1 of 3" ("- 2 -" has no letters).
    r"(?:seite|blatt|page|pg\.?)\s*\d+(?:\s*(?:von|of|/)\s*\d+)?\s*$",
    # Salutations and closings.
    r"(?:sehr\s+geehrte|liebe[rs]?\s|hallo\b|guten\s+tag\b|moin\b|servus\b|grüß\s+gott"
    r"|dear\b|hello\b|hi\b|to\s+whom\b)",
    r"(?:mit\s+freundlichen|freundliche\s+grüße|viele\s+grüße|beste\s+grüße|herzliche"
    r"|hochachtungsvoll|mfg\b|best\s+regards|kind\s+regards|regards\b|sincerely|yours\b)",
    # Contact lines and their labels.
    r"(?:tel(?:efon)?|fon|phone|fax|telefax|mobil|handy|mobile|cell|e-?mail|mail|web"
    r"|internet|homepage|www|https?)\b\.?",
    # E-mail header blocks of printed mails (the subject line is taken before this).
    r"(?:von|an|cc|bcc|gesendet|datum|from|to|sent|date)\s*:",
    # Reference blocks, footers and bank details.
    r"(?:ihre?\s+zeichen|unsere?\s+zeichen"
    r"|aktenzeichen|az\b|kunden-?\s*(?:nr|nummer)|kd\.?-?\s*nr|rechnungs-?\s*(?:nr|nummer)"
    r"|vertrags-?\s*(?:nr|nummer)|steuer-?\s*(?:nr|nummer)|ust\b|iban\b|bic\b|swift\b|blz\b"
    r"|bankverbindung|amtsgericht|registergericht|hrb\b|hra\b|geschäftsführ|sitz\s+der"
    r"|bearbeiter|ansprechpartner|durchwahl|postfach)",
    # Postal addresses: "Musterstraße 12", "Hauptstr. 1-3", "Am Markt 5", "Postfach 1234".
    r"(?:[^\W\d_][\w.-]*\s+){0,3}[\w.-]*(?:straße|strasse|str\.|weg|allee|platz|gasse|ring"
    r"|damm|ufer|chaussee|steig|pfad|markt|hof|berg|park)\s*\d+\s*[a-z]?(?:\s*[-/]\s*\d+\s*[a-z]?)?"
    r"\s*$",
    r"(?:am|an\s+der|auf\s+dem|im|in\s+der|zum|zur)\s+[^\W\d_][\w.-]*\s+\d+\s*[a-z]?\s*$",
    # The recipient: "Herrn", "Frau Erika Muster", "Firma ...".
    r"(?:herrn?|frau|firma|fa\.|familie|eheleute|mr|mrs|ms|messrs)\b",
]
_NEVER_TITLE = re.compile("|".join(f"(?:{p})" for p in _NEVER_TITLES), re.IGNORECASE)
# Postcode and town: "12345 Berlin", "D-12345 Berlin", "A-1010 Wien", "CH-8001 Zürich".
# The lines just above one belong to the same address (name, company, street).
_POSTCODE_LINE = re.compile(
    r"(?:(?:d\s*-\s*)?\d{5}|(?:a|at|ch)\s*-\s*\d{4})\s+[^\W\d_]", re.IGNORECASE
)
_ADDRESS_LINES = 3
# The sender line above the address window: "Telekom GmbH · Postfach 2000 · 53105 Bonn"
# (a separator and a postcode with its town; "Gutschrift über 10000 Euro" is no address).
# Two searches, not one regex with ".*" between them: that is quadratic on long lines.
_POSTCODE_TOWN = re.compile(r"(?<!\d)\d{5}\s+[^\W\d_]")
_SEPARATOR = re.compile(r"[·•|,–]| - ")
_EMAIL_OR_URL = re.compile(r"\S@[^\s@]+\.\w|https?://|www\.\S", re.IGNORECASE)
_PLACE_AND_DATE = re.compile(r"^[^\W\d_][^\d,:]{0,40},\s*(?:den\s+)?$", re.IGNORECASE)
# What may stand next to a date on a line that is only a date: "Datum: Montag, den".
_DATE_FILLER = re.compile(
    r"(?:datum|date|stand|den|vom|am|on|montag|dienstag|mittwoch|donnerstag|freitag"
    r"|samstag|sonnabend|sonntag|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|[\W\d_])*",
    re.IGNORECASE,
)
# "Ihr Schreiben vom 01.10.2026": the letter this one answers, not what it is about.
_ANSWERED_LETTER = re.compile(r"ihre?\s+[^\W\d_]+\s+vom\b(?P<rest>.*)", re.IGNORECASE)
_VOWELS = set("aeiouyäöüáàâéèêíìîóòôúùûAEIOUYÄÖÜÁÀÂÉÈÊÍÌÎÓÒÔÚÙÛ")
_LETTER_RUN = re.compile(r"[^\W\d_]{3,}")

_LEADING_JUNK = " \t-–—_.,;:·•*#|>~=+'\"„“”‚‘’«»"
_TRAILING_JUNK = " \t-–—_,;:·•*#|<~=+'\"„“”‚‘’«»"
# After a word of four letters or more, a number or a closing quote or bracket.
_FULL_STOP = re.compile(r"(?:[^\W\d_]{4}|\d|[\"“”’»)])\.$")
_WHITESPACE = re.compile(r"\s+")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def title_from_text(text: str, max_length: int = 128) -> str | None:
    """A title from OCR ``text``: its subject line, else its first meaningful line."""
    if max_length < 1:
        raise ValueError("max_length must be at least 1")
    lines = _top_lines(text)
    subject = _subject(lines)
    if subject is not None:
        return _cap(subject, max_length)
    postcodes = [i for i, line in enumerate(lines) if _POSTCODE_LINE.match(line)]
    for i, line in enumerate(lines):
        if _SUBJECT.match(line) or any(i <= p <= i + _ADDRESS_LINES for p in postcodes):
            continue  # a subject line that said nothing, or part of an address
        cleaned = _clean(line)
        if _meaningful(cleaned):
            return _cap(cleaned, max_length)
    return None


def _top_lines(text: str) -> list[str]:
    """The first _MAX_LINES non-blank lines, NFC, stripped, cut at _MAX_LINE_LENGTH."""
    lines = []
    # splitlines: \n, \r, form feeds between pages, and the Unicode separators.
    for raw in text.splitlines():
        raw = raw[:_MAX_LINE_LENGTH]
        line = unicodedata.normalize("NFC", _CONTROL_CHARS.sub(" ", raw).replace("\u00ad", ""))
        line = _WHITESPACE.sub(" ", line).strip()
        if line:
            lines.append(line)
            if len(lines) == _MAX_LINES:
                break
    return lines


def _subject(lines: list[str]) -> str | None:
    """The first subject line's text that is meaningful, reply prefixes removed."""
    for i, line in enumerate(lines):
        match = _SUBJECT.match(line)
        if match is None:
            continue
        subject = match.group("subject")
        if not subject and i + 1 < len(lines):  # "Betreff:" alone, the subject below
            subject = lines[i + 1]
        subject = _clean(_REPLY_PREFIX.sub("", subject))
        if _meaningful(subject):
            return subject
    return None


def _clean(line: str) -> str:
    """Whitespace collapsed, list bullets, quotes and stray punctuation off the edges."""
    line = _WHITESPACE.sub(" ", line).lstrip(_LEADING_JUNK)
    line = line.rstrip(_TRAILING_JUNK)
    # A sentence's full stop goes, an abbreviation's stays ("GmbH & Co.", "Dr. med.").
    if _FULL_STOP.search(line):
        line = line[:-1].rstrip(_TRAILING_JUNK)
    # Brackets survive only in pairs: "(Entwurf)" stays, "Entwurf)" loses its ")".
    if line.count("(") != line.count(")"):
        line = line.strip("()").strip()
    return line


def _meaningful(line: str) -> bool:
    """False for lines that cannot be a title (see the module docstring)."""
    letters = sum(c.isalpha() for c in line)
    if letters < 3:
        return False
    # OCR specks read as punctuation outnumber the letters; a row of a table is mostly
    # digits. "Rechnung Nr. 2026-001" is neither.
    digits = sum(c.isdigit() for c in line)
    visible = sum(not c.isspace() for c in line)
    if visible - letters - digits > letters or letters < visible * 0.3:
        return False
    # "lll Il1", "Mrz": a real heading has a word of three letters with a vowel in it.
    if not any(_VOWELS.intersection(word) for word in _LETTER_RUN.findall(line)):
        return False
    if _NEVER_TITLE.match(line) or _EMAIL_OR_URL.search(line):
        return False
    if _POSTCODE_TOWN.search(line) and _SEPARATOR.search(line):
        return False  # a sender line
    answered = _ANSWERED_LETTER.match(line)
    if answered and not _LETTER_RUN.search(DATE_PATTERN.sub(" ", answered.group("rest"))):
        return False  # nothing but the date follows
    return not _is_date_line(line)


def _is_date_line(line: str) -> bool:
    """True for "3. November 2026", "Datum: Montag, 03.11.2026", "Berlin, den 03.11.2026"."""
    match = DATE_PATTERN.search(line)
    if match is None:
        return False
    before, after = line[: match.start()], line[match.end() :]
    rest = DATE_PATTERN.sub(" ", after)
    if _DATE_FILLER.fullmatch(before) and _DATE_FILLER.fullmatch(rest):
        return True
    return bool(_PLACE_AND_DATE.match(before)) and _DATE_FILLER.fullmatch(rest) is not None


def _cap(title: str, max_length: int) -> str:
    """At most ``max_length`` characters; a cut ends at a word, followed by "…"."""
    if len(title) <= max_length:
        return title
    room = max_length - len(ELLIPSIS)
    head, space, _ = title[: room + 1].rpartition(" ")
    cut = head if space and head else title[:room]
    return cut.rstrip(_TRAILING_JUNK + ".") + ELLIPSIS
