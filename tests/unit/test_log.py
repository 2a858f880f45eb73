"""Log output: JSON lines off a TTY, console on a TTY, undecodable names escaped."""

from __future__ import annotations

import io
import json
import os

from ingestd import log


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_when_not_a_tty() -> None:
    """With format=auto and a pipe, every line is one JSON object with level and timestamp."""
    out = io.StringIO()
    log.configure("info", "auto", stream=out)
    log.get_logger().info("intake.ingested", tenant="acme", document_id=1)
    line = json.loads(out.getvalue())
    assert line["event"] == "intake.ingested" and line["tenant"] == "acme"
    assert line["level"] == "info" and "timestamp" in line
    log.configure("debug", "json")


def test_console_on_a_tty() -> None:
    """With format=auto on a terminal, lines are human-readable, not JSON."""
    out = _Tty()
    log.configure("info", "auto", stream=out)
    log.get_logger().info("intake.ingested", tenant="acme")
    text = out.getvalue()
    assert "intake.ingested" in text and not text.startswith("{")
    log.configure("debug", "json")


def test_undecodable_file_names_are_escaped() -> None:
    """A name with invalid UTF-8 bytes is logged with backslash escapes, never crashes."""
    out = io.StringIO()
    log.configure("info", "json", stream=out)
    log.get_logger().warning("intake.refused", filename=os.fsdecode(b"scan-\xff.pdf"))
    assert json.loads(out.getvalue())["filename"] == "scan-\\xff.pdf"
    log.configure("debug", "json")


def test_level_filters() -> None:
    """Lines below the configured level are dropped."""
    out = io.StringIO()
    log.configure("warning", "json", stream=out)
    log.get_logger().info("quiet")
    assert out.getvalue() == ""
    log.configure("debug", "json")
