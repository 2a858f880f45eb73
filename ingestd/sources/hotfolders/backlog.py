"""What waits in the hot folders as seen on disk, for ``ingestd status``.

Read by another process than the daemon, also while the database and the daemon are
down: it walks the folders itself and knows nothing of what the watcher has pending.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ingestd.config.settings import Config
from ingestd.sources.hotfolders.folders import ignored

# `ingestd status` counts at most this many entries per folder (a share with a million
# files must not make status hang).
BACKLOG_SCAN_LIMIT = 100_000


def backlog_on_disk(config: Config) -> list[dict[str, Any]]:
    """Files waiting in each hot folder as seen on disk (``ingestd status``, also while the
    database and the daemon are down): count, bytes, oldest mtime."""
    patterns = [p.lower() for p in config.hotfolders.ignore]
    out: list[dict[str, Any]] = []
    for w in config.watch:
        entry: dict[str, Any] = {
            "folder": str(w.path),
            "tenant": w.tenant,
            "files": 0,
            "bytes": 0,
            "oldest_mtime": None,
            "truncated": False,
        }
        if not w.path.is_dir():
            entry["missing"] = True
            out.append(entry)
            continue
        seen = 0
        oldest: float | None = None
        for dirpath, dirs, files in os.walk(w.path, followlinks=False):
            base = Path(dirpath)
            dirs[:] = [d for d in dirs if not ignored((base / d).relative_to(w.path), patterns)]
            for name in files:
                seen += 1
                path = base / name
                if ignored(path.relative_to(w.path), patterns):
                    continue
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                entry["files"] += 1
                entry["bytes"] += st.st_size
                oldest = st.st_mtime if oldest is None else min(oldest, st.st_mtime)
            if seen >= BACKLOG_SCAN_LIMIT:
                entry["truncated"] = True
                break
        entry["oldest_mtime"] = oldest
        out.append(entry)
    return out
