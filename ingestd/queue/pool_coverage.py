"""Which jobs no pool of the config serves (check-config and the daemon's start warn).

A tenant dedicated to a pool ([[worker.pools]] ``tenants``) is served by that pool only;
when the pool runs only some ``kinds``, the tenant's jobs of every other kind wait for
ever. The same holds for the tenants no pool is dedicated to, when every shared pool
(``default`` among them) is listed with kinds. Each gap is one line naming the pool, the
tenants and the kinds, decided as the claim decides (``Scope.serves``).
"""

from __future__ import annotations

from ingestd.config.settings import DEFAULT_POOL, WorkerConfig
from ingestd.jobkinds import SYSTEM_TENANT, JobKind
from ingestd.queue import pools

# A name no config can give a tenant: stands for every tenant no pool is dedicated to.
_ANY_OTHER = "\x00other"


def _needed(tenant: str) -> list[str]:
    """The kinds a tenant's jobs come in: notifications run as the system tenant."""
    if tenant == SYSTEM_TENANT:
        return [str(JobKind.notify)]
    return [str(k) for k in JobKind if k != JobKind.notify]


def uncovered(config: WorkerConfig) -> list[str]:
    """One line per group of tenants with job kinds no pool serves; empty: all served."""
    scopes = [pools.resolve(config, name).scope for name in pools.pool_names(config)]
    owners = pools.dedicated(config)
    lines: list[str] = []
    for pool in config.pools:
        for tenant in pool.tenants:
            missing = [k for k in _needed(tenant) if not any(s.serves(tenant, k) for s in scopes)]
            if missing:
                lines.append(
                    f"worker.pools: tenant {tenant!r} is dedicated to pool {pool.name!r}, "
                    f"which runs only {', '.join(pool.kinds)}: its {', '.join(missing)} "
                    "jobs would wait for ever (add those kinds to the pool, or leave "
                    "kinds empty)"
                )
    for tenant, label in ((_ANY_OTHER, "tenants no pool is dedicated to"),
                          (SYSTEM_TENANT, "notifications (the _system tenant)")):  # fmt: skip
        if tenant in owners:
            continue
        missing = [k for k in _needed(tenant) if not any(s.serves(tenant, k) for s in scopes)]
        if missing:
            shared = [p.name for p in config.pools if not p.tenants]
            if DEFAULT_POOL not in shared:
                shared.insert(0, DEFAULT_POOL)
            lines.append(
                f"worker.pools: no pool runs {', '.join(missing)} for {label} (shared "
                f"pools: {', '.join(shared)}; their kinds leave these out)"
            )
    return lines
