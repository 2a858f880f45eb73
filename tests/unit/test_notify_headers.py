"""Mail headers from untrusted text (worker/notify/headers.py): what a mail program
decodes is the escaped text itself, the wire is folded ASCII, nothing is decoded twice."""

from __future__ import annotations

import email
import email.header
import email.policy
from email.message import EmailMessage

import pytest

from worker.notify.headers import MAX_LINE, LiteralHeader, encoded_words

NAMES = [
    "plain subject",
    "=?utf-8?q?x=0D=0ABcc:_a@evil.test?=.pdf",
    "=?utf-8?b?SGVsbG8=?= and =?iso-8859-1?q?Gr=FC=DFe?=",
    "bad\r\nBcc: b@evil.test\r\n\r\nforged",
    "Grüße aus Köln 🧾 請求書",
    b"Scan_\xff\xfe.pdf".decode("utf-8", "surrogateescape"),
    "x" * 2000,
    "",
]


def _sent(subject: str) -> tuple[bytes, EmailMessage]:
    msg = EmailMessage(policy=email.policy.SMTP)
    msg["Subject"] = LiteralHeader("Subject", subject)
    msg["From"] = "ingestd@example.org"
    msg.set_content("body\n")
    raw = msg.as_bytes()
    # As a mailbox stores it: lines end in LF.
    parsed = email.message_from_bytes(raw.replace(b"\r\n", b"\n"), policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    return raw, parsed


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_a_subject_decodes_to_its_escaped_text_and_nothing_more(name: str) -> None:
    """Parsed by the modern and the legacy API, the subject is the literal (escaped) text,
    the headers are Subject and From and the body is the body."""
    raw, parsed = _sent(name)
    literal = str(LiteralHeader("Subject", name))
    assert "\r" not in literal and "\n" not in literal and literal.isprintable()
    assert str(parsed["Subject"]) == literal
    assert list(parsed.keys()) == [
        "Subject",
        "From",
        "Content-Type",
        "Content-Transfer-Encoding",
        "MIME-Version",
    ]
    assert parsed.get_content() == "body\n"
    legacy = email.message_from_bytes(raw, policy=email.policy.compat32)
    parts = email.header.decode_header(legacy["Subject"] or "")
    decoded = "".join(p.decode(c or "ascii") if isinstance(p, bytes) else p for p, c in parts)
    assert decoded == literal
    head = raw.split(b"\r\n\r\n", 1)[0]
    assert all(len(line) <= MAX_LINE and line.isascii() for line in head.split(b"\r\n"))


def test_encoded_words_keep_characters_whole_and_within_75() -> None:
    """Each encoded word is at most 75 characters and decodes alone (no split character)."""
    text = "Ä🧾" * 100
    words = encoded_words(text, len("Subject: "))
    assert all(len(w) <= 75 for w in words)
    assert (
        "".join(str(email.header.make_header(email.header.decode_header(w))) for w in words) == text
    )


def test_plain_ascii_stays_readable_on_the_wire() -> None:
    """A short ASCII subject without ``=?`` is sent as it is."""
    raw, _ = _sent("[ingestd] tenant acme suspended")
    assert b"Subject: [ingestd] tenant acme suspended\r\n" in raw
