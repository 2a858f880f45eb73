"""Turn an uploaded file's name into a document title, an issued date and a placeholder flag.

People name files ("2026-11-03 Rechnung Telekom.pdf"); scanners and phone apps do not
("BRN3C2AF4123456_000123.pdf", "IMG_1234.jpg"). The archive needs a title at once, so we
take the best one the name offers and flag scanner auto-names as *placeholders*: those
may later be replaced by a title read from the OCR text (``derive_title``).

Pure functions, stdlib only: this runs for every upload, before any OCR.
"""

from __future__ import annotations

import datetime
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from ingestd.filenames.scanner_names import AUTO_NAME_PREFIXES, VENDOR_PATTERNS, WORD_SEP

MAX_TITLE_LENGTH = 200
# Shown when a name has no usable character at all (".pdf", "___.pdf").
EMPTY_TITLE = "Untitled"
# Older "dates" in file names are counters or reference numbers, not issue dates.
_MIN_YEAR = 1900


@dataclass(frozen=True, slots=True)
class FilenameInfo:
    title: str  # human title; for placeholders a readable placeholder (the cleaned stem)
    issued: datetime.date | None
    placeholder: bool  # True => title is an auto-name; derive_title may replace it from OCR


# --- placeholder patterns --------------------------------------------------------------

# Month names appear in iOS/Adobe auto-names ("Scan 3 Nov 2026 at 14.15").
MONTH_NAMES = (
    r"(?:jan(?:uary|uar)?|feb(?:ruary|ruar)?|mar(?:ch)?|märz|maerz|apr(?:il)?|ma[iy]"
    r"|jun[ei]?|jul[iy]?|aug(?:ust)?|sept?(?:ember)?|o[ck]t(?:ober)?|nov(?:ember)?"
    r"|de[cz](?:ember)?)"
)
# A number may carry Sharp's "AM"/"PM" (SCAN_12032026_021522PM).
_TAIL_TOKEN = rf"(?:\d+(?:[ap]m)?|{MONTH_NAMES}|at|um)"
# What follows an auto-name prefix: counters, dates, times. Tokens and separators share
# no character, so a name splits into tokens one way only and the regex cannot backtrack
# exponentially on long hostile names. (That is why "Nov." is token "Nov" + separator
# "." rather than a token with an optional dot; only a final dot is allowed extra.)
_AUTO_NAME_TAIL = rf"(?:[ _-]*{_TAIL_TOKEN}(?:[ ._:,-]+{_TAIL_TOKEN})*\.?)?"

_OPAQUE_ID = (
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # UUID
    r"|[0-9a-f]{32,64}"  # bare UUID or hash digest
)

_BUILTIN_PLACEHOLDER_PATTERNS: tuple[str, ...] = (
    # Device names before a timestamp, MAC addresses, sequence codes (scanner_names.py).
    *(pattern for _vendor, pattern in VENDOR_PATTERNS),
    # App and device names, alone or followed by counters/timestamps.
    "(?:"
    + "|".join(WORD_SEP.join(p.split(" ")) for p in AUTO_NAME_PREFIXES)
    + rf"){_AUTO_NAME_TAIL}",
    # Only digits and separators: counters (0001), bare dates and timestamps (Ricoh,
    # Fujitsu ScanSnap: 20261103141522, 2026_11_03_14_15_22, 2026-11-03_14-15-22).
    # Canon imageRUNNER: _20261203_141522 (the name field left empty before the date).
    r"[ _-]*\d+(?:[ ._-]+\d+)*",
    # UUIDs and digests that upload tools use as names.
    _OPAQUE_ID,
)

# Browsers and file managers append " (3)" to duplicates; an auto-name stays one.
_DUPLICATE_SUFFIX = r"(?:\s*\(\d+\))?"

_BUILTIN_PLACEHOLDERS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(f"(?:{p}){_DUPLICATE_SUFFIX}", re.IGNORECASE) for p in _BUILTIN_PLACEHOLDER_PATTERNS
)
_OPAQUE_ID_RE = re.compile(_OPAQUE_ID, re.IGNORECASE)


class TitleRules:
    """Compiled placeholder patterns: the built-in ones plus extra regexes from config."""

    __slots__ = ("_patterns",)

    def __init__(self, extra_placeholder_patterns: Sequence[str] = ()) -> None:
        # A bare string is a Sequence[str] too; iterating it would add one pattern per
        # character, which is never what a config author meant.
        if isinstance(extra_placeholder_patterns, str):
            raise TypeError("extra_placeholder_patterns must be a list of patterns, not a str")
        extra = tuple(_compile_extra(p) for p in extra_placeholder_patterns)
        self._patterns: tuple[re.Pattern[str], ...] = _BUILTIN_PLACEHOLDERS + extra

    def _matches(self, stem: str) -> bool:
        """True if the whole stem is an auto-name."""
        return any(p.fullmatch(stem) for p in self._patterns)


