"""Uploads still in progress, as the spool holds them, for ``ingestd status``.

An open write handle has its private file in ``partial/`` (``[<owner>-]<account>.<id>``,
the id starting with the time it was opened); a closed upload that still carries a temp
name (``scan.pdf.part``) waits in its account's inbox for the client's rename. Neither is
in the queue yet, so neither is counted as "waiting for intake". The daemon reports these
in its state file; ``status`` reads the spool itself when no daemon reports.
"""

from __future__ import annotations

import fnmatch
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# `status` lists at most this many of each kind (a flood of open uploads must not make
# the state file huge), with the totals.
SHOWN = 50

_PARTIAL = re.compile(r"^(?:p\d+\.\d+-)?(?P<account>.+)\.(?P<ns>\d{20})-[0-9a-f]{8}$")


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def open_uploads(spool_root: Path) -> list[dict[str, Any]]:
    """Open write handles: account, bytes so far, opened and last written."""
    out: list[dict[str, Any]] = []
    try:
        names = sorted(os.listdir(spool_root / "partial"))
    except OSError:
        return out
    for name in names:
        m = _PARTIAL.match(name)
        if m is None:
            continue
        try:
            st = os.lstat(spool_root / "partial" / name)
        except OSError:
            continue  # closed meanwhile
        out.append(
            {
                "account": m.group("account"),
                "bytes": st.st_size,
                "opened_at": _iso(int(m.group("ns")) / 1e9),
                "written_at": _iso(st.st_mtime),
            }
        )
    return out


def temp_named(spool_root: Path, temp_names: list[str]) -> list[dict[str, Any]]:
    """Closed uploads still under a temp name (waiting for the client's rename)."""
    patterns = [p.lower() for p in temp_names]
    out: list[dict[str, Any]] = []
    inbox = spool_root / "inbox"
    try:
        accounts = sorted(os.listdir(inbox))
    except OSError:
        return out
    for account in accounts:
        for dirpath, _dirs, files in os.walk(inbox / account):
            for name in files:
                if not any(fnmatch.fnmatchcase(name.lower(), p) for p in patterns):
                    continue
                path = Path(dirpath) / name
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                out.append(
                    {
                        "account": account,
                        "name": str(path.relative_to(inbox / account)),
                        "bytes": st.st_size,
                        "written_at": _iso(st.st_mtime),
                    }
                )
                if len(out) > SHOWN:
                    return out
    return out


def uploads_in_progress(spool_root: Path, temp_names: list[str]) -> dict[str, Any]:
    """Both kinds, for the state file and ``status``: the first ``SHOWN`` and totals."""
    handles = open_uploads(spool_root)
    renames = temp_named(spool_root, temp_names)
    return {
        "open": handles[:SHOWN],
        "open_total": len(handles),
        "open_bytes": sum(u["bytes"] for u in handles),
        "temp_named": renames[:SHOWN],
        "temp_named_total": len(renames),
    }
