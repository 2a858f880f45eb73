"""The name a handed-out document gets: its original file name made safe for the directory
it is written to (RFC 2047 words decoded, separators and control characters replaced,
NAME_MAX bytes with the extension kept), the searchable PDF's ``.pdf``, and the numbered
variants tried when a name is taken."""

from __future__ import annotations

import email.errors
import email.header
import re
import unicodedata
from collections.abc import Iterator

# Bytes one file name may have on Linux file systems (NAME_MAX).
NAME_MAX = 255
# At most this many "name (n).ext" tried before a directory is called full of clashes.
MAX_CLASH = 1000


# -- names --------------------------------------------------------------------------------
_ENCODED_WORD = re.compile(r"=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=")
_BETWEEN_WORDS = re.compile(r"(?<=\?=)\s+(?==\?)")


def decoded(name: str) -> str:
    """``name`` with its RFC 2047 encoded words (``=?utf-8?q?...?=``, a mail client's way
    of writing a non-ASCII attachment name) decoded, each in place (the space between two
    of them dropped, as RFC 2047 says); a word that does not decode stays as it is."""
    if "=?" not in name:
        return name

    def one(m: re.Match[str]) -> str:
        try:
            return "".join(
                part.decode(charset or "ascii") if isinstance(part, bytes) else part
                for part, charset in email.header.decode_header(m.group(0))
            )
        except (email.errors.HeaderParseError, LookupError, UnicodeError, ValueError):
            return m.group(0)

    return _ENCODED_WORD.sub(one, _BETWEEN_WORDS.sub("", name))


def safe_name(raw: str, fallback: str) -> str:
    """A file name that stays in the directory it is written to: RFC 2047 words decoded,
    undecodable bytes, path separators and control or invisible format characters
    replaced by ``_``, no leading dots or spaces, at most NAME_MAX bytes (the extension
    kept); ``fallback`` when nothing is left."""
    text = decoded(raw)
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    text = unicodedata.normalize("NFC", text)
    text = "".join(
        "_" if c in "/\\" or c == "\ufffd" or unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")
        else c
        for c in text
    )  # fmt: skip
    text = text.strip().lstrip(".").strip()
    if not text or set(text) <= {".", "_", " "}:
        text = fallback
    return fit(text)


def fit(name: str) -> str:
    """``name`` cut to NAME_MAX bytes of UTF-8, its extension kept."""
    if len(name.encode()) <= NAME_MAX:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or len(ext.encode()) > 16:
        stem, ext = name, ""
    suffix = f".{ext}" if ext else ""
    room = NAME_MAX - len(suffix.encode())
    cut = stem.encode()[:room].decode("utf-8", "ignore").rstrip()
    return cut + suffix


def has_extension(name: str) -> bool:
    """Whether ``name`` ends in something a file manager takes for a type (``.pdf``,
    ``.tiff``), not just any dot (``_.._etc_passwd``)."""
    stem, dot, ext = name.rpartition(".")
    return bool(dot and stem and ext.isalnum() and len(ext) <= 8)


def with_extension(name: str, extension: str) -> str:
    """``name`` with its extension replaced by ``extension`` (the searchable PDF of a
    ``scan.tif`` is ``scan.pdf``)."""
    stem, dot, _ = name.rpartition(".")
    return fit(f"{stem if dot and stem else name}.{extension}")


def clash_names(name: str) -> Iterator[str]:
    """``name``, then ``name (2).ext``, ``name (3).ext``, ... (MAX_CLASH in all)."""
    yield name
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    suffix = f".{ext}" if ext else ""
    for n in range(2, MAX_CLASH + 1):
        yield fit(f"{stem} ({n}){suffix}")
