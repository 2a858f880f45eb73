"""Every dependency pyproject.toml declares for the product is imported by the product
(ingestd/, worker/): a library nobody imports is weight in every install and a stale
promise in the docs. The few that are used without an import say why below."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Declared, used, but never imported by our code: the reason is the exemption.
USED_WITHOUT_IMPORT = {
    "python-multipart": "Starlette parses the login and upload forms with it",
    "jinja2": "the console's templates, through starlette.templating.Jinja2Templates",
    # Its command line runs as a child process (python -m ocrmypdf, worker/analysis/ocr/
    # engine.py): the package is never imported into the job child on purpose.
    "ocrmypdf": "engine ocrmypdf and mode redo run its command line",
}


def _declared() -> list[str]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return [re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0].lower() for d in deps]


def _imported_top_levels() -> set[str]:
    names: set[str] = set()
    for package in ("ingestd", "worker"):
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.add(node.module.split(".")[0])
    return names


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_declared_dependency_is_imported_by_the_product() -> None:
    """Each declared distribution provides a module ingestd or worker imports."""
    provides: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            provides.setdefault(_normal(dist), set()).add(module)
    imported = _imported_top_levels()
    unused = [
        dep
        for dep in _declared()
        if _normal(dep) not in USED_WITHOUT_IMPORT
        and not provides.get(_normal(dep), set()) & imported
    ]
    assert unused == []


def test_the_exemptions_are_still_declared() -> None:
    """An exemption for a dependency no longer declared is stale."""
    declared = {_normal(d) for d in _declared()}
    assert [name for name in USED_WITHOUT_IMPORT if _normal(name) not in declared] == []
