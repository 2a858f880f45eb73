"""The import graph of the product code, computed from the source files: no cycles, and
every import points down the layers below (the path of a file, then what runs it)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Lowest first. A module may import its own layer and the ones before it. Prefixes name
# packages or modules; the longest prefix that matches a module decides its layer.
LAYERS: list[list[str]] = [
    # Leaves: vocabulary every layer speaks, importing nothing of ours but each other.
    [
        "ingestd",
        "ingestd.states",
        "ingestd.errors",
        "ingestd.log",
        "ingestd.textsafe",
        "ingestd.xmlsafe",  # (issue 33) every parse of outside XML: no entities, no DTD, bounded
        "ingestd.passwords",
        "ingestd.durable",
        "ingestd.filenames",  # titles and dates from file names, scanners' auto-names
        "ingestd.jobkinds",  # the job kinds and their facts (SQL and config name them)
    ],
    ["ingestd.db"],  # the pool, the schema, the embedded cluster, the SQL files
    ["ingestd.config"],  # the config schema (checks conninfo with db's parser)
    ["ingestd.runtime"],  # process plumbing: metrics, health, signals, sd_notify, state dir
    ["ingestd.arrivals"],  # (issue 30) the arrival rows; the event log writes them too
    [
        "ingestd.archive",
        "ingestd.queue",
        "ingestd.tenants",
        "ingestd.events",  # the operator events' outbox
        "ingestd.search",
        "ingestd.people",  # (issue 31) people, their capability sets, logins
    ],
    ["ingestd.intake"],  # the one hand-off: archive + row + job in one transaction
    ["ingestd.sources"],  # hot folders and SFTP decide when a file is complete
    # The daemon and the wiring of a Config to live parts; operator tasks; demo data.
    ["ingestd.daemon", "ingestd.ops", "ingestd.demo"],
    ["ingestd.web"],  # (issue 31) the web console: pages over people, search, hand-out
    ["worker"],  # the runtime and job handlers build on the core
    ["ingestd.cli"],  # the entry point: the only part of ingestd that may import worker
]


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in ("ingestd", "worker"):
        for path in (REPO / pkg).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def _runtime_imports(
    tree: ast.Module, *, typing_too: bool = False
) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import, at any depth (a function's lazy import counts); those under
    ``if TYPE_CHECKING:`` only with ``typing_too`` (they never run, but a cycle hidden
    there is still two modules that each need the other to be understood)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if (
            not typing_too
            and isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test)
        ):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _graph(*, typing_too: bool = False) -> dict[str, set[str]]:
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in _runtime_imports(tree, typing_too=typing_too):
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names]
            elif node.module and node.level == 0:
                targets = [
                    f"{node.module}.{a.name}"
                    if f"{node.module}.{a.name}" in mods
                    else resolve(node.module)
                    for a in node.names
                ]
            else:
                targets = []
            edges[mod] |= {t for t in targets if t is not None and t != mod}
    return edges


def _layer(mod: str) -> int | None:
    best: tuple[int, int] | None = None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = mod == prefix or (prefix != "ingestd" and mod.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[1]):
                best = (i, len(prefix))
    return None if best is None else best[0]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycles() -> None:
    """No two product modules import each other, directly or around a circle, counting
    the imports under ``if TYPE_CHECKING:`` too (a cycle hidden there is still one)."""
    assert _cycles(_graph(typing_too=True)) == []


def test_every_module_has_a_layer() -> None:
    """A new module is placed in LAYERS on purpose, not by accident of its name."""
    assert [m for m in _graph() if _layer(m) is None] == []


def test_imports_point_down_the_layers() -> None:
    """No module imports a layer above its own: worker builds on ingestd, and only the
    CLI, the entry point, imports worker."""
    edges = _graph()
    upward = [
        f"{mod} -> {target}"
        for mod, targets in sorted(edges.items())
        for target in sorted(targets)
        if (_layer(target) or 0) > (_layer(mod) or 0)
    ]
    assert upward == []


def test_the_checker_sees_a_cycle_and_an_upward_import() -> None:
    """The graph code finds what it is for (a cycle, a layer skipped upward)."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    hidden = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\n")
    assert [n for n in _runtime_imports(hidden) if isinstance(n, ast.Import)] == []
    assert (
        len([n for n in _runtime_imports(hidden, typing_too=True) if isinstance(n, ast.Import)])
        == 1
    )
    assert _layer("ingestd.sources.sftp.vfs") > _layer("ingestd.intake.ingest")  # type: ignore[operator]
    assert _layer("worker.runner") > _layer("ingestd.daemon.serve")  # type: ignore[operator]
    assert _layer("ingestd.cli.main") > _layer("worker.runner")  # type: ignore[operator]


def test_the_layer_table_names_whole_packages() -> None:
    """No special cases: each line of LAYERS is a package (or a top-level module) of
    ingestd, or worker; a module that belongs lower than its package moves instead."""
    names = [name for layer in LAYERS for name in layer]
    assert [n for n in names if n != "worker" and n.count(".") > 1] == []
    assert len(names) == len(set(names))


def test_no_private_name_is_imported_from_another_module() -> None:
    """A helper another module needs is public where it lives; `_name` stays private."""
    found = [
        f"{mod}: from {node.module} import {alias.name}"
        for mod, path in sorted(_modules().items())
        for node in _runtime_imports(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").split(".")[0] in ("ingestd", "worker")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert found == []
