"""Tags given to a document when it is recorded (folder names, source tags, tag barcodes)."""

from __future__ import annotations

import datetime
import re
import unicodedata
from collections.abc import Iterable, Sequence

from ingestd.db.database import Tx
from ingestd.filenames.titles import MONTH_NAMES
from ingestd.intake.items import MAX_TAG_LENGTH
from ingestd.textsafe import escaped


def tag_names(names: Iterable[str]) -> list[str]:
    """The tag names as they are stored: escaped (a folder name's bytes that are not
    UTF-8, a barcode's control characters: ingestd/textsafe.py), stripped, cut to the
    column's 100 characters (or a long folder name would fail the CHECK and the file would
    be retried forever), each once, sorted (so concurrent intakes lock tags alike)."""
    cleaned = (escaped(t).strip()[:MAX_TAG_LENGTH] for t in names)
    return sorted({t for t in cleaned if t})


def link_tags(tx: Tx, tenant_id: int, document_id: int, names: Iterable[str], origin: str) -> None:
    """Create the tenant's tags as needed and link them, inside the caller's transaction
    (intake's own transaction does the same in ``intake_record``, migration 0012)."""
    tags = tag_names(names)
    if not tags:
        return
    params = {"names": tags, "tenant_id": tenant_id, "document_id": document_id, "origin": origin}
    tx.run("tags_ensure", params)
    tx.run("tags_link", params)


# --- folders that only say when -------------------------------------------------------

_YEAR = r"(?:19|20)\d\d"
# A whole date or a year's month on its own: 2026-11-30, 2026_11_30, 2026.11.30, 2026-11,
# 20261130, 30.11.2026, 11.2026 (the orders file names use, see titles.py).
_ISO = re.compile(rf"(?P<y>{_YEAR})(?:(?P<s>[-_.])(?P<m>\d\d?)(?:(?P=s)(?P<d>\d\d?))?)?")
_COMPACT = re.compile(rf"(?P<y>{_YEAR})(?P<m>\d\d)(?P<d>\d\d)")
_DOTTED = re.compile(rf"(?:(?P<d>\d\d?)\.)?(?P<m>\d\d?)\.(?P<y>{_YEAR})")
# Below a year: its month, as a number, a name or both ("11", "Nov", "11 November").
_MONTH_FOLDER = re.compile(
    rf"(?:0?[1-9]|1[0-2])(?:[ _.-]+{MONTH_NAMES})?|{MONTH_NAMES}", re.IGNORECASE
)
# Below a month: its day.
_DAY_FOLDER = re.compile(r"0?[1-9]|[12]\d|3[01]")
# A folder named for a year and what it holds ("Rechnungen 2026", "2026_Steuer"): a tag
# itself, but a month below it is that year's month ("Rechnungen 2026/12").
_NAMED_YEAR = re.compile(rf"(?:.*[ _.-])?{_YEAR}|{_YEAR}[ _.-].*")


def _kind(name: str, above: str | None) -> str | None:
    """What the folder ``name`` says, if it only says when: "year", "month" or "day"
    (below a folder of kind ``above``); else None."""
    for pattern in (_ISO, _COMPACT, _DOTTED):
        match = pattern.fullmatch(name)
        if match is None:
            continue
        month, day = match.group("m"), match.group("d")
        try:
            datetime.date(int(match.group("y")), int(month or 1), int(day or 1))
        except ValueError:  # 2026-13, 20261131
            return None
        return "day" if day else "month" if month else "year"
    if above == "year" and _MONTH_FOLDER.fullmatch(name):
        return "month"
    if above == "month" and _DAY_FOLDER.fullmatch(name):
        return "day"
    return None


def date_folder_flags(parts: Sequence[str]) -> list[bool]:
    """For each folder name of a path (``parts``, top first): whether it only says when -
    a year (``2026``), a month below a year (``2026/11``, ``2026/Nov``) or below a folder
    named for a year (``Rechnungen 2026/12``: the month only), a day below a
    month (``2026/11/30``), a whole date (``2026-11-30``, ``20261130``, ``30.11.2026``)
    or a year's month (``2026-11``). Not ``2026-report``, ``Q4``, or ``11`` on its own."""
    flags = []
    above: str | None = None
    for part in parts:
        name = unicodedata.normalize("NFC", part).strip()
        kind = _kind(name, above)
        flags.append(kind is not None)
        # A year named with words keeps its name as a tag but dates the folder below it.
        above = kind if kind is not None else "year" if _NAMED_YEAR.fullmatch(name) else None
    return flags
