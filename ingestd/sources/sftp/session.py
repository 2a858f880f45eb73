"""What one authenticated SFTP connection knows, and the handles all sessions share."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import paramiko
from paramiko.sftp import SFTP_FAILURE

from ingestd.config.settings import SftpAccountConfig
from ingestd.intake import filetypes
from ingestd.log import Logger
from ingestd.sources.sftp.listing import PENDING_FILE_MODE
from ingestd.sources.sftp.refusals import SftpRefusal, refuse
from ingestd.sources.sftp.spool import SpoolView
from ingestd.sources.sftp.views import EventSink, FloodLog, TenantStatusView


class HandleBudget:
    """The handles of all sessions together: every open upload holds a descriptor, and
    ``max_handles_per_session`` alone would let 20 sessions hold 1,280 of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def give(self, n: int = 1) -> None:
        with self._lock:
            self.used = max(0, self.used - n)


@dataclass
class Session:
    """What one authenticated connection knows: who it is and what it did."""

    account: SftpAccountConfig
    remote_ip: str
    conn_id: str
    spool: SpoolView
    max_file_size: int
    max_filename_bytes: int
    log: Logger
    legacy: list[str] = field(default_factory=list)
    # Checked at every upload's OPEN too, not only at login: a session that outlives its
    # tenant's suspension or deletion must not keep feeding the spool.
    tenant_status: TenantStatusView | None = None
    # intake.allowed_types: content is checked at upload against what intake will accept.
    allowed_types: frozenset[str] = frozenset(filetypes.ARCHIVABLE)
    # Refusals an operator must hear about become operator events (file.refused).
    events: EventSink | None = None
    last_activity: float = field(default_factory=time.monotonic)
    uploads: int = 0
    upload_bytes: int = 0
    # Files this session completed, by virtual path: a scanner that stats or setstats
    # its file right after CLOSE gets an answer even if intake already took it.
    recent: dict[str, paramiko.SFTPAttributes] = field(default_factory=dict)
    # ... and why the ones it refused are not there: clients that stat after CLOSE
    # (paramiko's put) report that instead of a bare "no such file". paramiko ignores a
    # failed CLOSE, so for a short file this is the only place its caller sees the reason.
    refused_uploads: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Handles this session holds (open uploads and listed folders, all its SFTP channels
    # together) and how many it may; ``handle_budget`` is the server's, shared by all.
    max_handles: int = 64
    handles: int = 0
    handle_budget: HandleBudget | None = None
    # The server's FloodGate (per remote IP), for refusals a client can repeat in a loop.
    flood: FloodLog | None = None

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def remember(self, vpath: str, size: int, mtime: float) -> None:
        attr = paramiko.SFTPAttributes()
        attr.st_size, attr.st_mode = size, PENDING_FILE_MODE
        attr.st_mtime = attr.st_atime = int(mtime)
        with self.lock:
            self.refused_uploads.pop(vpath, None)
            self.recent[vpath] = attr
            if len(self.recent) > 1000:
                self.recent.pop(next(iter(self.recent)))

    def take_handle(self) -> SftpRefusal | None:
        """Reserve a handle for an OPEN/OPENDIR, or say why not (the client reads it)."""
        with self.lock:
            if self.handles >= self.max_handles:
                return refuse(
                    "too_many_handles",
                    f"too many open files: this session has "
                    f"{self.handles} open, the limit is {self.max_handles} per "
                    f"session; close some first",
                    SFTP_FAILURE,
                )
            budget = self.handle_budget
            if budget is not None and not budget.take():
                return refuse(
                    "handles_exhausted",
                    f"too many open files on the server "
                    f"(all sessions together hold its limit of {budget.limit}); "
                    f"close some or try again later",
                    SFTP_FAILURE,
                )
            self.handles += 1
        return None

    def give_handles(self, n: int = 1) -> None:
        with self.lock:
            n = min(n, self.handles)
            self.handles -= n
        if self.handle_budget is not None and n:
            self.handle_budget.give(n)

    def remember_refusal(self, vpath: str, message: str) -> None:
        with self.lock:
            self.recent.pop(vpath, None)
            self.refused_uploads[vpath] = message
            if len(self.refused_uploads) > 1000:
                self.refused_uploads.pop(next(iter(self.refused_uploads)))
