"""What a start would find, asked before it matters: ``ingestd check-config --online``
and every ``ingestd serve`` start.

- The S3 archive (ingestd/archive/bucket_check.py): a bucket that is missing, refuses
  the key or has no Object Lock cannot work, so ``serve`` refuses to start (exit 3, one
  line naming it) and check-config reports it. An endpoint that does not answer is a
  problem for check-config; ``serve`` logs it (``archive.unreachable``) and starts, as
  with the database down: uploads are spooled and hot-folder files wait until it answers.
- Warnings (ingestd/ops/config_warnings.py): missing hot folders and job kinds no pool
  serves at once; tenants the database does not know once it answers (``serve``: after
  its migration).
"""

from __future__ import annotations

from ingestd.archive import bucket_check
from ingestd.archive.bucket_check import BucketProblem
from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.errors import ConfigError, DatabaseError, DatabaseUnavailable
from ingestd.log import Logger
from ingestd.ops import config_warnings


def archive_problem(config: Config) -> BucketProblem | None:
    """Why the configured archive cannot work now, or None (a local archive: check_state)."""
    if config.archive.backend != "s3" or config.archive.s3 is None:
        return None
    return bucket_check.check(config.archive.s3)


def known_tenants(db: Database) -> set[str]:
    with db.transaction() as tx:
        return {str(r["name"]) for r in tx.all("tenant_list")}


def tenant_warnings(config: Config, db: Database) -> list[str]:
    """Tenants the config names that ``db`` does not know."""
    return config_warnings.unknown_tenants(config, known_tenants(db))


def online(config: Config) -> tuple[list[str], list[str]]:
    """check-config --online: (problems, warnings) of the archive and the database. A
    database that is down is a warning (the daemon starts without it); one that refuses
    us, or has no schema, a problem."""
    from ingestd.daemon.wiring import open_database

    problems: list[str] = []
    warnings: list[str] = []
    found = archive_problem(config)
    if found is not None:
        problems.append(found.message)
    try:
        with open_database(config, migrate_schema=False) as db:
            warnings += tenant_warnings(config, db)
    except DatabaseUnavailable as exc:
        warnings.append(f"database: tenants not checked: {exc.message}")
    except DatabaseError as exc:
        problems.append(f"database: {exc.message}")
    return problems, warnings


def at_start(config: Config, logger: Logger) -> None:
    """At ``serve``'s start: ConfigError (exit 3) if the archive cannot work; an archive
    that does not answer and every offline warning are logged."""
    found = archive_problem(config)
    if found is not None and not found.transient:
        raise ConfigError(f"the archive cannot work: {found.message}")
    if found is not None:
        logger.warning("archive.unreachable", problem=found.message)
    for line in config_warnings.offline_warnings(config):
        logger.warning("config.warning", warning=line)


def after_migrate(config: Config, db: Database, logger: Logger) -> None:
    """Once the database answers (serve's schema thread): tenants it does not know."""
    try:
        lines = tenant_warnings(config, db)
    except DatabaseError as exc:
        logger.warning("config.tenants_not_checked", detail=exc.message)
        return
    for line in lines:
        logger.warning("config.warning", warning=line)
