"""The README is an admin's guide and the internals live in docs/ (issue #30, point 8).

Pins what the split promised: the guide's sections under names an admin looks for, a
length a person reads, the internals out of it, every docs/ file reachable from it, and
no link between the README and docs/ that leads nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")
# The sections other parts of issue #30 add lines to, and an admin looks for by name.
GUIDE_SECTIONS = (
    "## Getting started",
    "## Add a tenant",
    "## Add a scanner",
    "## Add a hot folder",
    "## Find a file",
    "## Monitoring and alerts",
    "## Back up and restore",
    "## Upgrade",
    "## Exit codes",
    "## When something goes wrong",
)
# Words of the internals: each lives in a docs/ file, never in the admin's guide.
INTERNALS = {
    "SCM_RIGHTS": "sftp.md",
    "stride scheduling": "queue.md",
    "loose index scan": "queue.md",
    "audit_append": "audit.md",
    "Database.pipelined": "architecture.md",
    "tesserocr": "analysis.md",
}


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation gone, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {
        _slug(line.lstrip("#"))
        for line in path.read_text().splitlines()
        if re.match(r"#{1,6} ", line)
    }


def test_readme_has_the_guide_sections_in_order() -> None:
    """Each guide section is a heading of the README, in the order an admin needs them."""
    headings = [line for line in README.read_text().splitlines() if line.startswith("## ")]
    positions = [headings.index(name) for name in GUIDE_SECTIONS]
    assert positions == sorted(positions)


def test_readme_is_a_guide_not_a_manual() -> None:
    """The README stays short enough to read; the old one was 1,400 lines."""
    assert len(README.read_text().splitlines()) < 600


@pytest.mark.parametrize(("words", "doc"), sorted(INTERNALS.items()))
def test_internals_live_in_docs(words: str, doc: str) -> None:
    """An internal detail is in its docs/ file and not in the README."""
    assert words not in README.read_text()
    assert words in (DOCS / doc).read_text()


def test_every_docs_file_is_linked_from_the_readme() -> None:
    """No docs/ file is an orphan: the README's list reaches every one."""
    links = set(LINK.findall(README.read_text()))
    for doc in sorted(DOCS.glob("*.md")):
        assert f"docs/{doc.name}" in links, f"{doc.name} is not linked from the README"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: p.name)
def test_links_between_readme_and_docs_resolve(path: Path) -> None:
    """Every relative link names a file that exists and, with #anchor, a heading in it."""
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
            broken.append(target)
    assert not broken, f"{path.name}: links that lead nowhere: {broken}"
