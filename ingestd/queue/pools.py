"""Which jobs a worker's lane may claim: its pool's tenants and kinds, as the claim takes them.

A pool ([[worker.pools]]) is a set of tenants and a set of kinds. A tenant named in a pool's
``tenants`` is dedicated to it: only that pool's workers serve it. A pool without tenants
serves every tenant no pool is dedicated to; ``default`` is such a pool, the one a worker
started without ``--pool`` serves, and it exists whether or not the config lists it.

Each worker process of a pool runs ``workers`` lanes for the pool's kinds and
``short_lanes`` more for its short kinds only (ingestd.jobkinds.SHORT_KINDS), so a
provision-tenant or a webhook delivery never waits behind a 300-page OCR. Each lane
claims within a scope (``Scope``); a scope's ``share`` names the serving state the claim
keeps (every tenant's virtual pass, migration 0014): a pool's short lanes keep their own,
so short jobs do not use up a tenant's share of the OCR lanes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ingestd.config.settings import DEFAULT_POOL, PoolConfig, WorkerConfig
from ingestd.errors import ConfigError
from ingestd.jobkinds import SHORT_KINDS

METRICS_OFFSET_STEP = 10  # pool i (1-based in the list) serves /metrics at offset 10 x i
_INSTANCE = re.compile(r"^(?P<pool>.+?)(?:-(?P<n>[0-9]+))?$")
_SHORT = sorted(str(k) for k in SHORT_KINDS)  # plain text for the driver, not the enum


@dataclass(frozen=True, slots=True)
class Scope:
    """What one lane's claims may take."""

    pool: str  # recorded in processing_jobs.pool
    share: str  # the serving state's key: the pool, or "<pool>:short"
    tenants: tuple[str, ...] | None  # None: every tenant not in ``exclude``
    exclude: tuple[str, ...]  # tenants dedicated to other pools
    kinds: tuple[str, ...] | None  # None: every kind
    short: bool = False  # a short lane (only short kinds)

    def params(self) -> dict[str, object]:
        """The claim's scope parameters (ingestd_claim, migrations 0014 and 0016), with the
        short kinds a tenant's cap exempts: the same for every scope."""
        return {
            "short_kinds": _SHORT,
            "pool": self.pool,
            "share": self.share,
            "tenants": list(self.tenants) if self.tenants is not None else None,
            "exclude": list(self.exclude) or None,
            "kinds": list(self.kinds) if self.kinds is not None else None,
        }

    def describe(self) -> dict[str, object]:
        """What the scope serves, as `status --json` and the worker's log lines show it
        (None: every tenant not excepted, or every kind)."""
        return {
            "tenants": list(self.tenants) if self.tenants is not None else None,
            "except": list(self.exclude),
            "kinds": list(self.kinds) if self.kinds is not None else None,
        }

    def serves(self, tenant: str, kind: str) -> bool:
        """Whether a job of ``tenant`` and ``kind`` is in this scope (as the claim decides)."""
        if self.tenants is not None and tenant not in self.tenants:
            return False
        if tenant in self.exclude:
            return False
        return self.kinds is None or kind in self.kinds


EVERYTHING = Scope(DEFAULT_POOL, DEFAULT_POOL, None, (), None)

# A live worker process holds its worker id on one session (WorkerIdentity) named this
# way, with its pool and its number of job slots and short slots: pg_stat_activity then
# counts every pool's live lanes on every host, with no table of workers that a killed
# host would leave stale.
WORKER_APPLICATION = "ingestd-worker"


def worker_application_name(pool: str, jobs: int, short: int) -> str:
    """``ingestd-worker:<pool>:<job slots>:<short slots>``, the application_name of a
    worker process's identity session (pool names are short slugs: it fits in 63 bytes)."""
    return f"{WORKER_APPLICATION}:{pool}:{jobs}:{short}"


