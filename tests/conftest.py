"""Shared fixtures: one throwaway PostgreSQL per test session, a fresh database per test.

A template database is migrated once; each test gets ``CREATE DATABASE ... TEMPLATE``,
which is a file copy and takes milliseconds. Set ``INGESTD_TEST_DATABASE_URL`` to use
an existing server instead (the role needs CREATEDB).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ingestd import log
from ingestd.config.load import parse_config
from ingestd.config.settings import Config
from ingestd.db.conninfo import conninfo_with
from ingestd.db.database import Database, connect_once
from ingestd.db.pgcluster import EmbeddedPostgres
from ingestd.db.schema import migrate

# Fixtures kept in modules of their own (the S3 endpoint: moto's server).
pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.deb",
    "tests.fixtures.service_user",
    "tests.fixtures.web",
    "tests.fixtures.ldap",
]

_counter = itertools.count()


@dataclass
class PgServer:
    admin_conninfo: str  # connects to a maintenance database
    cluster: EmbeddedPostgres | None

    def conninfo(self, dbname: str) -> str:
        return conninfo_with(self.admin_conninfo, dbname=dbname)

    def admin(self, statement: str) -> None:
        with connect_once(self.admin_conninfo) as conn:
            conn.execute(statement)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    url = os.environ.get("INGESTD_TEST_DATABASE_URL")
    if url:
        yield PgServer(url, None)
        return
    # Not under pytest's tmp dir: that is 0700 root, and the server runs unprivileged.
    base = Path(tempfile.mkdtemp(prefix="ingestd-test-pg-"))
    base.chmod(0o711)
    cluster = EmbeddedPostgres(base / "pgdata", durable=False)
    cluster.start()
    try:
        yield PgServer(cluster.conninfo_for("postgres"), cluster)
    finally:
        cluster.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(pg_server: PgServer) -> Iterator[str]:
    name = f"ingestd_tpl_{os.getpid()}"
    pg_server.admin(f'DROP DATABASE IF EXISTS "{name}"')
    pg_server.admin(f'CREATE DATABASE "{name}"')
    with Database(pg_server.conninfo(name)) as db:
        migrate(db)
    yield name
    pg_server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db_url(pg_server: PgServer, template_db: str) -> Iterator[str]:
    """conninfo of a fresh, migrated, empty database for this test only."""
    name = f"ingestd_t{os.getpid()}_{next(_counter)}"
    pg_server.admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield pg_server.conninfo(name)
    pg_server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    with Database(db_url, max_size=6) as database:
        yield database


@dataclass
class Env:
    """A complete ingestd installation in a temp dir: config file, paths, database."""

    root: Path
    config_path: Path
    config: Config
    db_url: str

    def reload(self) -> Config:
        data = tomllib.loads(self.config_path.read_text())
        self.config = parse_config(data, base=self.config_path.parent)
        return self.config


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):  # an inline table: workflows' when/then
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(path: Path, sections: dict[str, Any]) -> None:
    """Write sections ({name: {key: value}}) and arrays of tables ({name: [{...}, ...]})."""
    lines = []
    for section, values in sections.items():
        tables = values if isinstance(values, list) else [values]
        for table in tables:
            lines.append(f"[[{section}]]" if isinstance(values, list) else f"[{section}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None)
            lines.append("")
    path.write_text("\n".join(lines))


@pytest.fixture
def make_env(tmp_path: Path, db_url: str) -> Any:
    def factory(**overrides: Any) -> Env:
        sections: dict[str, Any] = {
            "database": {"url": db_url},
            "paths": {
                "state_dir": str(tmp_path / "state"),
                "archive": str(tmp_path / "archive"),
                "derived": str(tmp_path / "derived"),
                "spool": str(tmp_path / "spool"),
            },
            "log": {"format": "json"},
        }
        for key, values in overrides.items():
            if isinstance(values, list):
                sections[key] = values
            else:
                sections.setdefault(key, {}).update(values)
        cfg_path = tmp_path / "ingestd.toml"
        write_config(cfg_path, sections)
        env = Env(tmp_path, cfg_path, Config(), db_url)
        env.reload()
        return env

    return factory


@pytest.fixture
def env(make_env: Any) -> Env:
    e: Env = make_env()
    return e


@pytest.fixture
def tenant(db: Database) -> str:
    """An active tenant named 'acme'."""
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": "acme", "status": "active"})
    return "acme"


@pytest.fixture(autouse=True)
def _json_logs() -> None:
    """JSON logs to this test's stderr. Per test, not per session: a test that configured
    logging for itself and set it back bound the logger to the stderr of its own time,
    which pytest may have closed since (a later in-process worker then failed with "I/O
    operation on closed file")."""
    log.configure("debug", "json")


def run_cli(
    env: Env, *args: str, extra_env: dict[str, str] | None = None, check: bool = False
) -> Any:
    """Run ``ingestd`` as a real process against ``env``'s config; returns CompletedProcess."""
    import subprocess
    import sys

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ingestd.cli",
            *args[:1],
            "--config",
            str(env.config_path),
            *args[1:],
        ],
        capture_output=True,
        text=True,
        check=check,
        env={**os.environ, **(extra_env or {})},
        timeout=120,
    )


def wait_until(predicate: Any, timeout: float = 60.0, interval: float = 0.05) -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds (a bound, not a
    timing assertion)."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s: {predicate}")
        time.sleep(interval)


@contextlib.contextmanager
def private_cluster(port: int, prefix: str = "ingestd-test-pg-") -> Iterator[EmbeddedPostgres]:
    """A throwaway cluster a test may stop and start at will (the shared one must stay up)."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o711)  # the server runs unprivileged when the tests run as root
    cluster = EmbeddedPostgres(base / "pgdata", durable=False, port=port)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def read_events(path: Path, name: str | None = None) -> list[dict[str, Any]]:
    """The JSON log lines of ``path`` (all, or those whose event is ``name``)."""
    import json

    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and (name is None or entry.get("event") == name):
            out.append(entry)
    return out
