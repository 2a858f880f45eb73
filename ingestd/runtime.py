"""Wire a Config to live parts: the database (embedded or configured) and the archive."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ingestd.archive import LocalArchive
from ingestd.config import Config
from ingestd.db import Database
from ingestd.intake import Intake
from ingestd.pgcluster import EmbeddedPostgres
from ingestd.schema import migrate
from ingestd.titles import TitleRules


@contextlib.contextmanager
def open_database(
    config: Config,
    *,
    name: str = "ingestd",
    migrate_schema: bool = True,
    before_pool: Callable[[str], None] | None = None,
) -> Iterator[Database]:
    """A pool on the configured database, or on the embedded cluster (started if needed,
    and stopped again on exit if this process started it). ``before_pool(conninfo)`` runs
    once the database is up and before the pool starts its threads."""
    cluster: EmbeddedPostgres | None = None
    if config.database.url:
        conninfo = config.database.url
    else:
        cluster = EmbeddedPostgres(config.paths.pgdata)
        cluster.start()
        conninfo = cluster.conninfo
    if before_pool is not None:
        before_pool(conninfo)
    db = Database(
        conninfo,
        min_size=config.database.pool_min_size,
        max_size=config.database.pool_max_size,
        connect_timeout=config.database.connect_timeout,
        name=name,
    ).open()
    try:
        if migrate_schema:
            migrate(db)
        yield db
    finally:
        db.close()
        if cluster is not None:
            cluster.stop_if_owned()


def make_archive(config: Config) -> LocalArchive:
    return LocalArchive(config.paths.archive_dir)


def make_intake(config: Config, db: Database) -> Intake:
    return Intake(
        config.intake,
        db,
        make_archive(config),
        title_rules=TitleRules(config.titles.placeholder_patterns),
    )
