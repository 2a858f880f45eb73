"""What `ingestd status` reports, gathered once for the command and the web console's
admin page: what is on disk (spool, hot folders, bans, the daemon's own report) even when
the database is down, then documents and jobs by tenant, the queue by tenant and by pool,
and why files wait (status_why)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ingestd.config.settings import Config
from ingestd.db.database import Database
from ingestd.ops import status_why


def gather(config: Config, db: Database | None = None) -> dict[str, Any]:
    """The report; ``report["database"]["up"]`` is False when the database could not be
    asked (what is on disk is there all the same). ``db``: an open pool to ask (the
    console's); else one is opened for this."""
    from ingestd.daemon.state import read_state
    from ingestd.errors import DatabaseUnavailable
    from ingestd.queue import pool_status
    from ingestd.sources.hotfolders import backlog_on_disk
    from ingestd.sources.sftp.bans import read_bans
    from ingestd.sources.sftp.spool_layout import spool_counts

    report: dict[str, Any] = {
        "spool": spool_counts(config.paths.spool),
        "hotfolders": backlog_on_disk(config),
        "sftp_bans": read_bans(config.paths.state_dir),
        "daemon": read_state(config.paths.state_dir),
    }
    database: dict[str, Any] = {"up": True}
    known: dict[str, Any] | None = None  # what `status` says why from (status_why)
    try:
        with _database(config, db) as pool, pool.transaction() as tx:
            known = status_why.from_database(tx)
            docs = tx.all("status_documents")
            jobs = tx.all("status_jobs")
            queue = tx.all("status_queue")
            limits = {
                r["tenant"]: r
                for r in tx.all("status_queue_limits", {"tenants": [q["tenant"] for q in queue]})
            }
            by_pool = pool_status.read(tx, config.worker)
    except DatabaseUnavailable as exc:
        seen = (report["daemon"] or {}).get("database") or {}
        database = {"up": False, "error": exc.message, "down_since": seen.get("down_since")}
        docs, jobs, queue, limits, by_pool = [], [], [], {}, []
        known = None
    for q in queue:
        limit = limits.get(q["tenant"]) or {}
        q["weight"], q["max_running"] = limit.get("weight", 1), limit.get("max_running")
    tenants: dict[str, dict[str, Any]] = {}
    for r in docs:
        t = tenants.setdefault(r["tenant"], {"documents": {}, "jobs": {}})
        t["documents"][r["status"]] = r["n"]
    for r in jobs:
        t = tenants.setdefault(r["tenant"], {"documents": {}, "jobs": {}})
        t["jobs"].setdefault(r["kind"], {})[r["status"]] = r["n"]
    report |= {
        "database": database,
        "tenants": tenants,
        "queue": queue,
        "pools": [p.as_json() for p in by_pool],
    }
    report["why"] = status_why.build(config, report, known)
    return report


@contextlib.contextmanager
def _database(config: Config, db: Database | None) -> Iterator[Database]:
    if db is not None:
        yield db
        return
    from ingestd.daemon.wiring import open_database

    with open_database(config) as opened:
        yield opened
