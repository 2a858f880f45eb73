"""Database failures against a real server: permanent refusals are not outages.

psycopg 3.3 gives no SQLSTATE for a failed connection; what each case really says was
read off a real server (PostgreSQL 15), and these tests pin that it is told apart: a
refusal (DatabaseRefused, exit 3, with a hint) from an outage (DatabaseUnavailable,
exit 4, with libpq's cause), and a missing schema (SchemaMissing, exit 3).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ingestd.db.conninfo import conninfo_with
from ingestd.db.database import Database, connect_once
from ingestd.db.pgcluster import EmbeddedPostgres
from ingestd.db.schema import migrate
from ingestd.errors import DatabaseRefused, DatabaseUnavailable, ExitCode, SchemaMissing
from tests.conftest import PgServer, private_cluster, wait_until


def _refused(conninfo: str) -> DatabaseRefused:
    with pytest.raises(DatabaseRefused) as exc:
        connect_once(conninfo, timeout=5).close()
    assert exc.value.exit_code == ExitCode.config_invalid
    assert "\n" not in exc.value.message
    return exc.value


def _select_one(db: Database) -> None:
    with db.transaction() as tx:
        tx.raw("SELECT 1")


def _without_user(conninfo: str) -> str:
    params = conninfo_to_dict(conninfo)
    params.pop("user", None)
    return make_conninfo(**params)


@pytest.fixture
def empty_db(pg_server: PgServer) -> Iterator[str]:
    """A database without any ingestd table."""
    name = f"ingestd_empty_{os.getpid()}"
    pg_server.admin(f'CREATE DATABASE "{name}"')
    yield pg_server.conninfo(name)
    pg_server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_role_that_does_not_exist_is_refused(pg_server: PgServer) -> None:
    """No such role: DatabaseRefused naming the role and how to create it, at once."""
    err = _refused(conninfo_with(pg_server.admin_conninfo, user="nosuchrole"))
    assert 'role "nosuchrole" does not exist' in err.message
    assert "createuser nosuchrole" in err.message


@pytest.mark.skipif(os.geteuid() != 0, reason="libpq's default role is the login name: root")
def test_root_without_a_role_is_told_to_run_as_ingestd(pg_server: PgServer) -> None:
    """Root with no user= in the URL: the refusal says to run as the ingestd user."""
    err = _refused(_without_user(pg_server.admin_conninfo))
    assert 'role "root" does not exist' in err.message
    assert "INGESTD_USER=ingestd ingestd" in err.message


def test_a_missing_database_says_how_to_create_it(pg_server: PgServer) -> None:
    """No such database: DatabaseRefused with the createdb command for it."""
    err = _refused(conninfo_with(pg_server.admin_conninfo, dbname="nosuchdb"))
    assert 'database "nosuchdb" does not exist' in err.message
    assert "createdb -O ingestd nosuchdb" in err.message


def test_the_pool_reports_the_refusal_not_its_timeout(pg_server: PgServer) -> None:
    """Through the pool too: the cause (no such role), not "couldn't get a connection"."""
    bad = conninfo_with(pg_server.admin_conninfo, user="nosuchrole")
    with Database(bad, connect_timeout=1) as db, pytest.raises(DatabaseRefused) as exc:
        _select_one(db)
    assert 'role "nosuchrole" does not exist' in exc.value.message
    assert "couldn't get a connection" not in exc.value.message


def test_an_unreachable_server_is_unavailable_with_its_cause(
    pg_server: PgServer, tmp_path: Path
) -> None:
    """No server at that address: DatabaseUnavailable (exit 4) with libpq's cause, one
    line, from a direct connection and from the pool alike."""
    down = conninfo_with(pg_server.admin_conninfo, host=str(tmp_path), port="1")
    with pytest.raises(DatabaseUnavailable) as direct:
        connect_once(down, timeout=2)
    assert direct.value.exit_code == ExitCode.database_unavailable
    assert direct.value.message.startswith("database unavailable: connection to server")
    assert "No such file or directory" in direct.value.message
    assert "\n" not in direct.value.message
    with Database(down, connect_timeout=1) as db, pytest.raises(DatabaseUnavailable) as pooled:
        _select_one(db)
    assert "No such file or directory" in pooled.value.message
    assert "couldn't get a connection" not in pooled.value.message


def test_an_exhausted_pool_says_busy_not_down(db_url: str) -> None:
    """Every pooled connection in use past the timeout: "database busy", the server is up."""
    with (
        Database(db_url, max_size=1, connect_timeout=1) as db,
        db.transaction(),  # holds the only connection
        pytest.raises(DatabaseUnavailable) as exc,
    ):
        _select_one(db)
    assert exc.value.message.startswith("database busy: no free connection within 1 s")
    assert "pool_max_size" in exc.value.message


def test_a_missing_schema_says_run_migrate(empty_db: str) -> None:
    """A query on a database never migrated: SchemaMissing (exit 3) saying `ingestd migrate`."""
    with Database(empty_db) as db, pytest.raises(SchemaMissing) as exc, db.transaction() as tx:
        tx.all("status_documents")
    assert exc.value.exit_code == ExitCode.config_invalid
    assert 'relation "documents" does not exist' in exc.value.message
    assert "ingestd migrate" in exc.value.message


def test_no_schema_to_create_in_points_at_the_search_path(empty_db: str) -> None:
    """A search_path naming no existing schema: SchemaMissing pointing at database.url."""
    url = conninfo_with(empty_db, options="-csearch_path=nope")
    with Database(url) as db, pytest.raises(SchemaMissing) as exc:
        migrate(db)
    assert "no schema has been selected to create in" in exc.value.message
    assert "search_path" in exc.value.message


# -- authentication and pg_hba.conf, on a cluster of our own --------------------------------
HBA = """\
local all ingestd trust
local all pwuser scram-sha-256
local all rejected reject
local all nologin trust
"""


@pytest.fixture(scope="module")
def hba_cluster() -> Iterator[EmbeddedPostgres]:
    """A cluster whose pg_hba.conf asks pwuser for a password, rejects `rejected`, has no
    line for `stranger`; `nologin` may not log in at all."""
    with private_cluster(5471, prefix="ingestd-test-hba-") as cluster:
        with connect_once(cluster.conninfo_for("postgres")) as conn:
            conn.execute("CREATE ROLE pwuser LOGIN PASSWORD 'right'")
            for role in ("rejected", "stranger"):
                conn.execute(f"CREATE ROLE {role} LOGIN")
            conn.execute("CREATE ROLE nologin NOLOGIN")
            (cluster.datadir / "pg_hba.conf").write_text(HBA)
            conn.execute("SELECT pg_reload_conf()")
        stranger = conninfo_with(cluster.conninfo_for("postgres"), user="stranger")

        def reloaded() -> bool:
            try:
                connect_once(stranger, timeout=2).close()
            except DatabaseRefused:
                return True
            return False

        wait_until(reloaded, timeout=30, interval=0.2)
        yield cluster


@pytest.mark.parametrize(
    ("user", "password", "said", "hint"),
    [
        ("pwuser", None, "fe_sendauth: no password supplied", "~/.pgpass"),
        ("pwuser", "wrong", 'password authentication failed for user "pwuser"', "PGPASSFILE"),
        ("stranger", None, "no pg_hba.conf entry for host", "pg_hba.conf on the database"),
        ("rejected", None, "pg_hba.conf rejects connection", "pg_hba.conf on the database"),
        ("nologin", None, 'role "nologin" is not permitted to log in', "ALTER ROLE nologin"),
    ],
)
def test_authentication_failures_are_refusals(
    hba_cluster: EmbeddedPostgres,
    tmp_path: Path,
    user: str,
    password: str | None,
    said: str,
    hint: str,
) -> None:
    """Missing or wrong password, no pg_hba.conf line, a reject line, a NOLOGIN role: each
    is DatabaseRefused with the server's words and what to change, never "unavailable"."""
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:{user}:{password}\n" if password else "")
    passfile.chmod(0o600)
    url = conninfo_with(hba_cluster.conninfo_for("postgres"), user=user, passfile=str(passfile))
    err = _refused(url)
    assert said in err.message and hint in err.message
