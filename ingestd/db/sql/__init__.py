"""SQL files: migrations/NNNN_name.sql, and named queries in queries/*.sql (one per domain).

All query files share one namespace: a name defined twice, in one file or in two, is an
error at load. schema.sql is the current schema to read (a test keeps it equal to what the
migrations build); nothing loads it at run time.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def parse_queries(files: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The named queries of (file name, text) pairs, in one namespace."""
    queries: dict[str, str] = {}
    origin: dict[str, str] = {}
    for filename, text in files:
        parts = _NAME.split(text)
        # parts = [preamble, name1, body1, name2, body2, ...]
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise ValueError(
                    f"query {name!r} defined twice: in {origin[name]} and in {filename}"
                )
            queries[name] = body.strip()
            origin[name] = filename
    return queries


@functools.cache
def queries() -> dict[str, str]:
    folder = resources.files(__package__).joinpath("queries")
    files = sorted(
        (f"queries/{entry.name}", entry.read_text("utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )
    return parse_queries(files)


def query(name: str) -> str:
    try:
        return queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in ingestd/db/sql/queries/*.sql") from None


@functools.cache
def migrations() -> tuple[Migration, ...]:
    found = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        m = _MIGRATION.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return tuple(found)
