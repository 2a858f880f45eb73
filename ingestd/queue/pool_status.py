"""Each worker pool's queue and live lanes, and whether anyone serves it.

`ingestd status` and the /metrics pool gauges read the same thing: per pool of the config
(``default`` first), its ready jobs (queued and due, in its tenants and kinds), the jobs
its workers claimed that still run, and its live lanes on every host (sessions named
``ingestd-worker:POOL:JOBS:SHORT``, one per worker process, see
``pools.WORKER_APPLICATION``). One statement serves all
pools (``pool_status`` in queries/queue.sql).

A pool with ready jobs and no live worker carries a warning naming the unit to start,
unless another shared pool with live lanes claims its jobs too.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from ingestd.config.settings import DEFAULT_POOL, WorkerConfig
from ingestd.db.database import Tx
from ingestd.queue import pools


@dataclass(frozen=True, slots=True)
class PoolStatus:
    """One pool's line of `status` and its gauges."""

    scope: pools.Scope
    ready: int
    running: int
    oldest_ready_seconds: int | None  # None: nothing ready
    jobs_lanes: int  # live lanes of the pool's kinds, on every host
    short_lanes: int  # live lanes of its short kinds only
    warning: str | None = None

    @property
    def pool(self) -> str:
        return self.scope.pool

    @property
    def unit(self) -> str:
        """The systemd unit that brings up the pool's first worker."""
        return f"ingestd-worker@{1 if self.pool == DEFAULT_POOL else self.pool}"

    def covers(self, other: PoolStatus) -> bool:
        """Whether this pool's live lanes also claim every job ``other`` is waiting for:
        a shared pool (no tenants of its own) whose kinds include ``other``'s."""
        mine, theirs = self.scope.kinds, other.scope.kinds
        return (
            self is not other
            and other.scope.tenants is None
            and self.scope.tenants is None
            and self.jobs_lanes > 0
            and (mine is None or (theirs is not None and set(theirs) <= set(mine)))
        )

    def as_json(self) -> dict[str, object]:
        """The shape `status --json` prints."""
        return {
            "pool": self.pool,
            **self.scope.describe(),
            "ready": self.ready,
            "running": self.running,
            "oldest_ready_seconds": self.oldest_ready_seconds,
            "lanes": {"jobs": self.jobs_lanes, "short": self.short_lanes},
            "unit": self.unit,
            "warning": self.warning,
        }


def read(tx: Tx, worker: WorkerConfig) -> list[PoolStatus]:
    """Every pool of ``worker``, ``default`` first, with its warning if nobody serves it."""
    scopes = [pools.resolve(worker, name).scope for name in pools.pool_names(worker)]
    rows = {
        r["pool"]: r
        for r in tx.all("pool_status", {"pools": json.dumps([s.params() for s in scopes])})
    }
    found = [
        PoolStatus(
            scope=s,
            ready=int(r["ready"]),
            running=int(r["running"]),
            oldest_ready_seconds=r["oldest_ready_seconds"],
            jobs_lanes=int(r["jobs_lanes"]),
            short_lanes=int(r["short_lanes"]),
        )
        for s, r in ((s, rows[s.pool]) for s in scopes)
    ]
    return [_with_warning(p, found) for p in found]


def _with_warning(p: PoolStatus, every: list[PoolStatus]) -> PoolStatus:
    # A process runs its jobs lanes beside any short ones: no jobs lane means no worker.
    if not p.ready or p.jobs_lanes or any(o.covers(p) for o in every):
        return p
    warning = (
        f"pool {p.pool}: {p.ready} job(s) ready and no worker serves it: systemctl start {p.unit}"
    )
    return dataclasses.replace(p, warning=warning)
