"""The SSH listener: accepts, admits and hands each connection to its session host.

Who gets in, and into which pool, ``connections`` decides (``Admission``, one for every
process); the listener's own ``SessionHost`` (session_host.py) serves it, or the least
busy SFTP process's (``SftpProcesses``). accept() failing (out of descriptors and the
like) is retried after a growing delay, one line per interval (``FloodGate``).
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from ingestd.config.settings import Config, SftpConfig
from ingestd.errors import AddressInUse
from ingestd.log import get_logger
from ingestd.runtime import health, metrics
from ingestd.runtime.logflood import FloodGate
from ingestd.sources.sftp.bans import BanList
from ingestd.sources.sftp.connections import Admission, Connection
from ingestd.sources.sftp.hostkeys import HostKey
from ingestd.sources.sftp.session import HandleBudget
from ingestd.sources.sftp.session_host import SessionHost, auth_burst, quiet_paramiko
from ingestd.sources.sftp.spool import Spool

if TYPE_CHECKING:
    from ingestd.sources.sftp.processes import SftpProcesses
    from ingestd.sources.sftp.tenant_status import TenantStatusCache

# accept() failing (EMFILE: out of descriptors, ENFILE, ENOBUFS, ENOMEM) is retried after a
# delay doubling from the first to the last; one line per interval says so (FloodGate).
ACCEPT_BACKOFF = (0.1, 1.0)
# A client aborting before accept() returns: nothing to wait for, nothing to log.
_ACCEPT_HARMLESS = {errno.ECONNABORTED, errno.EPROTO, errno.EINTR}


class SftpServer:
    """The listener: accepts, admits (bans, limits, the waiting room: ``Admission``, one
    for every process) and hands each admitted connection to its session host: its own
    (one process) or the least busy SFTP process (``SftpProcesses``)."""

    def __init__(
        self,
        config: Config,
        spool: Spool,
        hostkeys: list[HostKey],
        bans: BanList,
        tenant_status: TenantStatusCache | None = None,
        *,
        processes: SftpProcesses | None = None,
    ) -> None:
        self.log = get_logger(component="sftp")
        self.spool = spool
        self.hostkeys = hostkeys
        self.bans = bans
        self.tenant_status = tenant_status
        self.processes = processes
        self._stop = threading.Event()
        self.flood = FloodGate(self.log)
        # The gates of every SFTP process's lines (with processes; else the host's own).
        self.auth_flood = FloodGate(self.log, burst=auth_burst(config))
        if processes is None:
            self.admission = Admission(config.sftp, bans, self.flood, self._dispatch)
            self.host: SessionHost | None = SessionHost(
                config, spool, hostkeys, bans, self.admission, tenant_status, self._stop
            )
        else:
            self.admission = Admission(
                config.sftp, bans, self.flood, processes.dispatch, kill=processes.kill
            )
            processes.admission = self.admission
            processes.gates = {"flood": self.flood, "auth": self.auth_flood}
            self.host = None
        self.config = config
        self.cfg: SftpConfig = config.sftp
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] = config.sftp.address

    @property
    def handles(self) -> HandleBudget:
        assert self.host is not None, "handles are per SFTP process"
        return self.host.handles

    def _dispatch(self, conn: Connection) -> None:
        assert self.host is not None
        self.host.start(conn)

    def reload(self, config: Config) -> None:
        """New accounts and limits apply to new connections; sessions keep theirs."""
        if config.sftp.listen != self.cfg.listen:
            self.log.warning("sftp.listen_changed_needs_restart", listen=config.sftp.listen)
        if config.sftp.processes != self.cfg.processes:
            self.log.warning(
                "sftp.processes_changed_needs_restart", processes=config.sftp.processes
            )
        self.bans.cfg = config.sftp.bans
        self.admission.cfg = config.sftp
        self.auth_flood.burst = auth_burst(config)
        self.config, self.cfg = config, config.sftp
        if self.host is not None:
            self.host.apply(config)
        if self.processes is not None:
            self.processes.reload(config)

    # -- listener ------------------------------------------------------------------------
    def start(self) -> None:
        quiet_paramiko()
        host, port = self.cfg.address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.create_server(
                (host, port),
                family=family,
                backlog=128,
                reuse_port=False,
                dualstack_ipv6=(host == "::"),
            )
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            raise AddressInUse(
                f"cannot listen on {shown} (sftp.listen): address already in use by another process"
            ) from None
        sock.settimeout(0.5)
        self._sock = sock
        self.address = sock.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept_loop, name="sftp-accept", daemon=True)
        self._thread.start()
        self.log.info(
            "sftp.listening",
            address=self.address[0],
            port=self.address[1],
            accounts=len(self.cfg.accounts),
            legacy_algorithms=self.cfg.legacy_algorithms
            or any(a.legacy_algorithms for a in self.cfg.accounts),
            hostkeys=[f"{k.algorithm} {k.fingerprint}" for k in self.hostkeys],
            processes=1 if self.processes is None else self.processes.count,
        )

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()
        if self._thread is not None:
            self._thread.join(timeout)
        adm = self.admission
        with adm.lock:
            conns = list(adm.conns.values())
            waiting, adm.waiting = adm.waiting, []
        for waiter in waiting:
            waiter.sock.close()
        for conn in conns:
            conn.kill.set()
            if conn.transport is not None:
                conn.transport.close()
        if self.processes is not None:
            # Each process closes its sessions (open uploads aborted) and exits.
            self.processes.stop(timeout)
        deadline = time.monotonic() + timeout
        while self.connection_count() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.flood.close()  # the summaries of what was held back
        self.auth_flood.close()
        if self.host is not None:
            self.host.close()

    def connection_count(self) -> int:
        return self.admission.count()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        delay = 0.0
        failures = 0
        promoted = time.monotonic()
        while not self._stop.is_set():
            health.beat("sftp.accept", 1.0)
            try:
                sock, addr = self._sock.accept()
            except TimeoutError:
                self.admission.promote()  # expires waiters even when nobody connects
                continue
            except OSError as exc:
                if self._stop.is_set():
                    return
                if exc.errno in _ACCEPT_HARMLESS:
                    continue
                # EMFILE & co: the connection waits in the backlog. Spinning (and a
                # traceback per attempt) helps nobody; retry after a growing delay.
                failures += 1
                delay = min(ACCEPT_BACKOFF[1], max(ACCEPT_BACKOFF[0], delay * 2))
                metrics.SFTP_CONNECTIONS.labels("accept_failed").inc()
                self.flood.log_event(
                    "error",
                    "sftp.accept_failed",
                    "accept",
                    errno=errno.errorcode.get(exc.errno or 0, str(exc.errno)),
                    detail=exc.strerror or str(exc),
                    retry_in=round(delay, 2),
                    failures=failures,
                    connections=self.connection_count(),
                )
                self._stop.wait(delay)
                continue
            if failures:
                self.log.info("sftp.accept_recovered", failures=failures)
                failures, delay = 0, 0.0
            try:
                self.admission.admit(sock, addr)
            except Exception:
                sock.close()
                self.flood.log_event("error", "sftp.accept_error", "accept", exc_info=True)
            if time.monotonic() - promoted >= 0.25:  # waiters expire under a flood too
                self.admission.promote()
                promoted = time.monotonic()

    def sessions(self) -> list[dict[str, Any]]:
        with self.admission.lock:
            conns = list(self.admission.conns.values())
        out = []
        for c in conns:
            account = c.session.account.username if c.session else c.account
            out.append(
                {
                    "conn": c.id,
                    "remote_ip": c.remote_ip,
                    "account": account if c.in_session else None,
                    "process": c.owner,
                }
            )
        return out
