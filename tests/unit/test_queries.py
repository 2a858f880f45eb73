"""The named queries (ingestd/db/sql/queries/*.sql) against the code that runs them.

Every query is run by product code (ingestd/, worker/): a query nothing runs is dead and
goes; SQL only tests need lives in the tests (tests/fixtures/sql.py). Every query name
the code passes to a transaction, a pipelined batch or the database exists. Names are
found as string literals in the source (ast), which is how every call site spells them;
a name picked at run time (``query = "a" if ... else "b"``) is still a literal somewhere.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingestd.db import sql

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("ingestd", "worker")
EVERYWHERE = (*PRODUCT, "bench", "tests", "scripts")
# Methods that take a query name first: Tx.one/all/run/stream, Batch.one/commit_with,
# Database.one/all, sql.query.
_TAKES_A_NAME = frozenset({"one", "all", "run", "stream", "commit_with", "query"})
# Receivers of those methods that are ours (``runner.run("audit", ...)`` is a CLI call).
_RECEIVERS = ("tx", "db", "batch", "sql")


def _trees(roots: tuple[str, ...]) -> Iterator[tuple[Path, ast.AST]]:
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            yield path, ast.parse(path.read_text("utf-8"), str(path))


def _string_literals(roots: tuple[str, ...]) -> set[str]:
    return {
        node.value
        for _, tree in _trees(roots)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def _names_asked_for() -> Iterator[tuple[str, str]]:
    """(name, where) of every literal query name passed to one of our query methods."""
    for path, tree in _trees(EVERYWHERE):
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in _TAKES_A_NAME:
                continue
            receiver = ast.unparse(node.func.value).rsplit(".", 1)[-1]
            if not receiver.endswith(_RECEIVERS):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield first.value, where
            for kw in node.keywords:  # commit_with(..., also=[("name", {...}), ...])
                if kw.arg == "also" and isinstance(kw.value, ast.List | ast.Tuple):
                    for item in kw.value.elts:
                        if isinstance(item, ast.Tuple) and isinstance(item.elts[0], ast.Constant):
                            yield str(item.elts[0].value), where


def test_every_query_is_run_by_product_code() -> None:
    """No dead query, and none kept for tests only: product code names each of them."""
    used = _string_literals(PRODUCT)
    unused = sorted(set(sql.queries()) - used)
    assert unused == [], f"queries no product code runs (delete them, or move to tests): {unused}"


def test_every_name_the_code_asks_for_exists() -> None:
    """Every literal name given to tx/db/batch/sql query methods is a defined query."""
    names = set(sql.queries())
    asked = list(_names_asked_for())
    assert len(asked) > 100  # the scan finds the call sites (it would pass vacuously if not)
    missing = [f"{name} ({where})" for name, where in asked if name not in names]
    assert missing == []


def test_query_files_are_split_by_domain() -> None:
    """Named queries live in queries/*.sql, one file per domain; each file holds some."""
    folder = ROOT / "ingestd" / "db" / "sql" / "queries"
    files = sorted(folder.glob("*.sql"))
    assert len(files) > 1
    assert not (folder.parent / "queries.sql").exists()
    for path in files:
        assert sql.parse_queries([(path.name, path.read_text("utf-8"))]), path.name


def test_a_name_defined_in_two_files_is_refused() -> None:
    """One namespace across files: a duplicate name is an error naming both files."""
    a = ("queries/a.sql", "-- name: same\nSELECT 1;\n")
    b = ("queries/b.sql", "-- name: other\nSELECT 2;\n-- name: same\nSELECT 3;\n")
    with pytest.raises(
        ValueError, match=r"'same' defined twice: in queries/a.sql and in queries/b.sql"
    ):
        sql.parse_queries([a, b])


def test_a_name_defined_twice_in_one_file_is_refused() -> None:
    """Within one file too."""
    text = "-- name: same\nSELECT 1;\n-- name: same\nSELECT 2;\n"
    with pytest.raises(ValueError, match="defined twice"):
        sql.parse_queries([("queries/a.sql", text)])
