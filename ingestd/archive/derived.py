"""Where a document's derived data lives (``paths.derived``): the searchable PDF, the
thumbnail, the text and the page previews of one document are in one folder named after
its archived file, so they are found from the document's record alone.

Invariants enforced here, for every reader and writer of derived data (analysis, the
hand-out, the console's previews):
- a document's folder is ``<derived>/<archive path without its extension>/``; an archive
  path that is absolute or climbs (``..``) names no folder;
- a path read from the database is used only if it stays inside ``paths.derived`` once
  resolved (symbolic links included): the database is not trusted to keep it there.
"""

from __future__ import annotations

from pathlib import Path


def folder(root: Path, archive_path: str) -> Path:
    """``<root>/<tenant>/<yyyy>/<mm>/<sha256>/`` for the archived file ``archive_path``;
    ValueError for a path that is not a relative archive path."""
    rel = Path(archive_path).with_suffix("")
    if not archive_path or rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"archive path {archive_path!r} is not a relative archive path")
    return root / rel


def inside(root: Path, stored: str | None) -> Path | None:
    """The file a stored path (relative to ``root``) names, resolved; None for no path
    or one that would leave ``root``."""
    if not stored:
        return None
    real_root = root.resolve()
    path = (real_root / stored).resolve()
    return path if real_root in path.parents else None
