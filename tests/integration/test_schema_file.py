"""schema.sql builds exactly the catalogue the migrations build (pg_dump of both, compared).

ingestd/db/sql/schema.sql is the readable reference of the current schema; installs still
run the migrations. One empty database is migrated, schema.sql is loaded into another,
and the two ``pg_dump --schema-only`` outputs must be equal once the dumps' own comments
and settings (and the migrations' bookkeeping table) are left out.
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from importlib import resources

import pytest

from ingestd.db.database import Database
from ingestd.db.pgcluster import find_bindir
from ingestd.db.schema import migrate
from tests.conftest import PgServer

_counter = itertools.count()

# What differs between two dumps of equal schemas: comments (object names, versions),
# session settings and the \restrict key pg_dump writes since 15.14.
_NOISE = re.compile(r"^(--.*|SET .*|SELECT pg_catalog\.set_config.*|\\(un)?restrict .*|\s*)$")


def _schema_sql() -> str:
    return resources.files("ingestd.db.sql").joinpath("schema.sql").read_text("utf-8")


@pytest.fixture
def empty_db(pg_server: PgServer) -> Iterator[Callable[[], str]]:
    """A database name with nothing in it (from template0), dropped afterwards."""
    names: list[str] = []

    def make() -> str:
        name = f"ingestd_schema{os.getpid()}_{next(_counter)}"
        pg_server.admin(f'CREATE DATABASE "{name}" TEMPLATE template0')
        names.append(name)
        return name

    yield make
    for name in names:
        pg_server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _dump(conninfo: str) -> list[str]:
    out = subprocess.run(
        [
            str(find_bindir() / "pg_dump"),
            "--schema-only",
            "--no-owner",
            "--no-privileges",
            "--exclude-table=public.schema_migrations",
            f"--dbname={conninfo}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return [line for line in out.splitlines() if not _NOISE.match(line)]


def test_schema_sql_equals_the_migrated_schema(
    pg_server: PgServer, empty_db: Callable[[], str]
) -> None:
    """Migrations on one empty database, schema.sql on another: the same dump."""
    migrated, loaded = pg_server.conninfo(empty_db()), pg_server.conninfo(empty_db())
    with Database(migrated) as db:
        migrate(db)
    with Database(loaded) as db, db.transaction() as tx:
        tx.raw(_schema_sql())
    want, got = _dump(migrated), _dump(loaded)
    diff = "\n".join(difflib.unified_diff(want, got, "migrations", "schema.sql", n=2, lineterm=""))
    assert want == got, "schema.sql differs from the migrations:\n" + diff


def test_schema_sql_names_no_migrations_table() -> None:
    """The bookkeeping table belongs to the migrations runner, not to the schema."""
    assert "schema_migrations" not in re.sub(r"--[^\n]*", "", _schema_sql())
