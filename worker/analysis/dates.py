"""The issued date of a document, read from its OCR text.

Letters and invoices carry their date near the top, usually after a label ("Datum:",
"Rechnungsdatum", "Date:") or in the German letter form "Berlin, den 3. November 2026".
Other dates in the text are delivery periods, due dates, birth dates or the date of the
letter being answered ("Ihr Schreiben vom …"). So a date right after such a label (or in
the place-and-date form) wins; otherwise the first plausible date in reading order.

Recognised forms (day and month names case-insensitive, German and English):

- ``03.11.2026``, ``3.11.2026``, ``3. 11. 2026`` and OCR noise ``03 .11.2026``
- ``O3.11.2026``: O/o/I/l read for 0/1, only in the strict ``dd.mm.yyyy`` shape, at
  most two of them, and not next to a letter (so words and part numbers never qualify)
- ``03.11.26``: two-digit years only zero-padded and dotted (receipts print them so;
  ``3.11.26`` is far more often a section number), and ranked below every date with a
  four-digit year unless a label points at it. ``yy`` is 20yy unless that is in the
  future, then 19yy.
- ``2026-11-03``, ``2026/11/03``, ``2026.11.03``
- ``3. November 2026``, ``3. Nov. 2026``, ``03. März 2026`` (``Maerz``, ``Marz``,
  ``Mrz``), ``3 November 2026``, ``3rd of November 2026``, ``03-Nov-2026``
- ``November 3, 2026``, ``Nov 3, 2026``, ``Nov. 3rd, 2026``
- ``03/11/2026`` and ``03-11-2026``: ambiguous between German/British day-first and US
  month-first. The default tenant language is German, so day-first; month-first only
  when day-first is impossible (``11/23/2026``).

A date is plausible when it exists (no 31.02.), is not before 1900 and not after today
(one day of slack for time zones) — the same check as for dates in file names.
"""

from __future__ import annotations

import datetime
import re
import unicodedata

from ingestd.filenames.titles import plausible_date

# Month names and abbreviations as OCR reads them; keys are lower case. An optional
# trailing dot is part of the surrounding pattern, not of these names.
_MONTHS: dict[str, int] = {
    "januar": 1,
    "jänner": 1,
    "jaenner": 1,
    "january": 1,
    "jan": 1,
    "jän": 1,
    "februar": 2,
    "feber": 2,
    "february": 2,
    "feb": 2,
    "märz": 3,
    "maerz": 3,
    "marz": 3,
    "march": 3,
    "mär": 3,
    "mrz": 3,
    "mar": 3,
    "april": 4,
    "apr": 4,
    "mai": 5,
    "may": 5,
    "juni": 6,
    "june": 6,
    "jun": 6,
    "juli": 7,
    "july": 7,
    "jul": 7,
    "august": 8,
    "aug": 8,
    "september": 9,
    "sept": 9,
    "sep": 9,
    "oktober": 10,
    "october": 10,
    "okt": 10,
    "oct": 10,
    "november": 11,
    "nov": 11,
    "dezember": 12,
    "december": 12,
    "dez": 12,
    "dec": 12,
}
# Longest first, so that "Juni" is not read as "Jun" + "i".
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_WEEKDAY = (
    r"(?:montag|dienstag|mittwoch|donnerstag|freitag|samstag|sonnabend|sonntag"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|mo|di|mi|do|fr|sa|so|mon|tue|wed|thu|fri|sat|sun)"
)
# Spaces inside a date never cross a line: a date split over lines is two fragments.
_SP = r"[ \t]"
_NOT_LETTER_BEFORE = r"(?<![^\W\d_])"
_NOT_LETTER_AFTER = r"(?![^\W\d_])"
_ORDINAL = r"(?:st|nd|rd|th)?"

