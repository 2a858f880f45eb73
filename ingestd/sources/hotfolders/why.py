"""Why a hot-folder file waits, and the command that ends the wait (``ingestd status``).

The daemon writes these into its state file, so ``status`` can say it during a database
outage too: a file left in place after a failure names the cause (``tenant_inactive``,
``source``, ``database``, ...), the error's text and a fix; a folder or file this process
may not use names the entry that blocks it, its owner and mode, and the ``chown``/``chmod``
that lets the daemon's user in.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
from pathlib import Path
from typing import Any

from ingestd.runtime.statedir import group_name, user_name
from ingestd.sources.hotfolders.folders import AccessProblem, Folder
from ingestd.sources.hotfolders.table import PendingFile
from ingestd.sources.hotfolders.unblock import chain

# The state file lists this many waiting files (with the total).
WAITING_SHOWN = 100


def access_fix(path: Path, need: str) -> str:
    """The command that gives this process ``need`` (letters of ``rwx``) on ``path``: a
    ``chmod`` of the owner's bits when the path is ours, else of the group's bits, with a
    ``chgrp`` to our own group first when the path's group is not one of ours."""
    try:
        st = os.stat(path)
    except OSError:
        me = user_name(os.geteuid())
        return f"check that {path} exists and that its parent folders let {me} in"
    quoted = shlex.quote(str(path))
    if st.st_uid == os.geteuid():
        return f"chmod u+{need} {quoted}"
    groups = {os.getegid(), *os.getgroups()}
    if st.st_gid in groups:
        return f"chmod g+{need} {quoted}"
    return f"chgrp {shlex.quote(group_name(os.getegid()))} {quoted} && chmod g+{need} {quoted}"


def owner_mode(path: Path) -> str:
    """``user:group drwxr-x---`` of ``path`` (or why it cannot be told)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"unknown ({exc.strerror})"
    return f"{user_name(st.st_uid)}:{group_name(st.st_gid)} {stat.filemode(st.st_mode)}"


def blocking_entry(root: Path, path: Path) -> tuple[Path, str] | None:
    """The first entry from ``root`` down to the file ``path`` that this process may not
    use, and what it needs there (``rx`` for a directory, ``r`` for the file); None if
    nothing on the way denies access."""
    entries = chain(root, path)
    for entry in entries[:-1]:
        if not os.access(entry, os.R_OK | os.X_OK):
            return entry, "rx"
    if not os.access(path, os.R_OK) and os.path.lexists(path):
        return path, "r"
    return None


def _why(path: Path, pending: PendingFile) -> dict[str, Any]:
    tenant = pending.folder.cfg.tenant
    cause = pending.waiting_cause
    entry: dict[str, Any] = {
        "path": str(path),
        "tenant": tenant,
        "cause": cause,
        "detail": pending.waiting_detail,
        "attempts": pending.attempts,
        "fix": None,
    }
    if cause == "tenant_inactive":
        status = pending.tenant_reported[0] if pending.tenant_reported else "not active"
        entry["tenant_status"] = status
        entry["fix"] = (
            f"ingestd tenant activate {tenant}"
            if status == "suspended"
            else f"ingestd tenant list (tenant {tenant}: {status})"
        )
    elif cause == "source":
        blocked = blocking_entry(pending.folder.cfg.path, path)
        if blocked is not None:
            where, need = blocked
            entry["blocked_by"] = str(where)
            entry["owner_mode"] = owner_mode(where)
            entry["error"] = os.strerror(errno.EACCES)
            entry["fix"] = access_fix(where, need)
    elif cause == "database":
        entry["fix"] = "the file is taken once the database is back (see `database:` above)"
    return entry


def waiting_files(pending: list[tuple[Path, PendingFile]]) -> dict[str, Any]:
    """Files left in place after a failed attempt (taken from the table under its lock;
    asked here without it, a share not answering must not stall the settle thread): the
    first ``WAITING_SHOWN`` with cause and fix, the total, and counts by tenant and cause."""
    waiting = sorted(((p, c) for p, c in pending if c.attempts > 0), key=lambda pc: pc[0])
    counts: dict[str, dict[str, int]] = {}
    for _path, c in waiting:
        by_cause = counts.setdefault(c.folder.cfg.tenant, {})
        key = c.waiting_cause or "unknown"
        by_cause[key] = by_cause.get(key, 0) + 1
    return {
        "files": [_why(p, c) for p, c in waiting[:WAITING_SHOWN]],
        "total": len(waiting),
        "by_tenant": counts,
    }


def folder_report(folder: Folder, problem: AccessProblem | None) -> dict[str, object]:
    """A hot folder that is missing (``problem`` None) or that this process may not use,
    for ``ingestd status``: what it cannot do, with the errno text and the fix."""
    path = folder.cfg.path
    if problem is None:
        return {
            "folder": str(path),
            "tenant": folder.cfg.tenant,
            "missing": True,
            "error": os.strerror(errno.ENOENT),
            "fix": f"mount or create {path} (ingestd never creates a hot folder)",
        }
    return {
        "folder": str(path),
        "tenant": folder.cfg.tenant,
        "missing": False,
        "cannot": list(problem.cannot),
        "error": os.strerror(errno.EACCES),
        "folder_owner": problem.folder_owner,
        "running_as": problem.running_as,
        "fix": access_fix(path, "rwx"),
    }


def unlistable_report(unlistable: dict[Path, Folder]) -> list[dict[str, Any]]:
    """Sub-folders a scan could not list (their files are not even seen), with the fix."""
    return [
        {
            "path": str(path),
            "tenant": folder.cfg.tenant,
            "folder_owner": owner_mode(path),
            "error": os.strerror(errno.EACCES),
            "fix": access_fix(path, "rx"),
        }
        for path, folder in sorted(unlistable.items(), key=lambda pf: pf[0])[:WAITING_SHOWN]
    ]
