"""What a login needs of the session host, as one frozen value (``LoginContext``).

``ServerPolicy`` (auth.py) checks credentials, the tenant and the limits against it and
builds the ``Session`` from it; it never reaches into the host itself. The host makes a
new one whenever its config changes (``SessionHost.apply``): a connection's next login
attempt reads the accounts and limits of the config current at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ingestd.log import Logger
from ingestd.sources.sftp.accounts import Accounts
from ingestd.sources.sftp.connections import AdmissionView, Connection, conn_log
from ingestd.sources.sftp.session import HandleBudget
from ingestd.sources.sftp.spool import SpoolView
from ingestd.sources.sftp.views import BanView, FloodLog, TenantStatusView


@dataclass(frozen=True)
class LoginContext:
    """The accounts, the shared state a login touches and the limits a session gets."""

    accounts: Accounts
    spool: SpoolView
    bans: BanView
    admission: AdmissionView
    # None: no tenant check at all (every verified login goes in).
    tenant_status: TenantStatusView | None
    log: Logger
    # Failed logins' lines (fail2ban reads them) and the session's flood-prone lines.
    auth_flood: FloodLog
    flood: FloodLog
    handles: HandleBudget
    legacy_algorithms: bool  # sftp.legacy_algorithms: for every account
    max_auth_attempts: int
    max_handles_per_session: int
    max_file_size: int
    max_filename_bytes: int
    allowed_types: frozenset[str]

    def auth_log(self, level: str, event: str, conn: Connection, **fields: Any) -> None:
        """A login line through the failed logins' gate (one per address and interval)."""
        conn_log(self.auth_flood, level, event, conn, **fields)
