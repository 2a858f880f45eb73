"""``--since``/``--until`` values and ``--name`` globs as every listing takes them
(``documents list``, ``documents find``): one reading of what a helpdesk person types.

A time is a date (``2026-12-04``, local midnight; as ``--until`` the end of that day), a
local date and time (``2026-12-04 08:30``, ``2026-12-04T08:30:15``, or with an offset),
``today``, ``yesterday``, ``now``, or an age (``90m``, ``2h``, ``3d``, ``1w``: that long
before now).
"""

from __future__ import annotations

import argparse
import datetime
import re

from ingestd.textsafe import bytes_escaped

_AGE = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _local_midnight(day: datetime.date) -> datetime.datetime:
    return datetime.datetime.combine(day, datetime.time()).astimezone()


def moment(text: str, *, end_of_day: bool = False) -> datetime.datetime:
    """An aware datetime for ``text`` (see the module); a whole day given as the upper
    bound (``end_of_day``) means the midnight after it. ArgumentTypeError if unreadable."""
    value = text.strip().lower()
    now = datetime.datetime.now().astimezone()
    day: datetime.date | None = None
    if value == "now":
        return now
    if value in ("today", "yesterday"):
        day = now.date() - datetime.timedelta(days=value == "yesterday")
    elif m := _AGE.fullmatch(value):
        return now - datetime.timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        try:
            day = datetime.date.fromisoformat(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not a date: {text!r} ({exc})") from None
    if day is not None:
        return _local_midnight(day + datetime.timedelta(days=1 if end_of_day else 0))
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read the time {text!r}: not a time (a date 2026-12-04, a time "
            "2026-12-04T08:30, today, yesterday, or an age like 30m, 2h, 3d, 1w)"
        ) from None
    return when if when.tzinfo is not None else when.astimezone()


def since(text: str) -> datetime.datetime:
    """``--since``: from this moment on (a date: from its start)."""
    return moment(text)


def until(text: str) -> datetime.datetime:
    """``--until``: before this moment (a date: to its end, the day included)."""
    return moment(text, end_of_day=True)


def like_pattern(glob: str) -> str:
    """A shell glob (``*`` any text, ``?`` one character) as a lower-case LIKE pattern for
    a case-insensitive match, every other character literal (``%``, ``_`` and ``\\``
    escaped). A name without wildcards matches as a part: ``0815`` finds
    ``Scan_0815.pdf``."""
    text = bytes_escaped(glob).lower()  # as the name was stored (ingestd/textsafe.py)
    if "*" not in text and "?" not in text:
        text = f"*{text}*"
    out = []
    for c in text:
        if c == "*":
            out.append("%")
        elif c == "?":
            out.append("_")
        elif c in "%_\\":
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)
