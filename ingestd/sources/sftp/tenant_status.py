"""Tenant statuses for the SFTP login check, kept fresh from the database in the background.

The SSH server decides a login without touching the database (it must keep taking
uploads into the spool while PostgreSQL is down), so it asks this cache. A thread
reads every tenant's status every ``interval`` seconds. ``status()`` answers:

* ``None``: unknown. Nothing was ever read, or the last successful read is older than
  ``max_age`` (a long database outage). The server then lets the login in: the upload
  waits in the spool, and spool intake keeps it there while the tenant is not active.
* ``MISSING``: the tenant is not in the database (as of the last successful read).
* otherwise the tenant's status (``creating``, ``active``, ``suspended``, ``deleting``).

A failed refresh is logged once per outage (``sftp.tenant_status_unavailable``), its end
once (``sftp.tenant_status_restored``); a status that changes is logged as it is seen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ingestd.errors import DatabaseError
from ingestd.log import get_logger
from ingestd.sources.handoff import MISSING  # the tenant does not exist: a status of its own

if TYPE_CHECKING:  # an SFTP process holds a copy only, and never speaks to the database
    from ingestd.db.database import Database

REFRESH_INTERVAL = 5.0
# Last known statuses outlive a database restart, not a long outage.
MAX_AGE = 60.0


def status_of(
    statuses: dict[str, str] | None, read_at: float, max_age: float, tenant: str
) -> str | None:
    """``tenant``'s status in statuses read at ``read_at`` (monotonic), ``MISSING``, or
    None when they are too old (or were never read) to tell."""
    if statuses is None or time.monotonic() - read_at > max_age:
        return None
    return statuses.get(tenant, MISSING)


class TenantStatusCache:
    """Thread-safe; ``start()`` returns at once (the first read runs in the thread)."""

    def __init__(
        self, db: Database, *, interval: float = REFRESH_INTERVAL, max_age: float = MAX_AGE
    ) -> None:
        self.db = db
        self.interval = interval
        self.max_age = max(max_age, interval)
        self.log = get_logger(component="sftp")
        self._lock = threading.Lock()
        self._statuses: dict[str, str] | None = None
        self._read_at = 0.0  # time.monotonic() of the last successful read
        self._failing_since: float | None = None
        self.failures = 0  # refreshes failed in a row (0 while the database answers)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Called after every successful read (the SFTP processes get the new statuses).
        self.listeners: list[Callable[[], None]] = []

    def status(self, tenant: str) -> str | None:
        """The tenant's status, ``MISSING``, or ``None`` when the cache cannot tell."""
        with self._lock:
            return status_of(self._statuses, self._read_at, self.max_age, tenant)

    def snapshot(self) -> tuple[dict[str, str] | None, float, float]:
        """(statuses, monotonic time they were read, max_age): what an SFTP process needs
        to answer ``status`` as this cache would (the monotonic clock is the machine's,
        the same in every process)."""
        with self._lock:
            return self._statuses, self._read_at, self.max_age

    def refresh(self) -> bool:
        """Read all statuses now; True on success. Never raises for a database failure."""
        try:
            with self.db.transaction() as tx:
                rows = tx.all("tenant_statuses")
        except DatabaseError as exc:
            self._failed(exc.message)
            return False
        statuses = {str(r["name"]): str(r["status"]) for r in rows}
        with self._lock:
            previous, self._statuses = self._statuses, statuses
            self._read_at = time.monotonic()
            since, self._failing_since = self._failing_since, None
            self.failures = 0
        for listener in self.listeners:
            listener()
        if since is not None:
            self.log.info(
                "sftp.tenant_status_restored", outage_seconds=round(time.monotonic() - since, 1)
            )
        if previous is not None:
            for tenant in sorted(previous.keys() | statuses.keys()):
                old, new = previous.get(tenant, MISSING), statuses.get(tenant, MISSING)
                if old != new:
                    self.log.info(
                        "sftp.tenant_status_changed", tenant=tenant, old_status=old, new_status=new
                    )
        return True

    def _failed(self, detail: str, *, exc_info: bool = False) -> None:
        with self._lock:
            self.failures += 1
            first = self._failing_since is None
            if first:
                self._failing_since = time.monotonic()
            known = self._statuses is not None
        if first:
            self.log.warning(
                "sftp.tenant_status_unavailable",
                detail=detail,
                # What logins get meanwhile: the last known statuses for max_age, then in.
                keeping_last_known_for=self.max_age if known else 0,
                retry_every=self.interval,
                exc_info=exc_info,
            )

    # -- thread ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="sftp-tenant-status", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception as exc:  # a bug must not end the refreshes for good
                self._failed(f"{type(exc).__name__}: {exc}", exc_info=True)
            self._stop.wait(self.interval)


class TenantStatusCopy:
    """An SFTP process's copy of the supervisor's cache, pushed after every refresh: a
    login or an OPEN asks no one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._statuses: dict[str, str] | None = None
        self._read_at = 0.0
        self._max_age = MAX_AGE

    def update(self, statuses: dict[str, str] | None, read_at: float, max_age: float) -> None:
        with self._lock:
            self._statuses, self._read_at, self._max_age = statuses, read_at, max_age

    def status(self, tenant: str) -> str | None:
        with self._lock:
            return status_of(self._statuses, self._read_at, self._max_age, tenant)
