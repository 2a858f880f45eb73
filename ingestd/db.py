"""The one seam to PostgreSQL: pool, transactions, named queries, error mapping.

Only this module (and worker/queue.py) imports psycopg. Callers see domain errors:
``DatabaseUnavailable`` for anything that a retry later may fix (server down,
restarting, connection lost), ``DatabaseError`` for the rest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from ingestd import sql
from ingestd.errors import DatabaseError, DatabaseUnavailable

Row = dict[str, Any]

# SQLSTATE classes that mean "try again later", not "your query is wrong":
# 08 connection exception, 57P0x operator intervention (shutdown, cannot connect now),
# 53 insufficient resources, 40 serialization failure / deadlock.
_TRANSIENT_PREFIXES = ("08", "57P", "53", "40")


def _map_error(exc: BaseException) -> DatabaseError:
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return DatabaseUnavailable(f"database unavailable: {exc}")
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        if isinstance(exc, psycopg.OperationalError) and (
            not state or state.startswith(_TRANSIENT_PREFIXES)
        ):
            return DatabaseUnavailable(f"database unavailable: {exc}".strip())
        if state.startswith(_TRANSIENT_PREFIXES):
            return DatabaseUnavailable(f"database busy: {exc}".strip())
        return DatabaseError(f"database error [{state or '?'}]: {exc}".strip())
    return DatabaseError(str(exc))


def jsonb(value: Any) -> Any:
    """Wrap a value for a JSONB parameter."""
    return Jsonb(value)


class Tx:
    """A connection inside a transaction, speaking named queries only."""

    def __init__(self, conn: psycopg.Connection[Row]) -> None:
        self._conn = conn

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        return self._conn.execute(sql.query(name), params or {}).fetchone()

    def all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return self._conn.execute(sql.query(name), params or {}).fetchall()

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        return self._conn.execute(sql.query(name), params or {}).rowcount

    def raw(self, statement: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Ad-hoc SQL for migrations and tests; product code uses named queries."""
        # No params -> simple query protocol, which allows several statements at once.
        cur = self._conn.execute(statement.encode(), params if params else None)
        return cur.fetchall() if cur.description else []


class Database:
    """A psycopg connection pool that hands out transactions and maps errors."""

    def __init__(
        self,
        conninfo: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        connect_timeout: float = 5.0,
        name: str = "ingestd",
    ) -> None:
        self.conninfo = conninfo
        self._timeout = connect_timeout
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Row]] = (
            psycopg_pool.ConnectionPool(
                conninfo,
                min_size=min_size,
                max_size=max_size,
                kwargs={
                    "row_factory": dict_row,
                    "connect_timeout": max(1, int(connect_timeout)),
                    "application_name": name,
                },
                connection_class=psycopg.Connection[Row],
                open=False,
                timeout=connect_timeout,
                # Keep trying in the background while the server is down: the daemon
                # must come up and spool uploads even when Postgres does not.
                reconnect_timeout=0,
                name=name,
            )
        )

    def open(self) -> Database:
        self._pool.open(wait=False)
        return self

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Database:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        """Yield a Tx; COMMIT on normal exit, ROLLBACK on exception. Errors are mapped."""
        try:
            with self._pool.connection(timeout=self._timeout) as conn, conn.transaction():
                yield Tx(conn)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise _map_error(exc) from exc

    @contextlib.contextmanager
    def autocommit(self) -> Iterator[Tx]:
        """Yield a Tx on a connection in autocommit mode (CREATE DATABASE, LISTEN...)."""
        try:
            with self._pool.connection(timeout=self._timeout) as conn:
                conn.autocommit = True
                try:
                    yield Tx(conn)
                finally:
                    conn.autocommit = False
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise _map_error(exc) from exc


def connect_once(conninfo: str, *, autocommit: bool = True, timeout: float = 5.0) -> Any:
    """A single un-pooled connection (admin tasks, tests). Errors are mapped."""
    try:
        return psycopg.connect(
            conninfo, autocommit=autocommit, row_factory=dict_row, connect_timeout=int(timeout)
        )
    except psycopg.Error as exc:
        raise _map_error(exc) from exc


def conninfo_with(conninfo: str, **overrides: Any) -> str:
    """``conninfo`` with some parameters replaced (e.g. another dbname)."""
    return psycopg.conninfo.make_conninfo(conninfo, **overrides)
