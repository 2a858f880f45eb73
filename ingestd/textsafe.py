"""One rule for text that came from outside: file names, tenant and account names,
barcodes, document text.

Such text may hold bytes that are not UTF-8 (a file name decoded with ``surrogateescape``
carries them as lone surrogates), NUL, line breaks, other control characters and
invisible characters that steer a display (bidi overrides, zero-width, U+2028). Each is
written the same way everywhere it is recorded or shown: an undecodable byte as
``\\xNN``, a control, format or line/paragraph separator character (Unicode categories
Cc, Cf, Zl, Zp) as its Python escape (``\\n``, ``\\r``, ``\\t``, ``\\x00``, ``\\x7f``,
``\\x85``, ``\\u202e``, ``\\u2028``). Spaces of any script stay (a folder name with an
ideographic space is a name, not an attack). A backslash itself stays as it is: the
escapes are for people and for safety, not a reversible encoding.

- ``recordable``: what the database (text, JSONB) and a JSON file can hold, changed as
  little as possible: only undecodable bytes and NUL are escaped; line breaks stay (JSON
  escapes them).
- ``escaped``: every control and invisible format character escaped too: for a log line, a
  ``.error.txt`` note, a header, a notification's text. Never a raw CR, LF or TAB.
- ``shown``: ``escaped`` and cut to a length, for one line of a summary.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import overload

ELLIPSIS = "…"
# Unicode categories that are escaped: controls, format characters (bidi overrides,
# zero-width), line and paragraph separators. (Surrogates are bytes, escaped before.)
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def bytes_escaped(text: str) -> str:
    """``text`` with its undecodable bytes (surrogate escapes) written as ``\\xNN``:
    what every string sent to the database becomes (ingestd/db/database.py), so a name
    typed on a command line finds the name stored from a file system."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


def _escape_char(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


def escaped(text: str) -> str:
    """``text`` as it may be shown or put in a header: undecodable bytes as ``\\xNN`` and
    every control or invisible format character (CR/LF/TAB, NUL, DEL, C1, bidi overrides,
    zero-width, U+2028/2029) as its escape; text of any script, its spaces included,
    unchanged."""
    if text.isprintable():
        return text
    text = bytes_escaped(text)
    return "".join(
        _escape_char(c) if unicodedata.category(c) in _ESCAPED_CATEGORIES else c for c in text
    )


def shown(text: object, limit: int = 300) -> str:
    """``text`` escaped on one line, stripped, cut at ``limit`` characters with "…"."""
    out = escaped(str(text)).strip()
    return out if len(out) <= limit else out[: max(limit - 1, 0)].rstrip() + ELLIPSIS


def recordable_text(text: str) -> str:
    """``text`` as Postgres text and a UTF-8 JSON file can hold it: undecodable bytes and
    NUL escaped, everything else kept."""
    if text.isascii() and "\x00" not in text:
        return text
    return bytes_escaped(text).replace("\x00", "\\x00")


@overload
def recordable(value: str) -> str: ...
@overload
def recordable(value: object) -> object: ...
def recordable(value: object) -> object:
    """``value`` (a string, or a JSON-like structure of them) as the database and JSON can
    hold it: every string in it, keys too, through ``recordable_text``."""
    if isinstance(value, str):
        return recordable_text(value)
    if isinstance(value, Mapping):
        return {recordable_text(str(k)): recordable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [recordable(v) for v in value]
    return value
