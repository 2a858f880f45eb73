"""What serving one connection needs of the state every connection shares.

In a single-process server these are the real objects (``BanList``, ``EventLog``,
``TenantStatusCache``); in an SFTP process (``sftp.processes`` > 1) they are proxies that
ask the supervisor, which holds the one copy of each (process.py). So a limit, a ban
score or a tenant status is the same for every process by construction. (The session
pool's view, ``AdmissionView``, is beside ``Admission`` in connections.py.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ingestd.events.outbox import Severity


class EventSink(Protocol):
    def emit(
        self,
        type: str,
        severity: Severity,
        tenant: str | None,
        detail: Mapping[str, Any] | None = None,
        trace_id: str | None = None,
        *,
        dedupe: str | None = None,
    ) -> str: ...


class FloodLog(Protocol):
    """Log lines a flood repeats, through a ``FloodGate``: the first of an interval, then
    a summary. An SFTP process sends its lines to the supervisor's gate, so a flood spread
    over every process is still summarised as one."""

    def log_event(self, level: str, event: str, key: str, **fields: Any) -> bool: ...

    def close(self) -> None: ...


class TenantStatusView(Protocol):
    def status(self, tenant: str) -> str | None: ...


class BanView(Protocol):
    """Failed logins score towards a ban of their address."""

    @property
    def events(self) -> EventSink | None: ...

    def failure(self, ip: str, *, unknown_user: bool) -> float | None: ...