@dataclass(frozen=True, slots=True)
class Pool:
    """A pool as one worker process runs it."""

    name: str
    tenants: tuple[str, ...]  # dedicated; () for a shared pool
    kinds: tuple[str, ...] | None
    workers: int
    short_lanes: int
    metrics_offset: int | None  # of instance 1; None: the default pool (its number)
    exclude: tuple[str, ...]  # tenants dedicated to the other pools

    @property
    def scope(self) -> Scope:
        tenants = self.tenants or None
        return Scope(self.name, self.name, tenants, () if tenants else self.exclude, self.kinds)

    @property
    def short_scope(self) -> Scope | None:
        """The short lanes' scope: the pool's short kinds; None if it has none."""
        short = _SHORT if self.kinds is None else sorted(set(self.kinds) & set(_SHORT))
        if not short:
            return None
        base = self.scope
        return Scope(
            self.name, f"{self.name}:short", base.tenants, base.exclude, tuple(short), short=True
        )

    def lane_scopes(self) -> list[Scope]:
        """One scope per lane: ``workers`` of the pool's, then its short lanes."""
        short = self.short_scope
        lanes = [self.scope] * self.workers
        if short is None or short.kinds == self.kinds:  # none, or every lane is short already
            return lanes
        return lanes + [short] * self.short_lanes


def dedicated(config: WorkerConfig) -> dict[str, str]:
    """Tenant -> the pool it is dedicated to."""
    return {t: p.name for p in config.pools for t in p.tenants}


def pool_names(config: WorkerConfig) -> list[str]:
    """Every pool, ``default`` first (listed or not)."""
    names = [p.name for p in config.pools if p.name != DEFAULT_POOL]
    return [DEFAULT_POOL, *names]


def resolve(config: WorkerConfig, name: str = DEFAULT_POOL) -> Pool:
    """The pool called ``name``; ConfigError if the config has none of that name."""
    listed: PoolConfig | None = next((p for p in config.pools if p.name == name), None)
    if listed is None and name != DEFAULT_POOL:
        known = ", ".join(pool_names(config))
        raise ConfigError(f"no pool {name!r} in [[worker.pools]]; pools: {known}")
    owners = dedicated(config)
    exclude = tuple(sorted(t for t, owner in owners.items() if owner != name))
    offset: int | None = None
    if name != DEFAULT_POOL:
        assert listed is not None
        position = [p.name for p in config.pools if p.name != DEFAULT_POOL].index(name) + 1
        offset = listed.metrics_offset
        if offset is None:
            offset = METRICS_OFFSET_STEP * position
    return Pool(
        name=name,
        tenants=tuple(listed.tenants) if listed else (),
        kinds=tuple(listed.kinds) if listed and listed.kinds else None,
        workers=(listed.workers if listed and listed.workers else None) or config.concurrency,
        short_lanes=(
            listed.short_lanes
            if listed is not None and listed.short_lanes is not None
            else config.short_lanes
        ),
        metrics_offset=offset,
        exclude=exclude,
    )


@dataclass(frozen=True, slots=True)
class Instance:
    """A systemd instance name (``ingestd-worker@INSTANCE``) read against the config."""

    pool: str
    number: int
    metrics_offset: int


def instance(config: WorkerConfig, text: str) -> Instance:
    """``N`` is the default pool's Nth worker; ``NAME`` or ``NAME-N`` pool NAME's."""
    if text.isdigit():
        return Instance(DEFAULT_POOL, int(text), int(text))
    names = set(pool_names(config))
    match = _INSTANCE.match(text)
    if text in names:
        pool, number = text, 1
    elif match and match["n"] and match["pool"] in names:
        pool, number = match["pool"], int(match["n"])
    else:
        known = ", ".join(sorted(names))
        raise ConfigError(
            f"worker instance {text!r} names no pool: give a number (the default pool) or "
            f"a pool of [[worker.pools]], optionally with -N ({known})"
        )
    if number < 1:
        raise ConfigError(f"worker instance {text!r}: instances count from 1")
    resolved = resolve(config, pool)
    base = resolved.metrics_offset if resolved.metrics_offset is not None else 0
    return Instance(pool, number, base + number - (0 if pool == DEFAULT_POOL else 1))


def rescope(config: WorkerConfig, scope: Scope) -> Scope:
    """A lane's scope under a reloaded config: its pool's tenants and kinds may have
    changed; the number of lanes changes with a restart only (ConfigError if this short
    lane's pool has no short kinds any more, or the pool is gone)."""
    if scope is EVERYTHING:  # a lane made without a pool (tests, embedders)
        return EVERYTHING
    pool = resolve(config, scope.pool)
    new = pool.short_scope if scope.short else pool.scope
    if new is None:
        raise ConfigError(
            f"pool {pool.name!r} no longer has short kinds for this short lane; "
            "restart the worker to change its lanes"
        )
    return new
