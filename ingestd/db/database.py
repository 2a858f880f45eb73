"""The one seam to PostgreSQL: the pool, transactions and named queries.

Only ingestd/db (and ingestd/queue/claims.py) imports psycopg. Errors leave as domain
errors (ingestd/db/errors.py classifies them); database.url is checked before use
(ingestd/db/conninfo.py).

A failover (docs/high-availability.md) is ``DatabaseUnavailable``: the server shut down
under us (57P01..57P03), the connection broke (08xxx), or the server we are on has become
read-only (25006: a standby, a fenced old primary). Each drains the pool, so the next
connection goes through the multi-host ``database.url`` with
``target_session_attrs=read-write`` to whichever server is the primary now. With such a
URL a pooled connection is also checked before use: one whose server has said it is
read-only (ParameterStatus ``in_hot_standby``, ``default_transaction_read_only``: no
round trip) is closed; ``verify_writable`` asks the server each time (one round trip),
for a process whose reads must not come from a fenced old primary (the job child).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg.types.string import StrDumperUnknown

from ingestd.db import sql
from ingestd.db.conninfo import conninfo_with, parse_conninfo
from ingestd.db.errors import connect_error, leaves_the_server, map_error
from ingestd.errors import DatabaseError, DatabaseUnavailable
from ingestd.textsafe import bytes_escaped

Row = dict[str, Any]


class _OutsideTextDumper(StrDumperUnknown):
    """Every string sent to PostgreSQL: one with bytes that are not UTF-8 (a file name or
    an argument decoded with ``surrogateescape``) is sent as the text the archive records
    for it (``\\xNN``, ingestd/textsafe.py), never a UnicodeEncodeError from the driver."""

    def dump(self, obj: str) -> Any:
        try:
            return super().dump(obj)
        except UnicodeEncodeError:
            return super().dump(bytes_escaped(obj))


# The one seam: every connection this process makes copies the global adapters.
psycopg.adapters.register_dumper(str, _OutsideTextDumper)


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

    def stream(
        self, name: str, params: Mapping[str, Any] | None = None, *, batch: int = 5000
    ) -> Iterator[Row]:
        """The rows of a named query through a server-side cursor, ``batch`` at a time:
        a million rows without a million rows in memory (verify, export)."""
        with self._conn.cursor(name=f"stream_{name}") as cur:
            cur.itersize = batch
            cur.execute(sql.query(name), params or {})
            yield from cur

    def raw(self, statement: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Ad-hoc SQL for migrations and tests; product code uses named queries."""
        # No params -> simple query protocol, which allows several statements at once.
        cur = self._conn.execute(statement.encode(), params if params else None)
        return cur.fetchall() if cur.description else []


class Committed:
    """The first row of a pipelined transaction's last statement (``Batch.commit_with``),
    readable once the transaction has committed: after its ``with`` block."""

    def __init__(self, cursor: psycopg.Cursor[Row]) -> None:
        self._cursor = cursor
        self._row: Row | None = None
        self._done = False

    def _resolve(self) -> None:
        # The results arrived with the block's closing sync; this reads them, no I/O.
        # A statement without a result set (no RETURNING) has no row.
        self._row = self._cursor.fetchone() if self._cursor.description else None
        self._done = True

    @property
    def row(self) -> Row | None:
        if not self._done:
            raise RuntimeError("read Committed.row after the pipelined block, once committed")
        return self._row


