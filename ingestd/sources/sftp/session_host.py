"""Serving one connection, from the accepted socket to its last byte (``SessionHost``).

One thread per connection (paramiko adds a transport thread and one per SFTP channel).
What a connection may do, ``auth`` decides (``ServerPolicy``, given this host's
``LoginContext``). Here: TCP_NODELAY (without it every small SFTP reply waits for a
delayed ACK: ~50 ms per file), banner and key exchange within ``handshake_timeout``,
login within ``auth_timeout`` of that, and the session until the client leaves or is idle
for ``idle_timeout``.

Per-connection events a flood repeats (handshake_failed, auth_timeout, connected,
disconnected before a login, ...) go through one ``FloodGate`` per server, keyed by remote
IP: the first lines of an interval, then one ``<event>.summary``. Failed logins have a
gate of their own with a larger burst, so fail2ban and the admin still see every failure
that leads to a ban.
"""

from __future__ import annotations

import logging
import resource
import socket
import threading
import time
from typing import Any

import paramiko

from ingestd.config.settings import Config, SftpConfig
from ingestd.intake import filetypes
from ingestd.log import get_logger
from ingestd.runtime import metrics
from ingestd.runtime.logflood import FloodGate
from ingestd.sources.sftp.accounts import Accounts
from ingestd.sources.sftp.algorithms import disabled_algorithms, negotiated, record_kex, uses_legacy
from ingestd.sources.sftp.auth import ServerPolicy, safe
from ingestd.sources.sftp.connections import AdmissionView, Connection, PreAuthSocket, conn_log
from ingestd.sources.sftp.hostkeys import HostKey
from ingestd.sources.sftp.login_context import LoginContext
from ingestd.sources.sftp.session import HandleBudget
from ingestd.sources.sftp.spool import SpoolView
from ingestd.sources.sftp.subsystem import IngestSFTPServer
from ingestd.sources.sftp.vfs import InboxSFTP
from ingestd.sources.sftp.views import BanView, FloodLog, TenantStatusView

SERVER_VERSION = "SSH-2.0-ingestd"  # no library or version numbers for scanners of scanners

# sftp.auth_failed lines per address and interval before the rest are summarised: at
# least the fail2ban jail's maxretry (10) and the ban threshold, so both fail2ban and the
# admin see every failure that leads to a ban (and the ban ends the flood).
AUTH_BURST = 20


def auth_burst(config: Config) -> int:
    return max(AUTH_BURST, config.sftp.bans.threshold)


def quiet_paramiko() -> None:
    """paramiko logs every failed handshake (a load balancer's TCP check, a port scan) as
    a multi-line traceback; our own one-line JSON events say what happened."""
    paramiko_log = logging.getLogger("paramiko")
    paramiko_log.addHandler(logging.NullHandler())
    paramiko_log.propagate = False