def _compile_extra(pattern: str) -> re.Pattern[str]:
    # Stems are NFC; a pattern typed on macOS may be NFD and would then never match "ü".
    normalised = unicodedata.normalize("NFC", pattern)
    try:
        return re.compile(normalised, re.IGNORECASE)
    except (re.error, OverflowError) as exc:  # OverflowError: a{99999999999}
        raise ValueError(f"invalid placeholder pattern {pattern!r}: {exc}") from exc


DEFAULT_RULES = TitleRules()


# --- dates ----------------------------------------------------------------------------

# Only formats whose field order is unambiguous: ISO order with a separator, compact
# YYYYMMDD, and the German dd.mm.yyyy (dots mean day-first here; US dates use slashes,
# which cannot occur in file names). "11-03-2026" is never guessed.
_ISO = r"(?P<iy>\d{4})(?P<isep>[-_.])(?P<im>\d{1,2})(?P=isep)(?P<iday>\d{1,2})"
_COMPACT = r"(?P<cy>\d{4})(?P<cm>\d{2})(?P<cday>\d{2})"
_DOTTED = r"(?P<dday>\d{1,2})\.(?P<dm>\d{1,2})\.(?P<dy>\d{4})"
_DATE = f"(?:{_ISO}|{_COMPACT}|{_DOTTED})"
_DATE_GROUPS = (("iy", "im", "iday"), ("cy", "cm", "cday"), ("dy", "dm", "dday"))
_TIME = r"(?P<hh>\d{2})(?P<tsep>[-.:]?)(?P<mi>\d{2})(?P=tsep)(?P<ss>\d{2})"
_TIME_SEP = r"[ _T-]*"

_LEADING_DATE = re.compile(_DATE)
_TIME_AFTER_DATE = re.compile(rf"{_TIME_SEP}{_TIME}(?!\d)")
_TRAILING_DATE = re.compile(rf"(?<!\d){_DATE}(?:{_TIME_SEP}{_TIME})?\Z")
# Inside an auto-name, a compact date may run straight into its time and milliseconds
# (Ricoh 20261103141522123); longer digit runs (Kyocera counter+timestamp) are not split.
_AUTO_NAME_DATE = re.compile(rf"(?<!\d)(?:{_ISO}|{_COMPACT}(?:\d{{6,9}})?|{_DOTTED})(?!\d)")


def plausible_date(year: int, month: int, day: int, today: datetime.date) -> datetime.date | None:
    """A real calendar date that can be an issue date, else None."""
    try:
        candidate = datetime.date(year, month, day)
    except ValueError:  # 2026-13-45, 20261399
        return None
    # today + 1 day tolerates time zones; it also caps the year at today.year + 1.
    if candidate.year < _MIN_YEAR or candidate > today + datetime.timedelta(days=1):
        return None
    return candidate


def _date_from_match(match: re.Match[str], today: datetime.date) -> datetime.date | None:
    for year, month, day in _DATE_GROUPS:
        if match.group(year) is not None:
            return plausible_date(
                int(match.group(year)), int(match.group(month)), int(match.group(day)), today
            )
    return None


def _valid_time(match: re.Match[str]) -> bool:
    return (
        int(match.group("hh")) < 24 and int(match.group("mi")) < 60 and int(match.group("ss")) < 60
    )


def _split_leading_date(stem: str, today: datetime.date) -> tuple[datetime.date, str] | None:
    """(issued, rest) if the stem starts with a date (and maybe a time), else None."""
    match = _LEADING_DATE.match(stem)
    if match is None:
        return None
    issued = _date_from_match(match, today)
    if issued is None:
        return None
    rest = stem[match.end() :]
    time = _TIME_AFTER_DATE.match(rest)
    if time is not None and _valid_time(time):
        rest = rest[time.end() :]
    # "202611035 …" is a number that merely starts like a date.
    if rest[:1].isdigit():
        return None
    return issued, rest


def _split_trailing_date(stem: str, today: datetime.date) -> tuple[datetime.date, str] | None:
    """(issued, rest) if the stem ends with a date (and maybe a time), else None."""
    match = _TRAILING_DATE.search(stem)
    if match is None:
        return None
    if match.group("hh") is not None and not _valid_time(match):
        return None
    issued = _date_from_match(match, today)
    if issued is None:
        return None
    return issued, stem[: match.start()]


