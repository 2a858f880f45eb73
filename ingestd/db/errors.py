"""Driver errors as ours: the one place that reads psycopg's exceptions and SQLSTATEs.

Callers see domain errors (ingestd.errors): ``DatabaseUnavailable`` for anything that a
retry later may fix (server down, restarting, connection lost, a read-only server after a
failover), ``DatabaseRefused`` when the server answers but will not let us in (no such
role or database, authentication, pg_hba.conf), ``SchemaMissing`` when the tables are not
there, ``QueryCanceled`` for a statement timeout, ``DatabaseError`` for the rest.

Connection failures carry no SQLSTATE in psycopg 3.3 (libpq reports them as text only:
``connection failed: connection to server on socket "..." failed: FATAL:  role "root"
does not exist``), so they are classified by the server's and libpq's English messages;
a text we do not recognise (another lc_messages) stays "unavailable", never a false
"refused".
"""

from __future__ import annotations

import os
import pwd
import re

import psycopg

from ingestd.errors import (
    DatabaseError,
    DatabaseRefused,
    DatabaseUnavailable,
    QueryCanceled,
    SchemaMissing,
)

# SQLSTATE classes that mean "try again later", not "your query is wrong":
# 08 connection exception, 57P0x operator intervention (shutdown, cannot connect now),
# 53 insufficient resources, 40 serialization failure / deadlock.
_TRANSIENT_PREFIXES = ("08", "57P", "53", "40")
# The server we are connected to is not the primary (any more): after a failover, or
# the old primary fenced read-only. Every pooled connection to it is useless for writes.
_READ_ONLY = "25006"  # read_only_sql_transaction
# This server is gone or going: admin/crash shutdown, cannot connect now, connection lost.
_SERVER_GONE = ("57P01", "57P02", "57P03", "08")


def _cause(exc: BaseException) -> str:
    """psycopg's message on one line, without its "connection failed:" preamble."""
    text = "; ".join(" ".join(line.split()) for line in str(exc).splitlines() if line.strip())
    for prefix in ("connection failed: ", "connection is bad: "):
        text = text.removeprefix(prefix)
    return text


def _os_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _role_hint(role: str) -> str:
    if role == _os_user():
        # libpq's default role is the login name. As root, ingestd switches to the owner
        # of paths.state_dir (or INGESTD_USER) by itself; reaching here as root means it
        # found no such user, so say how to name one.
        if os.geteuid() == 0:
            return (
                f"this command ran as the OS user {role!r}, and PostgreSQL has no role of "
                "that name: run it as the service user, INGESTD_USER=ingestd ingestd ... "
                "(ingestd switches to the owner of paths.state_dir by itself: "
                "chown it to the service user)"
            )
        return (
            f"this command ran as the OS user {role!r}, and PostgreSQL has no role of "
            "that name: run as the ingestd user: sudo -u ingestd ingestd ..."
        )
    return (
        f"create it (sudo -u postgres createuser {role}) or name an existing role "
        "with user= in database.url"
    )


# (what the server or libpq says, how to fix it); {role} and {db} come from the message
# or from the connection. Texts as PostgreSQL 15 and libpq send them.
_REFUSALS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r'role "(?P<role>[^"]*)" does not exist'), "{role_hint}"),
    (
        re.compile(r'database "(?P<db>[^"]*)" does not exist'),
        "create it: sudo -u postgres createdb -O {role} {db}; then run `ingestd migrate`",
    ),
    (
        re.compile(
            r'password authentication failed for user "(?P<role>[^"]*)"'
            r"|fe_sendauth: no password supplied"
        ),
        "check the password in ~/.pgpass or PGPASSFILE of the user ingestd runs as "
        "(never in database.url), or use peer authentication",
    ),
    (
        re.compile(r'(?:Peer|Ident) authentication failed for user "(?P<role>[^"]*)"'),
        "peer authentication admits only the OS user named like the role: run ingestd as "
        "{role} (runuser -u {role} -- ingestd ...) or map the users in pg_ident.conf",
    ),
    (
        re.compile(r"no pg_hba\.conf entry for|pg_hba\.conf rejects connection"),
        "add a line for this host, role and database to pg_hba.conf on the database "
        "server and reload it",
    ),
    (re.compile(r'role "(?P<role>[^"]*)" is not permitted to log in'), "ALTER ROLE {role} LOGIN"),
    (
        re.compile(r'permission denied for database "(?P<db>[^"]*)"'),
        "GRANT CONNECT ON DATABASE {db} TO {role}",
    ),
)


