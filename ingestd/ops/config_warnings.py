"""What a config may say that works but serves nothing: warnings, not refusals.

Printed by ``ingestd check-config`` (``--online`` adds the database's tenants) and logged
at every daemon start (``config.warning``). Each is one line starting with its key path:

- a tenant the config names (a hot folder, an SFTP account, a pool, a workflow, a
  taxonomy or retention rule, a split default) that the database does not know: its
  files wait, its rules never match (``ingestd tenant create NAME``);
- a hot folder (``[[watch]] path``) that does not exist or is not a directory: nothing
  dropped there can arrive;
- job kinds of a pool's tenants that no pool serves (ingestd/queue/pool_coverage.py).
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Collection

from ingestd.config.settings import Config
from ingestd.queue import pool_coverage


def named_tenants(config: Config) -> list[tuple[str, str]]:
    """(key path, tenant) for every tenant the config names, in config order."""
    named: list[tuple[str, str]] = []
    named += [(f"watch[{i}].tenant", w.tenant) for i, w in enumerate(config.watch)]
    named += [(f"sftp.accounts[{i}].tenant", a.tenant) for i, a in enumerate(config.sftp.accounts)]
    for i, pool in enumerate(config.worker.pools):
        named += [(f"worker.pools[{i}].tenants", t) for t in pool.tenants]
    named += [(f"workflows[{i}].tenant", w.tenant) for i, w in enumerate(config.workflows)]
    named += [(f"taxonomy[{i}].tenant", r.tenant) for i, r in enumerate(config.taxonomy)]
    named += [(f"retention.tenant_years.{t}", t) for t in config.retention.tenant_years]
    named += [
        (f"retention.rules[{i}].tenant", r.tenant)
        for i, r in enumerate(config.retention.rules)
        if r.tenant != "*"
    ]
    named += [(f"split.{t}", t) for t in config.split]
    return named


def unknown_tenants(config: Config, known: Collection[str]) -> list[str]:
    """A line per tenant the config names that is not among ``known`` (the database's),
    with every key that names it."""
    keys: dict[str, list[str]] = {}
    for key, tenant in named_tenants(config):
        if tenant not in known:
            keys.setdefault(tenant, []).append(key)
    return [
        f"{where[0]}: tenant {tenant!r} does not exist in the database (named by "
        f"{', '.join(where)}): its files wait, its rules never run; ingestd tenant create "
        f"{tenant}"
        for tenant, where in keys.items()
    ]


def missing_folders(config: Config) -> list[str]:
    """A line per hot folder that does not exist, is not a directory, or cannot be
    reached by the user this runs as (the service user, when run as root)."""
    lines = []
    for i, w in enumerate(config.watch):
        try:
            st = w.path.stat()
        except FileNotFoundError:
            lines.append(f"watch[{i}].path: {w.path} does not exist: nothing can arrive there")
            continue
        except OSError as exc:
            lines.append(
                f"watch[{i}].path: {w.path} cannot be reached by {_user()}: "
                f"{exc.strerror} (a folder above it closed to that user?)"
            )
            continue
        if not stat.S_ISDIR(st.st_mode):
            lines.append(f"watch[{i}].path: {w.path} is not a directory")
    return lines


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def offline_warnings(config: Config) -> list[str]:
    """Every warning that needs no database: hot folders, pool coverage."""
    return [*missing_folders(config), *pool_coverage.uncovered(config.worker)]
