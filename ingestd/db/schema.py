"""Apply the migrations in ingestd/db/sql/migrations idempotently and record each version."""

from __future__ import annotations

from dataclasses import dataclass

from ingestd import jobkinds
from ingestd.db import sql
from ingestd.db.database import Database, jsonb
from ingestd.errors import DatabaseError

# Any constant works; it only has to be the same in every ingestd process so that two
# processes starting at once (daemon + workers under systemd) migrate one after another.
_MIGRATION_LOCK = 0x1A6E57D

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INT PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True, slots=True)
class MigrationReport:
    applied: list[str]
    current_version: int


def current_version(db: Database) -> int:
    with db.transaction() as tx:
        rows = tx.raw("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")
        if not rows[0]["present"]:
            return 0
        return int(tx.raw("SELECT coalesce(max(version), 0) AS v FROM schema_migrations")[0]["v"])


def migrate(db: Database) -> MigrationReport:
    """Bring the schema to the newest version; a no-op when it is already there."""
    applied: list[str] = []
    with db.transaction() as tx:
        tx.raw("SELECT pg_advisory_xact_lock(%(k)s)", {"k": _MIGRATION_LOCK})
        tx.raw(_BOOKKEEPING)
        done = {
            int(r["version"]): str(r["checksum"])
            for r in tx.raw("SELECT version, checksum FROM schema_migrations")
        }
        for mig in sql.migrations():
            if mig.version in done:
                if done[mig.version] != mig.checksum:
                    # An edited migration would leave databases in different shapes.
                    raise DatabaseError(
                        f"migration {mig.version:04d}_{mig.name} was changed after it was "
                        "applied; add a new migration instead of editing an old one"
                    )
                continue
            tx.raw(mig.sql)
            tx.raw(
                "INSERT INTO schema_migrations (version, name, checksum) "
                "VALUES (%(v)s, %(n)s, %(c)s)",
                {"v": mig.version, "n": mig.name, "c": mig.checksum},
            )
            applied.append(f"{mig.version:04d}_{mig.name}")
        version = max([0, *done, *(m.version for m in sql.migrations())])
        # Facts about job kinds are declared in Python (ingestd.jobkinds); the SQL reads
        # them from job_kinds (migration 0023), written here, under the same lock.
        tx.run("job_kinds_sync", {"kinds": jsonb(jobkinds.table_rows())})
    return MigrationReport(applied=applied, current_version=version)