def _refusal(cause: str, role: str, db: str) -> str | None:
    """The hint for a permanent refusal, or None when ``cause`` is not one."""
    for pattern, hint in _REFUSALS:
        m = pattern.search(cause)
        if m is not None:
            found = {k: v for k, v in m.groupdict().items() if v is not None}
            names = {"role": found.get("role", role), "db": found.get("db", db)}
            return hint.format(role_hint=_role_hint(names["role"]), **names)
    return None


def connect_error(exc: psycopg.Error) -> DatabaseError:
    """A failed connection attempt as a domain error: refused (permanent) or unavailable."""
    cause = _cause(exc)
    pgconn = exc.pgconn
    role = (pgconn.user or b"").decode(errors="replace") if pgconn is not None else ""
    db = (pgconn.db or b"").decode(errors="replace") if pgconn is not None else ""
    if isinstance(exc, psycopg.ProgrammingError):  # libpq refused the conninfo itself
        return DatabaseRefused(f"database.url cannot be used: {cause}")
    hint = _refusal(cause, role or _os_user(), db or role or _os_user())
    if hint is None and (exc.sqlstate or "").startswith(("28", "3D")):
        hint = "check database.url, the role and pg_hba.conf"  # should libpq ever say
    if hint is not None:
        return DatabaseRefused(f"database refused the connection: {cause}; {hint}")
    return DatabaseUnavailable(f"database unavailable: {cause}")


def _schema_missing(exc: psycopg.Error) -> SchemaMissing:
    cause = " ".join(str(exc).split("\n", 1)[0].split())
    if exc.sqlstate == "3F000":
        hint = (
            "check the search_path in database.url (options=-csearch_path=...), "
            "then run `ingestd migrate`"
        )
    else:
        hint = "run `ingestd migrate` (as the ingestd user) against this database"
    return SchemaMissing(f"database schema missing: {cause}; {hint}")


def map_error(exc: BaseException) -> DatabaseError:
    """A query's failure (a pool timeout: Database's own, a connection: connect_error)."""
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        if state in ("42P01", "3F000"):  # undefined_table, invalid_schema_name
            return _schema_missing(exc)
        if state == "57014":  # query_canceled: a statement_timeout, or a cancel
            return QueryCanceled(f"database error [{state}]: {exc}".strip())
        if state == _READ_ONLY:
            return DatabaseUnavailable(
                f"database read-only: {_cause(exc)} (a standby, or the old primary after a "
                "failover: the next connection goes to the primary)"
            )
        if isinstance(exc, psycopg.OperationalError) and (
            not state or state.startswith(_TRANSIENT_PREFIXES)
        ):
            return DatabaseUnavailable(f"database unavailable: {_cause(exc)}")
        if state.startswith(_TRANSIENT_PREFIXES):
            return DatabaseUnavailable(f"database busy: {exc}".strip())
        return DatabaseError(f"database error [{state or '?'}]: {exc}".strip())
    return DatabaseError(str(exc))


def leaves_the_server(exc: psycopg.Error) -> bool:
    """Whether ``exc`` says the server we are on is gone or read-only (a failover): every
    pooled connection to it is then useless."""
    state = exc.sqlstate or ""
    return state == _READ_ONLY or (
        isinstance(exc, psycopg.OperationalError) and (state or "08").startswith(_SERVER_GONE)
    )
