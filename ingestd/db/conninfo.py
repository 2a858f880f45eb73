"""database.url: the checks a connection string passes before anything connects with it.

Refused are an empty string, one libpq cannot read (psycopg's own parser says why), a port
that is no number, and a password in any form: config files end up in backups, tickets and
``ps``. ``redact_conninfo`` shows one without its password; ``conninfo_with`` replaces some
of its parameters.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

_URL = re.compile(r"^postgres(?:ql)?://")
# libpq ends the user info at the first "/": "postgresql://u:a/b@h/db" is host "u", port
# "a" and database "b@h/db" to it, and yet a password is written in the file.
_URL_USERINFO = re.compile(r"^(postgres(?:ql)?://[^@/?#]*:)([^@]+)@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]+)")
_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']+)")
_USE_PGPASS = (
    "must not contain a password (config files end up in backups, tickets and `ps`); "
    "put it in ~/.pgpass or PGPASSFILE of the user ingestd runs as, or use peer auth"
)


def parse_conninfo(conninfo: str) -> tuple[dict[str, Any] | None, str]:
    """(libpq's parameters, "") or (None, why libpq cannot parse it)."""
    try:
        return psycopg.conninfo.conninfo_to_dict(conninfo), ""
    except psycopg.Error as exc:
        return None, " ".join(str(exc).split())


def _has_password(conninfo: str, params: dict[str, Any] | None) -> bool:
    if params is not None:
        if params.get("password"):
            return True  # user info (percent-decoded), ?password=, password = 'a b'
        return bool(_URL_USERINFO.match(conninfo)) and "@" in str(params.get("dbname", ""))
    # libpq cannot parse it (the refusal must still not show a password): by shape.
    if _URL.match(conninfo):
        return bool(_URL_USERINFO.match(conninfo) or _QUERY_PASSWORD.search(conninfo))
    return bool(_KEYWORD_PASSWORD.search(conninfo))


def check_conninfo(conninfo: str) -> None:
    """ValueError saying why ``conninfo`` (database.url) is refused: empty, not readable
    by libpq (psycopg's own parser), a port that is no number, or a password in any
    form (URL user info, ``?password=``, ``password=...``)."""
    if not conninfo.strip():
        raise ValueError("must not be empty; leave database.url out for the embedded cluster")
    params, why = parse_conninfo(conninfo)
    if _has_password(conninfo, params):
        raise ValueError(_USE_PGPASS)
    if params is None:
        raise ValueError(f"must be a postgresql:// URL or libpq key=value string: {why}")
    for port in str(params.get("port", "")).split(","):
        if port and not port.isdigit():
            raise ValueError(f"port {port!r} is not a number")


def redact_conninfo(conninfo: str) -> str:
    """``conninfo`` with its password shown as ``***`` (unchanged if it has none)."""
    params, _ = parse_conninfo(conninfo)
    if not _has_password(conninfo, params):
        return conninfo
    if _URL.match(conninfo):
        shown = _QUERY_PASSWORD.sub(r"\1***", _URL_USERINFO.sub(r"\1***@", conninfo))
    else:
        shown = _KEYWORD_PASSWORD.sub(r"\1***", conninfo)
    return shown if shown != conninfo else "<not shown: it contains a password>"


def conninfo_with(conninfo: str, **overrides: Any) -> str:
    """``conninfo`` with some parameters replaced (e.g. another dbname)."""
    return psycopg.conninfo.make_conninfo(conninfo, **overrides)
