"""Mail headers whose value is untrusted text (a file name in a subject), sent literally.

``email.policy.SMTP`` parses a header value assigned as a string: it decodes any RFC 2047
encoded word in it (``=?utf-8?q?x=0D=0ABcc:...?=``) and, on output, writes the decoded
text back as it is, so a file name could add headers or replace the body, and a harmless
encoded word makes the subject show any text. ``LiteralHeader`` is a header object the
policy stores and folds as given (``header_store_parse`` keeps a value that has a
``name``; ``fold`` is ours): the text is escaped first (``ingestd/textsafe.py``: no CR,
LF or other control survives), and unless it is short printable ASCII without ``=?``, the
whole value is sent as UTF-8 base64 encoded words. What a mail program decodes is then
exactly the escaped text, ``=?...?=`` of the input included: an encoded word of the
input is data inside ours, never decoded a second time.
"""

from __future__ import annotations

import base64
from typing import Any

from ingestd.textsafe import escaped

MAX_LINE = 78  # RFC 5322's "should" for a line (the "must" is 998)
# An encoded word is at most 75 characters (RFC 2047 2): "=?utf-8?b?" + base64 + "?=".
_EW_OPEN, _EW_CLOSE = "=?utf-8?b?", "?="
_EW_MAX = 75


class LiteralHeader(str):
    """A header whose value arrives as this text: ``str()`` of it is the (escaped) text a
    mail program shows; ``fold`` writes it for the wire."""

    name: str

    def __new__(cls, name: str, text: str) -> LiteralHeader:
        self = super().__new__(cls, escaped(text))
        self.name = name
        return self

    @property
    def defects(self) -> tuple[()]:
        return ()

    def fold(self, *, policy: Any) -> str:
        """``Name: value`` and the policy's line end, folded within ``MAX_LINE``."""
        linesep = str(getattr(policy, "linesep", "\n"))
        text = str(self)
        if text.isascii() and "=?" not in text and len(self.name) + 2 + len(text) <= MAX_LINE:
            return f"{self.name}: {text}{linesep}" if text else f"{self.name}:{linesep}"
        return (
            f"{self.name}: "
            + f"{linesep} ".join(encoded_words(text, len(self.name) + 2))
            + (linesep)
        )


def encoded_words(text: str, first_indent: int = 0) -> list[str]:
    """``text`` as UTF-8 base64 encoded words, each whole characters, each line (the first
    after ``first_indent`` characters, the others after one space) within ``MAX_LINE``."""
    words: list[str] = []
    chunk = b""
    room = _bytes_for(min(_EW_MAX, MAX_LINE - first_indent))
    for char in text:
        data = char.encode("utf-8")
        if chunk and len(chunk) + len(data) > room:
            words.append(_word(chunk))
            chunk = b""
            room = _bytes_for(min(_EW_MAX, MAX_LINE - 1))
        chunk += data
    if chunk or not words:
        words.append(_word(chunk))
    return words


def _bytes_for(width: int) -> int:
    """How many bytes base64 fits in an encoded word of ``width`` characters."""
    return max((width - len(_EW_OPEN) - len(_EW_CLOSE)) // 4 * 3, 3)


def _word(data: bytes) -> str:
    return f"{_EW_OPEN}{base64.b64encode(data).decode('ascii')}{_EW_CLOSE}"