_ISO = r"(?<![\d./-])(?P<iy>\d{4})(?P<isep>[-./])(?P<im>\d{1,2})(?P=isep)(?P<id>\d{1,2})(?!\d)"
_NAMED_DMY = (
    rf"(?<![\d.])(?P<nd>\d{{1,2}}){_ORDINAL}{_SP}*[.-]?{_SP}*(?:of{_SP}+)?"
    rf"(?P<nm>{_MONTH})\.?{_NOT_LETTER_AFTER}{_SP}*[-,]?{_SP}*(?P<ny>\d{{4}})(?!\d)"
)
_NAMED_MDY = (
    rf"{_NOT_LETTER_BEFORE}(?P<um>{_MONTH})\.?{_SP}+(?P<ud>\d{{1,2}}){_ORDINAL},?{_SP}+"
    rf"(?P<uy>\d{{4}})(?!\d)"
)
_DOTTED = (
    rf"(?<![\d.])(?P<dd>\d{{1,2}}){_SP}?\.{_SP}?(?P<dm>\d{{1,2}}){_SP}?\.{_SP}?(?P<dy>\d{{4}})"
    r"(?!\d)"
)
# OCR reads 0 as O/o and 1 as I/l; only in the full dd.mm.yyyy shape (checked further in
# _ocr_digits). The dotted form above comes first, so clean dates never get here.
_OCR_DIGIT = "[0-9OoIl]"
_DOTTED_OCR = (
    rf"(?<![\w.])(?P<od>{_OCR_DIGIT}{{2}})\.(?P<om>{_OCR_DIGIT}{{2}})\.(?P<oy>{_OCR_DIGIT}{{4}})"
    r"(?![\w]|\.\d)"
)
_DOTTED_SHORT = r"(?<![\d.])(?P<sd>\d{2})\.(?P<sm>\d{2})\.(?P<sy>\d{2})(?!\d|\.\d)"
_SLASHED = r"(?<![\d./-])(?P<a>\d{1,2})(?P<asep>[/-])(?P<b>\d{1,2})(?P=asep)(?P<ay>\d{4})(?!\d)"

# Every form starts with a digit, a letter OCR mistakes for one, or a month's initial;
# checking that first halves the scan time of a long text.
_FIRST_CHAR = "[0-9OIl" + "".join(sorted({m[0] for m in _MONTHS})) + "]"
# One alternation scanned once, leftmost first; at one position the more specific forms
# are tried first.
DATE_PATTERN = re.compile(
    f"(?={_FIRST_CHAR})(?:"
    + "|".join(
        f"(?:{p})"
        for p in (_ISO, _NAMED_DMY, _NAMED_MDY, _DOTTED, _DOTTED_OCR, _DOTTED_SHORT, _SLASHED)
    )
    + ")",
    re.IGNORECASE,
)

# Labels whose date is the issue date. Compounds such as "Lieferdatum" or "Fälligkeits-
# datum" do not match (a label must not follow a letter or hyphen); English "<x> date"
# labels are checked against _NOT_ISSUE_DATES.
_LABEL = (
    r"rechnungs-?datum|belegdatum|ausstellungsdatum|dokumentdatum|dokumentendatum"
    r"|briefdatum|bescheiddatum|druckdatum|datum|ausgestellt am|erstellt am|stand"
    r"|invoice date|issue date|date of issue|issued on|issued|statement date|dated|date"
)
_LABEL_BEFORE = re.compile(
    rf"(?:^|(?<=[^\w-]))(?P<label>{_LABEL}){_SP}*[:.\-–]?{_SP}*(?:den{_SP}+)?"
    rf"(?:{_WEEKDAY}\.?,?{_SP}*)?$",
    re.IGNORECASE,
)
_LABEL_LINE = re.compile(rf"(?:^|(?<=[^\w-]))(?:{_LABEL}){_SP}*[:.]?{_SP}*$", re.IGNORECASE)
# "Due date: 01.12.2026" is a date, but not the one the document was issued on.
_NOT_ISSUE_DATES = frozenset(
    {
        "due",
        "delivery",
        "birth",
        "order",
        "payment",
        "expiry",
        "expiration",
        "start",
        "end",
        "ship",
        "shipping",
        "service",
        "valid",
        "travel",
        "departure",
        "arrival",
    }
)
# "Berlin, den 3. November 2026" / "Frankfurt am Main, 03.11.2026": the date line of a
# German letter. The place is a few capitalised words ("Bad Homburg v. d. Höhe"), so a
# sentence such as "Die Lieferung erfolgt am Montag, 03.11.2026" is not one.
_PLACE_WORD = r"[A-ZÄÖÜ(](?:[^\W\d_]|[.'()-])*"
_PLACE_PARTICLE = r"(?:am|an|der|dem|den|im|in|bei|ob|vor|v\.|d\.|a\.)"
_PLACE_BEFORE = re.compile(
    rf"^{_SP}*{_PLACE_WORD}(?: (?:{_PLACE_WORD}|{_PLACE_PARTICLE})){{0,4}},{_SP}*"
    rf"(?:(?i:den){_SP}+)?(?:(?i:{_WEEKDAY})\.?,?{_SP}*)?$"
)
_WEEKDAY_ONLY = re.compile(rf"^{_SP}*(?:{_WEEKDAY}\.?,?{_SP}*)?$", re.IGNORECASE)
_PREVIOUS_WORD = re.compile(r"([^\W\d_]+)\W*$")

# Candidates are ranked: a labelled date first, then any four-digit-year date, then a
# two-digit-year one; within a rank the first in reading order wins.
_LABELLED, _FULL_YEAR, _SHORT_YEAR = 0, 1, 2


