"""structlog set-up: JSON lines when stdout is not a TTY (journald), console on a TTY.

Log lines are keyed events (``event="intake.ingested"``) with flat fields so that
journald, jq and fail2ban can match them without parsing prose.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Literal, TextIO

import structlog

Format = Literal["auto", "json", "console"]


def _safe_text(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # File names from scanners may carry undecodable bytes (surrogate escapes) or
    # newlines; both must be visible in a log line and must never forge a second line.
    for key, value in event_dict.items():
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                event_dict[key] = value.encode("utf-8", "surrogateescape").decode(
                    "utf-8", "backslashreplace"
                )
    return event_dict


def configure(level: str = "info", fmt: Format = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog for the whole process; safe to call again (e.g. on SIGHUP)."""
    out = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    renderer: Any
    if use_json:
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            _safe_text,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )


def get_logger(**initial: Any) -> Any:
    return structlog.get_logger(**initial)


def new_trace_id() -> str:
    """A correlation id for a file that arrives without one (hot folder, CLI): time-ordered
    like the SFTP spool's ids, so ``grep ID`` finds every line from arrival to last job."""
    import secrets
    import time

    return f"{time.time_ns():020d}-{secrets.token_hex(4)}"