class Batch:
    """A transaction in pipeline mode, speaking named queries only. Statements go out as
    they are queued and only a read waits: BEGIN travels with the first ``one``, COMMIT
    with the last statement (``commit_with``), so a transaction that reads once and then
    writes costs two round trips, however many statements it runs."""

    def __init__(self, conn: psycopg.Connection[Row]) -> None:
        self._conn = conn
        self.committed: Committed | None = None
        # Streaming standbys without this transaction when its block ended (replicated).
        self.standbys_behind = 0

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        """Run a named query and wait for its first row: one round trip, which also
        carries whatever was queued before it (the BEGIN)."""
        if self.committed is not None:
            raise RuntimeError("the transaction's COMMIT is already queued")
        return self._conn.execute(sql.query(name), params or {}).fetchone()

    def commit_with(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        *,
        also: Sequence[tuple[str, Mapping[str, Any]]] = (),
    ) -> Committed:
        """Queue a named query as the transaction's last statement, and COMMIT behind it.

        Both are on their way at once (the server may commit before this returns); the
        block's end waits for the outcome in one round trip and raises if either failed
        (then nothing was committed). The row is ``Committed.row`` after the block.
        ``also``: named queries queued after it, before the COMMIT (their rows unread)."""
        if self.committed is not None:
            raise RuntimeError("the transaction's COMMIT is already queued")
        cursor = self._conn.execute(sql.query(name), params or {})
        for other, other_params in also:
            self._conn.execute(sql.query(other), other_params)
        self._conn.execute(b"COMMIT")
        self.committed = Committed(cursor)
        return self.committed


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
        standby_wait: float = 0.0,
        verify_writable: bool = False,
    ) -> None:
        self.conninfo = conninfo
        self._timeout = connect_timeout
        self._max_size = max_size
        self.standby_wait = standby_wait
        self._drained_at = 0.0
        self._drain_lock = threading.Lock()
        self._verify_writable = verify_writable
        self._no_standby_until = 0.0  # monotonic; see _wait_for_standbys
        params, _ = parse_conninfo(conninfo)
        wants_primary = (params or {}).get("target_session_attrs") in ("read-write", "primary")
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
                check=self._check_writable if wants_primary else None,
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

    def _error(self, exc: psycopg.Error | psycopg_pool.PoolTimeout) -> DatabaseError:
        if not isinstance(exc, psycopg_pool.PoolTimeout):
            if leaves_the_server(exc):
                self._drain()
            return map_error(exc)
        # The pool says only "couldn't get a connection after 5.00 sec"; its connection
        # errors went to its log. One direct attempt tells down from refused from busy.
        try:
            connect_once(self.conninfo, timeout=self._timeout).close()
        except DatabaseError as direct:
            return direct
        return DatabaseUnavailable(
            f"database busy: no free connection within {self._timeout:g} s "
            f"(all {self._max_size} of the pool in use; database.pool_max_size)"
        )

    def _check_writable(self, conn: psycopg.Connection[Row]) -> None:
        """The pool's check before it hands out a connection (a multi-host URL asking for
        the primary): a connection to a server that is read-only now is closed, so the
        pool opens another one, which libpq takes to the primary."""
        status = conn.info.parameter_status
        read_only = "on" in (status("in_hot_standby"), status("default_transaction_read_only"))
        if not read_only and self._verify_writable:
            autocommit = conn.autocommit
            conn.autocommit = True
            try:
                row = conn.execute("SHOW transaction_read_only").fetchone()
            finally:
                conn.autocommit = autocommit
            read_only = row is not None and row["transaction_read_only"] == "on"
        if read_only:
            conn.close()  # not back into the pool: it leads to the wrong server
            raise psycopg.OperationalError("the server is read-only now (not the primary)")

    def _drain(self) -> None:
        """Replace every pooled connection (those in use are closed when returned): they
        lead to a server that is gone or read-only. At most once a second, however many
        threads saw the same failover."""
        with self._drain_lock:
            now = time.monotonic()
            if now - self._drained_at < 1.0:
                return
            self._drained_at = now
        with contextlib.suppress(psycopg_pool.PoolClosed):
            self._pool.drain()

    def _wait_for_standbys(self, conn: psycopg.Connection[Row]) -> int:
        """On the connection that just committed (never another server after a failover):
        wait at most ``standby_wait`` seconds until every streaming standby has written
        the WAL up to here. How many are still behind (0: none, no standby, or the wait is
        off; only standbys whose positions this role may see count: pg_read_all_stats)."""
        if self.standby_wait <= 0 or time.monotonic() < self._no_standby_until:
            return 0
        deadline = time.monotonic() + self.standby_wait
        lsn: str | None = None
        delay = 0.005
        while True:
            row = conn.execute(sql.query("standbys_behind"), {"lsn": lsn}).fetchone()
            if row is not None and not row["standbys"]:
                # Without a standby, a second without this round trip after each COMMIT.
                self._no_standby_until = time.monotonic() + 1.0
            if row is None or not row["behind"]:
                return 0
            lsn = str(row["lsn"])
            if time.monotonic() >= deadline:
                return int(row["behind"])
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        """Yield a Tx; COMMIT on normal exit, ROLLBACK on exception. Errors are mapped."""
        try:
            with self._pool.connection(timeout=self._timeout) as conn, conn.transaction():
                yield Tx(conn)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._error(exc) from exc

    @contextlib.contextmanager
    def pipelined(self, *, replicated: bool = False) -> Iterator[Batch]:
        """Yield a Batch: a transaction in as few round trips as its reads allow (see
        ``Batch``). It commits only through ``Batch.commit_with``; a block that ends
        without it, or with an exception, rolls back. Errors are mapped.

        ``replicated``: once committed, wait (``standby_wait``) on the same connection
        until the streaming standbys have it, so a failover to one keeps it; the block
        raises if the server is lost meanwhile (the caller keeps its source and tries
        again). ``Batch.standbys_behind`` says how many had not caught up in time."""
        try:
            with self._pool.connection(timeout=self._timeout) as conn:
                # BEGIN and COMMIT are sent by us, queued with the statements: psycopg's
                # own transaction handling would wait for each of them separately.
                conn.autocommit = True
                try:
                    batch = Batch(conn)
                    with conn.pipeline():
                        conn.execute(b"BEGIN")
                        yield batch
                        if batch.committed is None:
                            conn.execute(b"ROLLBACK")
                    if batch.committed is not None:
                        batch.committed._resolve()
                        if replicated:
                            batch.standbys_behind = self._wait_for_standbys(conn)
                except BaseException:
                    # An error (a failed statement, the body's own) leaves the transaction
                    # open or aborted: end it here, not in the pool's return path.
                    if conn.info.transaction_status in (
                        psycopg.pq.TransactionStatus.INTRANS,
                        psycopg.pq.TransactionStatus.INERROR,
                    ):
                        with contextlib.suppress(psycopg.Error):
                            conn.rollback()
                    raise
                finally:
                    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                        conn.autocommit = False
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._error(exc) from exc

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        """The first row of one named query run on its own, outside a transaction block:
        one round trip (no BEGIN, no COMMIT). For a read that decides nothing by itself,
        such as a look before the locked check. Errors are mapped."""
        rows = self._alone(name, params, first=True)
        return rows[0] if rows else None

    def all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Every row of one named query run on its own, as ``one`` (one round trip)."""
        return self._alone(name, params, first=False)

    def _alone(self, name: str, params: Mapping[str, Any] | None, *, first: bool) -> list[Row]:
        try:
            with self._pool.connection(timeout=self._timeout) as conn:
                conn.autocommit = True
                try:
                    cur = conn.execute(sql.query(name), params or {})
                    if not first:
                        return cur.fetchall()
                    row = cur.fetchone()
                    return [] if row is None else [row]
                finally:
                    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                        conn.autocommit = False
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._error(exc) from exc

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
            raise self._error(exc) from exc


def connect_once(
    conninfo: str, *, autocommit: bool = True, timeout: float = 5.0, name: str | None = None
) -> Any:
    """A single un-pooled connection (admin tasks, probes, tests), as application ``name``
    if given. A failure is ``DatabaseRefused`` (permanent, with a hint) or
    ``DatabaseUnavailable`` (retry)."""
    if name:
        conninfo = conninfo_with(conninfo, application_name=name)
    try:
        return psycopg.connect(
            conninfo,
            autocommit=autocommit,
            row_factory=dict_row,
            connect_timeout=max(1, round(timeout)),
        )
    except psycopg.Error as exc:
        raise connect_error(exc) from exc