def date_from_text(text: str, today: datetime.date | None = None) -> datetime.date | None:
    """The issued date in OCR ``text``: a labelled date, else the first plausible one."""
    today = today if today is not None else datetime.date.today()
    # NFKC: no-break spaces, full-width digits and the like become plain ASCII.
    text = unicodedata.normalize("NFKC", text)
    best: tuple[int, datetime.date] | None = None
    for match in DATE_PATTERN.finditer(text):
        found = _date_of(match, today)
        if found is None:
            continue
        date, rank = found
        if _is_labelled(text, match.start()):
            return date  # nothing can outrank the first labelled date
        if best is None or rank < best[0]:
            best = (rank, date)
    return best[1] if best is not None else None


def _date_of(match: re.Match[str], today: datetime.date) -> tuple[datetime.date, int] | None:
    """(date, rank) if ``match`` is a plausible date, else None."""
    g = match.group
    if g("iy") is not None:
        return _ranked(plausible_date(int(g("iy")), int(g("im")), int(g("id")), today))
    if g("nd") is not None:
        month = _MONTHS[g("nm").lower()]
        return _ranked(plausible_date(int(g("ny")), month, int(g("nd")), today))
    if g("um") is not None:
        month = _MONTHS[g("um").lower()]
        return _ranked(plausible_date(int(g("uy")), month, int(g("ud")), today))
    if g("dd") is not None:
        return _ranked(plausible_date(int(g("dy")), int(g("dm")), int(g("dd")), today))
    if g("od") is not None:
        digits = _ocr_digits(g("od") + g("om") + g("oy"))
        if digits is None:
            return None
        day, month, year = int(digits[:2]), int(digits[2:4]), int(digits[4:])
        return _ranked(plausible_date(year, month, day, today))
    if g("sd") is not None:
        yy = int(g("sy"))
        day, month = int(g("sd")), int(g("sm"))
        # The century that does not put the date in the future: 26 -> 2026, 85 -> 1985.
        date = plausible_date(2000 + yy, month, day, today) or plausible_date(
            1900 + yy, month, day, today
        )
        return (date, _SHORT_YEAR) if date is not None else None
    # Slashes and dashes: day-first (German), month-first only if day-first cannot be.
    a, b, year = int(g("a")), int(g("b")), int(g("ay"))
    day_first = plausible_date(year, b, a, today)
    if day_first is not None:
        return day_first, _FULL_YEAR
    return _ranked(plausible_date(year, a, b, today) if b > 12 else None)


def _ranked(date: datetime.date | None) -> tuple[datetime.date, int] | None:
    return (date, _FULL_YEAR) if date is not None else None


_OCR_TO_DIGIT = str.maketrans("OoIl", "0011")


def _ocr_digits(raw: str) -> str | None:
    """The digits OCR meant, if at most two characters were misread, else None."""
    misread = sum(not c.isdigit() for c in raw)
    if misread == 0 or misread > 2:
        return None
    return raw.translate(_OCR_TO_DIGIT)


def _is_labelled(text: str, start: int) -> bool:
    """True if a label or a "Place, den" precedes the date at ``start``."""
    line_start = text.rfind("\n", 0, start) + 1
    before = _tail(text, line_start, start)
    match = _LABEL_BEFORE.search(before)
    if match is not None:
        return _is_issue_label(match.group("label"), before[: match.start("label")])
    if start - line_start <= _CONTEXT and _PLACE_BEFORE.match(before):
        return True
    # Tables and forms put the label on the line above: "Rechnungsdatum\n03.11.2026".
    if _WEEKDAY_ONLY.match(before) and line_start > 0:
        previous = _tail(text, text.rfind("\n", 0, line_start - 1) + 1, line_start - 1)
        label = _LABEL_LINE.search(previous)
        if label is not None:
            return _is_issue_label(label.group(), previous[: label.start()])
    return False


# Labels and places are short; looking further back would make a text without line
# breaks (it happens with OCR) quadratic in its number of dates.
_CONTEXT = 80


def _tail(text: str, start: int, end: int) -> str:
    """``text[start:end]``, at most _CONTEXT characters of it, starting at a word."""
    if end - start <= _CONTEXT:
        return text[start:end]
    tail = text[end - _CONTEXT : end]
    return tail[tail.find(" ") + 1 :]


def _is_issue_label(label: str, before: str) -> bool:
    """False for "Due date" and the like: a "date" label qualified by another word."""
    if not label.lower().startswith("date"):
        return True
    word = _PREVIOUS_WORD.search(before)
    return word is None or word.group(1).lower() not in _NOT_ISSUE_DATES
