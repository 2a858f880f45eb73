"""Files waiting after a failure whose cause an operator fixed: retried at once.

A hot-folder file that could not be read (a sub-folder of mode 0000, a file of another
user's 0600) waits out its backoff, up to ``retry_max_delay``; a committed file that
could not be removed waits the same way. When an operator runs the ``chmod``/``chown``
that ``ingestd status`` names, waiting minutes for the next attempt looks like the fix did
not work. So the folder check (every ``folder_check_interval``) also stats what decides
such a file's access: each directory from the folder's root down to the file, and the
file itself. A change of mode or owner since the last check makes every waiting file
below that entry due now, its backoff started anew. A sub-folder a scan could not list
(mode 0000: its files are not even seen) is watched the same way and scanned at once
instead of at the next full rescan. One ``stat()`` per distinct entry,
for at most ``WATCHED_LIMIT`` of them per check.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from ingestd.log import Logger
from ingestd.sources.hotfolders.folders import Folder
from ingestd.sources.hotfolders.table import FileTable, StuckAction

# At most this many directories and files are stat()ed per check (a share with a
# million unreadable files must not turn the folder check into a crawl).
WATCHED_LIMIT = 2000

Access = tuple[int, int, int] | None  # mode, uid, gid; None: cannot be stat()ed


def access_of(path: Path) -> Access:
    """What decides who may use ``path``: its mode and owner (None: no stat)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_mode, st.st_uid, st.st_gid)


def chain(root: Path, path: Path) -> list[Path]:
    """``root``, each directory between it and ``path``, and ``path`` itself."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return [path]
    out = [root]
    for part in rel.parts:
        out.append(out[-1] / part)
    return out


class Unblocker:
    """Notices mode/owner changes above files that wait after a failure (folder check
    thread only)."""

    def __init__(
        self, table: FileTable, log: Logger, rescan: Callable[[Folder, Path], object]
    ) -> None:
        self.table = table
        self.log = log
        self.rescan = rescan  # a sub-folder that may be listable now: scan it
        self._seen: dict[Path, Access] = {}

    def _waiting(self) -> list[tuple[Path, Path]]:
        """(file or unlistable sub-folder, its folder's root) of everything waiting for
        a fix (lock held)."""
        t = self.table
        out = [(p, c.folder.cfg.path) for p, c in t.pending.items() if c.attempts > 0]
        out += [(p, s.folder.cfg.path) for p, s in t.stuck.items() if s.action != StuckAction.keep]
        out += [(p, f.cfg.path) for p, f in t.unlistable.items()]
        return out

    def check(self) -> int:
        """Stat what decides the waiting files' access; make those below a change due now.
        Returns how many files were made due."""
        with self.table.lock:
            waiting = self._waiting()
        if not waiting and not self._seen:
            return 0
        now_seen: dict[Path, Access] = {}
        for path, root in waiting:
            for entry in chain(root, path):
                if entry not in now_seen:
                    if len(now_seen) >= WATCHED_LIMIT:
                        break
                    now_seen[entry] = access_of(entry)
        changed = {
            e for e, access in now_seen.items() if e in self._seen and self._seen[e] != access
        }
        self._seen = now_seen
        with self.table.lock:
            unlistable = list(self.table.unlistable)
        # A sub-folder noted as unlistable before its first check here: whether it may be
        # listed now is its own question (an ACL or a group may have changed, too).
        changed.update(d for d in unlistable if os.access(d, os.R_OK | os.X_OK))
        if not changed:
            return 0
        made_due: list[Path] = []
        now = time.monotonic()
        t = self.table
        with t.lock:
            for path, pending in list(t.pending.items()):
                if pending.attempts > 0 and changed.intersection(
                    chain(pending.folder.cfg.path, path)
                ):
                    pending.attempts = 0
                    t.schedule_pending(path, pending, now)
                    made_due.append(path)
            for path, stuck in list(t.stuck.items()):
                if stuck.action != StuckAction.keep and changed.intersection(
                    chain(stuck.folder.cfg.path, path)
                ):
                    stuck.attempts = 0
                    t.schedule_stuck(path, stuck, now)
                    made_due.append(path)
            listable = [
                (path, folder)
                for path, folder in t.unlistable.items()
                if changed.intersection(chain(folder.cfg.path, path))
            ]
            for path, _folder in listable:
                del t.unlistable[path]  # the scan puts it back if it still cannot list it
        for path, folder in listable:
            self.rescan(folder, path)
            made_due.append(path)
        if made_due:
            self.log.info(
                "watch.access_changed",
                changed=sorted(str(e) for e in changed)[:10],
                files=len(made_due),
                detail="mode or owner changed: the files waiting below are tried again now, "
                "sub-folders that could not be listed are scanned",
            )
        return len(made_due)

    def tenants_waiting(self) -> set[str]:
        """Tenants with files left in place because the tenant was not active."""
        with self.table.lock:
            return {
                c.folder.cfg.tenant
                for c in self.table.pending.values()
                if c.attempts > 0 and c.waiting_cause == "tenant_inactive"
            }

    def tenants_active(self, active: set[str]) -> int:
        """Make the files waiting for a tenant in ``active`` (activated since) due now."""
        now = time.monotonic()
        t = self.table
        made_due = 0
        with t.lock:
            for path, pending in list(t.pending.items()):
                if (
                    pending.attempts > 0
                    and pending.waiting_cause == "tenant_inactive"
                    and pending.folder.cfg.tenant in active
                ):
                    pending.attempts = 0
                    t.schedule_pending(path, pending, now)
                    made_due += 1
        if made_due:
            self.log.info("watch.tenant_active_again", tenants=sorted(active), files=made_due)
        return made_due
