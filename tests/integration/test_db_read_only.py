"""A server that has become read-only (a standby, a fenced old primary after a failover)
is an outage to retry, never a query error, and a pooled connection to it is not used
again once the server has said so."""

from __future__ import annotations

import pytest

from ingestd.db.conninfo import conninfo_with
from ingestd.db.database import Database
from ingestd.errors import DatabaseUnavailable


def test_a_write_on_a_read_only_server_is_unavailable(db_url: str) -> None:
    """SQLSTATE 25006 is DatabaseUnavailable (transient) and names the failover."""
    read_only = conninfo_with(db_url, options="-c default_transaction_read_only=on")
    with Database(read_only) as db:
        with pytest.raises(DatabaseUnavailable) as exc, db.transaction() as tx:
            tx.raw("CREATE TABLE t_read_only (x int)")
        assert exc.value.transient
        assert "read-only" in exc.value.message


def test_a_pooled_connection_to_a_read_only_server_is_replaced(db_url: str) -> None:
    """With target_session_attrs=read-write, a connection whose server reported itself
    read-only is closed at the next checkout and a writable one is handed out."""
    url = conninfo_with(db_url, target_session_attrs="read-write")
    with Database(url, min_size=1, max_size=1) as db:
        with db.autocommit() as tx:
            first = tx.raw("SELECT pg_backend_pid() AS pid")[0]["pid"]
            tx.raw("SET default_transaction_read_only = on")  # reported to the client
        with db.transaction() as tx:
            row = tx.raw(
                "SELECT pg_backend_pid() AS pid, current_setting('transaction_read_only') AS ro"
            )[0]
        assert row["pid"] != first and row["ro"] == "off"