def handle_budget() -> int:
    """Handles all sessions together may hold: half the descriptor limit, the rest is for
    sockets, the spool, the database and logs."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, soft // 2)


# How much later than our own handshake deadline paramiko's backup timers fire.
BACKUP_SLACK = 30.0


class SessionHost:
    """Serves connections from the accepted socket to their last byte: handshake, login,
    session. The listener's own (``sftp.processes`` = 1) or one per SFTP process, whose
    admission, bans, events and tenant statuses are then proxies of the supervisor's."""

    def __init__(
        self,
        config: Config,
        spool: SpoolView,
        hostkeys: list[HostKey],
        bans: BanView,
        admission: AdmissionView,
        tenant_status: TenantStatusView | None,
        stopping: threading.Event,
        *,
        process: str = "",
        gates: tuple[FloodLog, FloodLog] | None = None,
    ) -> None:
        # An SFTP process's lines say which process served the connection.
        self.log = get_logger(component="sftp", **({"process": process} if process else {}))
        self.spool = spool
        self.hostkeys = hostkeys
        self.bans = bans
        self.admission = admission
        # None: no tenant check at all (every verified login goes in).
        self.tenant_status = tenant_status
        self._stop = stopping
        # Per-connection events, keyed by remote IP (see the module docstring); an SFTP
        # process's go to the supervisor's gates (``gates``).
        self.flood: FloodLog
        self.auth_flood: FloodLog
        if gates is None:
            self.flood, self.auth_flood = FloodGate(self.log), FloodGate(self.log, burst=AUTH_BURST)
        else:
            self.flood, self.auth_flood = gates
        self.handles = HandleBudget(handle_budget())
        self.apply(config)

    def apply(self, config: Config) -> None:
        """New accounts and limits apply to new connections; sessions keep theirs."""
        self.config = config
        self.cfg: SftpConfig = config.sftp
        self.accounts = Accounts(config.sftp.accounts)
        self.legacy_offered = config.sftp.legacy_algorithms or any(
            a.legacy_algorithms for a in config.sftp.accounts
        )
        if isinstance(self.auth_flood, FloodGate):
            self.auth_flood.burst = auth_burst(config)
        self._login = LoginContext(
            accounts=self.accounts,
            spool=self.spool,
            bans=self.bans,
            admission=self.admission,
            tenant_status=self.tenant_status,
            log=self.log,
            auth_flood=self.auth_flood,
            flood=self.flood,
            handles=self.handles,
            legacy_algorithms=config.sftp.legacy_algorithms,
            max_auth_attempts=config.sftp.max_auth_attempts,
            max_handles_per_session=config.sftp.max_handles_per_session,
            max_file_size=int(config.intake.max_file_size),
            max_filename_bytes=config.intake.max_filename_bytes,
            allowed_types=frozenset(t.name for t in filetypes.expand(config.intake.allowed_types)),
        )

    def login_context(self) -> LoginContext:
        """What a login needs of this host, as of the last ``apply`` (auth.py)."""
        return self._login

    # -- log lines a flood repeats -----------------------------------------------------------
    def flood_log(self, level: str, event: str, conn: Connection, **fields: Any) -> None:
        conn_log(self.flood, level, event, conn, **fields)

    def close(self) -> None:
        self.flood.close()  # the summaries of what was held back
        self.auth_flood.close()

    def start(self, conn: Connection) -> None:
        """Serve ``conn`` (its socket in ``conn.sock``) in a thread of its own."""
        assert isinstance(conn.sock, PreAuthSocket)
        threading.Thread(
            target=self.serve, args=(conn.sock, conn), name=f"sftp-{conn.id}", daemon=True
        ).start()

    def serve(self, sock: PreAuthSocket, conn: Connection) -> None:
        log = self.log.bind(conn=conn.id, remote_ip=conn.remote_ip)
        transport: paramiko.Transport | None = None
        reason = "client_closed"
        try:
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            transport = paramiko.Transport(
                sock,
                default_window_size=int(self.cfg.window_size),
                default_max_packet_size=int(self.cfg.max_packet_size),
                disabled_algorithms=disabled_algorithms(self.legacy_offered),
            )
            conn.transport = transport
            record_kex(transport)
            transport.local_version = SERVER_VERSION
            # paramiko's own timers are per line read, so a client trickling one byte a
            # second never trips them; _handshake enforces the deadline (monotonic), these
            # back it up. With slack: paramiko times them by the wall clock, which a clock
            # step (NTP on a VM) moves; a step must not cut a scanner's handshake short.
            transport.banner_timeout = self.cfg.handshake_timeout + BACKUP_SLACK
            transport.handshake_timeout = self.cfg.handshake_timeout + BACKUP_SLACK
            for key in self.hostkeys:
                transport.add_server_key(key.key)
            transport.set_subsystem_handler("sftp", IngestSFTPServer, sftp_si=InboxSFTP)
            policy = ServerPolicy(self.login_context, conn)
            reason = self._handshake(transport, conn, policy)
            if reason != "ok":
                return
            conn.kex_done = time.monotonic()
            sock.budget = None
            agreed = negotiated(transport)
            conn.legacy = uses_legacy(agreed)
            self.flood_log(
                "info", "sftp.connected", conn, client=safe(str(transport.remote_version)), **agreed
            )
            if conn.legacy:
                self.flood_log("warning", "sftp.legacy_algorithms", conn, algorithms=conn.legacy)
            reason = self._wait_for_login(transport, conn, policy)
            if reason == "ok":
                reason = self._run_session(transport, conn)
        except Exception:
            reason = "internal_error"
            self.flood_log("error", "sftp.connection_error", conn, exc_info=True)
        finally:
            if transport is not None:
                transport.close()
            sock.close()
            self.admission.remove(conn)
            session = conn.session
            seconds = round(time.monotonic() - conn.started, 3)
            if session is None:
                # Never logged in: anyone can make these, as fast as they can connect.
                self.flood_log(
                    "info",
                    "sftp.disconnected",
                    conn,
                    reason=reason,
                    seconds=seconds,
                    uploads=0,
                    bytes=0,
                )
            else:
                log.info(
                    "sftp.disconnected",
                    reason=reason,
                    seconds=seconds,
                    account=session.account.username,
                    uploads=session.uploads,
                    bytes=session.upload_bytes,
                )

    def _handshake(
        self, transport: paramiko.Transport, conn: Connection, policy: ServerPolicy
    ) -> str:
        """Banner and key exchange within ``handshake_timeout`` of the accept: "ok", or
        why not (logged)."""
        done = threading.Event()
        transport.start_server(event=done, server=policy)
        deadline = conn.started + self.cfg.handshake_timeout
        while True:
            remaining = deadline - time.monotonic()
            if done.wait(max(0.0, min(remaining, 0.25))) and transport.is_active():
                return "ok"
            if conn.evicted:
                return "evicted"  # logged by the accept loop
            if self._stop.is_set() or conn.kill.is_set():
                return "server_stopping"
            if not transport.is_active():
                exc = transport.get_exception()
                detail = (str(exc) or type(exc).__name__) if exc else "connection closed"
                return self._handshake_failed(transport, conn, detail, timeout=False)
            if remaining <= 0:
                detail = f"no SSH banner and key exchange within {self.cfg.handshake_timeout:g} s"
                return self._handshake_failed(transport, conn, detail, timeout=True)

    def _handshake_failed(
        self, transport: paramiko.Transport, conn: Connection, detail: str, *, timeout: bool
    ) -> str:
        result = "handshake_timeout" if timeout else "handshake_failed"
        metrics.SFTP_CONNECTIONS.labels(result).inc()
        self.flood_log(
            "warning",
            "sftp.handshake_failed",
            conn,
            detail=safe(detail),
            timeout=timeout,
            client=safe(str(transport.remote_version or "")),
        )
        return "handshake_failed"

    def _wait_for_login(
        self, transport: paramiko.Transport, conn: Connection, policy: ServerPolicy
    ) -> str:
        deadline = (conn.kex_done or conn.started) + self.cfg.auth_timeout
        while not policy.key_login():
            if conn.evicted:
                return "evicted"
            if conn.kill.is_set() or self._stop.is_set():
                return policy.refusal or "auth_failed"
            if policy.refusal_text is not None:  # before client_closed: it may leave at once
                return self._refused_login(transport, conn, policy, deadline)
            if not transport.is_active():
                return "client_closed"
            if transport.is_authenticated():
                return "ok"  # the session itself starts with the first channel
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                metrics.SFTP_CONNECTIONS.labels("auth_timeout").inc()
                self.flood_log("warning", "sftp.auth_timeout", conn, seconds=self.cfg.auth_timeout)
                return "auth_timeout"
            conn.authenticated.wait(min(remaining, 0.1))
        return "ok"

    def _refused_login(
        self, transport: paramiko.Transport, conn: Connection, policy: ServerPolicy, deadline: float
    ) -> str:
        """A refused login (tenant not active): the client may open one channel to read
        why (``ServerPolicy.tell_refusal``) until the login deadline; then it is closed.
        Told, it is closed once the client had a moment to take the failure reply (it
        usually closes first)."""
        while not policy.told.is_set() and transport.is_active():
            if conn.evicted or conn.kill.is_set() or self._stop.is_set():
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            policy.told.wait(min(remaining, 0.1))
        if policy.told.is_set():
            # The client reads the reason and the channel's close, and leaves. One that
            # stays is closed a moment later (at the login deadline at the latest).
            end = min(deadline, time.monotonic() + 5.0)
            while transport.is_active() and time.monotonic() < end and not self._stop.is_set():
                conn.kill.wait(0.1)
        return policy.refusal or "auth_failed"

    def _run_session(self, transport: paramiko.Transport, conn: Connection) -> str:
        since = time.monotonic()
        while transport.is_active():
            if conn.kill.wait(1.0) or self._stop.is_set():
                return "server_stopping"
            session = conn.session
            last = session.last_activity if session is not None else since
            if time.monotonic() - last > self.cfg.idle_timeout:
                self.log.info(
                    "sftp.idle_timeout",
                    conn=conn.id,
                    remote_ip=conn.remote_ip,
                    seconds=self.cfg.idle_timeout,
                )
                return "idle_timeout"
        return "client_closed"
