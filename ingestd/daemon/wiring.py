"""Wire a Config to live parts: the database (embedded or configured) and the intake
(the archive's factory is ``ingestd.archive.backends.make_archive``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ingestd.archive.backends import make_archive
from ingestd.config.pathcheck import ProtectedPaths
from ingestd.config.settings import Config
from ingestd.db.database import Database, connect_once
from ingestd.db.pgcluster import EmbeddedPostgres
from ingestd.db.schema import migrate
from ingestd.errors import DatabaseUnavailable
from ingestd.filenames.titles import TitleRules
from ingestd.intake import policy_backfill
from ingestd.intake.ingest import Intake


@contextlib.contextmanager
def open_database(
    config: Config,
    *,
    name: str = "ingestd",
    migrate_schema: bool = True,
    before_pool: Callable[[str], None] | None = None,
    require_server: bool = True,
) -> Iterator[Database]:
    """A pool on the configured database, or on the embedded cluster (started if needed,
    and stopped again on exit if this process started it). ``before_pool(conninfo)`` runs
    once the database is up and before the pool starts its threads.

    One direct connection comes first (``probe``): ``DatabaseRefused`` at once for a
    permanent cause (no such role or database, authentication), ``DatabaseUnavailable``
    for a server that is down, unless ``require_server`` is false (the daemon comes up
    without Postgres and spools uploads meanwhile)."""
    cluster: EmbeddedPostgres | None = None
    if config.database.url:
        conninfo = config.database.url
    else:
        cluster = EmbeddedPostgres(config.paths.pgdata)
        cluster.start()
        conninfo = cluster.conninfo
    try:
        probe(conninfo, config.database.connect_timeout, require_server=require_server)
        if before_pool is not None:
            before_pool(conninfo)
        db = Database(
            conninfo,
            min_size=config.database.pool_min_size,
            max_size=config.database.pool_max_size,
            connect_timeout=config.database.connect_timeout,
            name=name,
            standby_wait=config.database.standby_wait,
        ).open()
        try:
            if migrate_schema:
                migrate(db)
                policy_backfill.backfill(config, db)  # once after the upgrade to 0024
            yield db
        finally:
            db.close()
    finally:
        if cluster is not None:
            cluster.stop_if_owned()


def probe(conninfo: str, timeout: float, *, require_server: bool = True) -> None:
    """Connect once, directly. The pool would retry in the background and, after its
    timeout, say only "couldn't get a connection": a wrong role looked like an outage."""
    try:
        connect_once(conninfo, timeout=timeout).close()
    except DatabaseUnavailable:
        if require_server:
            raise


def make_intake(config: Config, db: Database) -> Intake:
    return Intake(
        config.intake,
        db,
        make_archive(config),
        title_rules=TitleRules(config.titles.placeholder_patterns),
        # Checked again before every removal: the config check only saw the paths as
        # they were at load.
        protected=ProtectedPaths.from_config(config),
    )
