"""structlog set-up: JSON lines when stdout is not a TTY (journald), console on a TTY.

Log lines are keyed events (``event="intake.ingested"``) with flat fields so that
journald, jq and fail2ban can match them without parsing prose.

The stdlib ``logging`` records of libraries (psycopg.pool, psycopg, watchdog, ...) and
``warnings`` go through the same renderer into the same stream, so ``journalctl -o cat |
jq`` never meets a plain-text line: their message is ``event``, their logger name
``logger``, a traceback one ``exception`` string. paramiko stays silent: the SFTP server
cuts its logger off (ingestd/sources/sftp/session_host.py) and logs its own events instead.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Literal, TextIO

import structlog
from structlog.typing import FilteringBoundLogger

from ingestd.textsafe import recordable_text

Format = Literal["auto", "json", "console"]


def _safe_text(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # File names from scanners may carry undecodable bytes (surrogate escapes) or NUL:
    # written as \xNN by the one rule for untrusted text (ingestd/textsafe.py), so the line
    # is always written. Line breaks stay in the value: the JSON renderer escapes them, so
    # they never forge a second line (and a traceback stays readable).
    for key, value in event_dict.items():
        if isinstance(value, str):
            event_dict[key] = recordable_text(value)
    return event_dict


# The handler configure() put on the root logger (replaced, not added to, on SIGHUP).
_handler: logging.Handler | None = None
_json = False
# What configure() was last given: a child process (an SFTP process) logs the same way,
# into the same stream.
_settings: tuple[str, TextIO] = ("info", sys.stderr)


def json_output() -> bool:
    """Whether log lines are JSON (format=json, or auto off a TTY): the CLI then reports
    its error as a log line too, so every line on stderr parses."""
    return _json


def settings() -> tuple[str, Format, TextIO]:
    """The level, the resolved format and the stream of the last configure()."""
    level, out = _settings
    return level, "json" if _json else "console", out


def configure(level: str = "info", fmt: Format = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog for the whole process; safe to call again (e.g. on SIGHUP)."""
    global _json, _settings
    out = stream or sys.stderr
    _settings = (level, out)
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    renderer: Any
    if use_json:
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    _json = use_json
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
        # One write() per line (PrintLogger writes the line and its newline apart): a
        # library's line from another thread cannot land in the middle of ours.
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    _route_stdlib(out, renderer)


def _route_stdlib(out: TextIO, renderer: Any) -> None:
    """Every library's logging records and warnings, rendered like our own lines."""
    global _handler
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.stdlib.add_logger_name,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,  # the traceback: one "exception" field
            _safe_text,
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    _handler = handler
    # Warnings and worse only, whatever our level: psycopg.pool logs every connection
    # checkout at INFO, which would drown our own events (log volume is a resource).
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)


# The type of every logger in ingestd (what ``configure`` sets structlog up to make).
Logger = FilteringBoundLogger


def get_logger(**initial: Any) -> FilteringBoundLogger:
    """A logger with ``initial`` bound. Its type is what ``configure`` sets up
    (``make_filtering_bound_logger``); structlog hands out a lazy proxy that builds that
    logger from the configuration in force when it is first used (or bound)."""
    logger: FilteringBoundLogger = structlog.get_logger(**initial)
    return logger


def new_trace_id() -> str:
    """A correlation id for a file that arrives without one (hot folder, CLI): time-ordered
    like the SFTP spool's ids, so ``grep ID`` finds every line from arrival to last job."""
    import secrets
    import time

    return f"{time.time_ns():020d}-{secrets.token_hex(4)}"