def _split_edge_date(stem: str, today: datetime.date) -> tuple[datetime.date | None, str]:
    """Take one date off the start (preferred) or the end; dates mid-name are content."""
    split = _split_leading_date(stem, today) or _split_trailing_date(stem, today)
    if split is None:
        return None, stem
    return split


def _find_auto_name_date(stem: str, today: datetime.date) -> datetime.date | None:
    """First unambiguous, plausible date anywhere in an auto-name, else None."""
    # Hex ids contain digit runs that look like dates only by accident.
    if _OPAQUE_ID_RE.fullmatch(stem):
        return None
    for match in _AUTO_NAME_DATE.finditer(stem):
        issued = _date_from_match(match, today)
        if issued is not None:
            return issued
    return None


# --- cleaning -------------------------------------------------------------------------

_EXTENSION = re.compile(r"\.(?=[0-9]*[A-Za-z])[0-9A-Za-z]{1,5}\Z")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_HYPHEN_RUN = re.compile(r"-+")
_DOT_RUN = re.compile(r"\.+")
_WHITESPACE = re.compile(r"\s+")
# Left over at the edges after a date was cut off: "2026-11-03 - Rechnung", "Rechnung_".
_EDGE_JUNK = " -._,;:–—"


def _file_stem(name: str) -> str:
    """Basename without extension, NFC-normalised and stripped."""
    # Some browsers send the client's full path, Windows ones with backslashes.
    base = re.split(r"[/\\]", name)[-1]
    # macOS sends NFD ("u" + combining diaeresis); titles and patterns are compared in NFC.
    base = unicodedata.normalize("NFC", base).strip()
    # An all-digit suffix is far more often a time or version ("at 14.15", "v2.1") than
    # an extension, so an extension needs a letter.
    return _EXTENSION.sub("", base).strip()


def _hyphen_replacement(match: re.Match[str]) -> str:
    # A single hyphen between two letters/digits is part of the word (E-Mail,
    # Müller-Lüdenscheid, 2026-001); everywhere else it separates words.
    text, start, end = match.string, match.start(), match.end()
    inside_word = (
        end - start == 1
        and start > 0
        and end < len(text)
        and text[start - 1].isalnum()
        and text[end].isalnum()
    )
    return "-" if inside_word else " "


def _dot_replacement(match: re.Match[str]) -> str:
    # "Rechnung.Telekom" uses dots as spaces; "v2.1" and "03.11.2026" are numbers, and a
    # dot next to a space ("Dr. Müller") is punctuation.
    text, start, end = match.string, match.start(), match.end()
    before = text[start - 1] if start > 0 else ""
    after = text[end] if end < len(text) else ""
    if not (before.isalnum() and after.isalnum()):
        return match.group()
    if end - start == 1 and before.isdigit() and after.isdigit():
        return "."
    return " "


def _clean(text: str) -> str:
    """Separators to single spaces, word-internal hyphens and number dots kept."""
    text = _CONTROL_CHARS.sub(" ", text)
    text = text.replace("_", " ")
    text = _HYPHEN_RUN.sub(_hyphen_replacement, text)
    text = _DOT_RUN.sub(_dot_replacement, text)
    text = _WHITESPACE.sub(" ", text)
    return text.strip(_EDGE_JUNK)


def cap_title(title: str) -> str:
    """At most MAX_TITLE_LENGTH characters, cut at a word boundary where there is one."""
    if len(title) <= MAX_TITLE_LENGTH:
        return title
    # Include the character after the limit: if it is a space, the cut is on a boundary.
    head, space, _ = title[: MAX_TITLE_LENGTH + 1].rpartition(" ")
    cut = head if space and head else title[:MAX_TITLE_LENGTH]
    return cut.strip(_EDGE_JUNK)


# --- public entry point ---------------------------------------------------------------


def parse_filename(
    name: str, rules: TitleRules = DEFAULT_RULES, today: datetime.date | None = None
) -> FilenameInfo:
    """Title, issued date and placeholder flag for an uploaded file's name."""
    today = today if today is not None else datetime.date.today()
    stem = _file_stem(name)
    placeholder_title = cap_title(_clean(stem)) or EMPTY_TITLE
    if rules._matches(stem):
        return FilenameInfo(placeholder_title, _find_auto_name_date(stem, today), True)
    issued, rest = _split_edge_date(stem, today)
    title = cap_title(_clean(rest))
    if not title:  # the name was only a date (and separators)
        return FilenameInfo(placeholder_title, issued, True)
    return FilenameInfo(title, issued, False)
