"""The one rule for untrusted text (ingestd/textsafe.py): what is escaped, what is kept."""

from __future__ import annotations

import json

from ingestd.archive import audit
from ingestd.textsafe import escaped, recordable, recordable_text, shown

HOSTILE = b"Scan_\xff\xfe.pdf".decode("utf-8", "surrogateescape")


def test_undecodable_bytes_are_backslash_escapes_everywhere() -> None:
    """A non-UTF-8 name's bytes become ``\\xNN`` in recorded and in shown text alike."""
    assert recordable_text(HOSTILE) == "Scan_\\xff\\xfe.pdf"
    assert escaped(HOSTILE) == "Scan_\\xff\\xfe.pdf"
    assert recordable_text(HOSTILE).encode("utf-8")  # valid UTF-8 now


def test_every_control_and_line_separator_is_escaped_visibly() -> None:
    """CR, LF, TAB, NUL, DEL, C1, U+2028/2029 and a bidi override never survive raw."""
    text = "a\r\nb\tc\x00d\x7fe\x85f\u2028g\u2029h\u202ei"
    out = escaped(text)
    assert out == "a\\r\\nb\\tc\\x00d\\x7fe\\x85f\\u2028g\\u2029h\\u202ei"
    assert out.isprintable() and len(out.splitlines()) == 1


def test_printable_text_of_any_script_is_unchanged() -> None:
    """Umlauts, other scripts, a backslash and an encoded word are text like any other."""
    for text in (
        "Grüße aus Köln",
        "請求書\u3000写し.pdf",
        "Q4\xa0Belege",
        "a\\b",
        "=?utf-8?q?x?=",
        "",
    ):
        assert escaped(text) == text == recordable_text(text)


def test_recordable_keeps_line_breaks_and_structure() -> None:
    """For the database and JSON only bytes and NUL change; keys are escaped too."""
    value = {"f": [HOSTILE, "line\nbreak"], HOSTILE: 1, "n": None}
    out = recordable(value)
    assert out == {"f": ["Scan_\\xff\\xfe.pdf", "line\nbreak"], "Scan_\\xff\\xfe.pdf": 1, "n": None}
    json.dumps(out, ensure_ascii=False).encode("utf-8")


def test_shown_is_one_line_and_bounded() -> None:
    """``shown`` escapes, strips and cuts with an ellipsis."""
    assert shown("  x\ny  ") == "x\\ny"
    assert shown("a" * 50, 10) == "a" * 9 + "…"


def test_the_audit_trail_uses_the_same_rule() -> None:
    """``audit.recordable`` is the one in textsafe, not a copy."""
    assert audit.recordable is recordable


def test_sftp_log_fields_use_the_one_escaping() -> None:
    """A user name or client version an SSH client sends reaches the log on one line:
    CR/LF, controls and bidi escaped as everywhere else, cut to 64 characters."""
    from ingestd.sources.sftp.auth import safe

    assert safe('scan\r\n{"event": "forged"}') == 'scan\\r\\n{"event": "forged"}'
    assert safe("m\u00fcller\u202e") == "m\u00fcller\\u202e"
    assert len(safe("x" * 500)) == 64
