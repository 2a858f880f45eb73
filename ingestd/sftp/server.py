"""The SSH side: listener, connection limits, authentication, channel policy, timeouts.

One thread per connection (paramiko adds a transport thread and one per SFTP channel).
Order at accept: banned IP -> close before the handshake; over the total or per-IP limit
-> close; otherwise TCP_NODELAY (without it every small SFTP reply waits for a delayed ACK:
~50 ms per file), key exchange, login within ``auth_timeout``, and then the session runs
until the client leaves or is idle for ``idle_timeout``.

A login whose credentials are right is still refused while the account's tenant is not
active (``sftp.auth_refused``; not a failure: it never counts towards a ban). The status
comes from ``TenantStatusCache``, never from the database directly; when the cache cannot
tell (database down), the login goes ahead and the uploads wait in the spool.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import paramiko

from ingestd import health, metrics
from ingestd.config import Config, SftpConfig
from ingestd.log import get_logger
from ingestd.sftp.accounts import Accounts, Verdict
from ingestd.sftp.algorithms import disabled_algorithms, negotiated, record_kex, uses_legacy
from ingestd.sftp.bans import BanList
from ingestd.sftp.hostkeys import HostKey
from ingestd.sftp.spool import Spool
from ingestd.sftp.tenant_status import MISSING, TenantStatusCache
from ingestd.sftp.vfs import InboxSFTP, IngestSFTPServer, Session

SERVER_VERSION = "SSH-2.0-ingestd"  # no library or version numbers for scanners of scanners


@dataclass
class Connection:
    id: str
    remote_ip: str
    remote_port: int
    started: float = field(default_factory=time.monotonic)
    authenticated: threading.Event = field(default_factory=threading.Event)
    kill: threading.Event = field(default_factory=threading.Event)
    auth_failures: int = 0
    legacy: list[str] = field(default_factory=list)
    session: Session | None = None
    transport: paramiko.Transport | None = None


def _safe(value: str) -> str:
    """A client-chosen string (user name) as it may appear in a log line: short, one line."""
    return value[:64].encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")


class _ServerPolicy(paramiko.ServerInterface):
    """paramiko asks this object what a connection may do; only SFTP after a login."""

    def __init__(self, server: SftpServer, conn: Connection) -> None:
        self.server = server
        self.conn = conn
        self.session: Session | None = None
        self.log = server.log.bind(conn=conn.id, remote_ip=conn.remote_ip)
        # The account whose key paramiko may still have to verify (see check_auth_publickey).
        self._key_user: str | None = None
        self._login_lock = threading.Lock()
        # Why the last verified login was refused (its tenant is not active).
        self.refusal: str | None = None

    # -- authentication -------------------------------------------------------------------
    def get_allowed_auths(self, username: str) -> str:
        return ",".join(self.server.accounts.auth_methods(username))

    def check_auth_none(self, username: str) -> int:
        return paramiko.AUTH_FAILED

    def check_auth_password(self, username: str, password: str) -> int:
        verdict = self.server.accounts.check_password(username, password, self.conn.remote_ip)
        return self._conclude(username, "password", verdict)

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        verdict = self.server.accounts.check_key(username, key, self.conn.remote_ip)
        if verdict is not Verdict.ok:
            return self._conclude(username, "publickey", verdict)
        # Fix: paramiko asks this *before* it checks the signature, and also for a client's
        # "would you take this key?" query, which anyone holding the (public) key can send.
        # Logging in here let a forged signature write sftp.login and escape auth_timeout.
        # The login happens in key_login(), once paramiko says the transport is authenticated.
        if self._legacy_refused(username):
            return paramiko.AUTH_FAILED
        self._key_user = username
        return paramiko.AUTH_SUCCESSFUL

    def key_login(self) -> bool:
        """True once logged in; completes a key login whose signature paramiko verified."""
        with self._login_lock:
            transport = self.conn.transport
            if (
                self.session is None
                and self._key_user is not None
                and transport is not None
                and transport.is_authenticated()
                and transport.get_username() == self._key_user
                and not self.conn.kill.is_set()
            ):
                # Checked only now: refusing in check_auth_publickey would tell anyone who
                # holds the *public* key the tenant's status. paramiko already answered
                # "authenticated", so the connection is closed instead of a channel opened.
                if self._tenant_refused(self._key_user, "publickey"):
                    self.conn.kill.set()
                else:
                    self._login(self._key_user, "publickey")
            return self.session is not None

    def _legacy_refused(self, username: str) -> bool:
        account = self.server.accounts.get(username)
        assert account is not None
        allowed = self.server.cfg.legacy_algorithms or account.legacy_algorithms
        if self.conn.legacy and not allowed:
            self.log.warning("sftp.legacy_refused", username=_safe(username),
                             algorithms=self.conn.legacy)  # fmt: skip
            return True
        return False

    def _tenant_refused(self, username: str, method: str) -> bool:
        """True (and logged) if the verified ``username``'s tenant is known not to be active.

        Unknown (the cache was never filled or is too old: database down) lets the login
        in. Not an auth failure: the credentials were right, so no ban score, no
        ``sftp.auth_failed`` line (fail2ban would ban the scanner), and only after the
        credentials were checked, so nobody without them learns the tenant's status.
        """
        cache = self.server.tenant_status
        account = self.server.accounts.get(username)
        assert account is not None
        status = cache.status(account.tenant) if cache is not None else None
        if status is None or status == "active":
            return False
        reason = "tenant_unknown" if status == MISSING else f"tenant_{status}"
        self.refusal = reason
        metrics.SFTP_REFUSED.labels(f"login_{reason}").inc()
        self.log.warning("sftp.auth_refused", account=account.username, tenant=account.tenant,
                         tenant_status=status, reason=reason, method=method)  # fmt: skip
        return True

    def _login(self, username: str, method: str) -> None:
        conn = self.conn
        account = self.server.accounts.get(username)
        assert account is not None
        self.session = Session(
            account=account,
            remote_ip=conn.remote_ip,
            conn_id=conn.id,
            spool=self.server.spool,
            max_file_size=int(self.server.config.intake.max_file_size),
            max_filename_bytes=self.server.config.intake.max_filename_bytes,
            log=self.log.bind(account=account.username, tenant=account.tenant),
            legacy=conn.legacy,
            tenant_status=self.server.tenant_status,
            allowed_types=frozenset(self.server.config.intake.allowed_types),
            events=self.server.bans.events,
        )
        conn.session = self.session
        conn.authenticated.set()
        self.log.info("sftp.login", username=account.username, tenant=account.tenant,
                      method=method)  # fmt: skip
        metrics.SFTP_LOGINS.labels(account.tenant, method).inc()

    def _conclude(self, username: str, method: str, verdict: Verdict) -> int:
        conn = self.conn
        if verdict is Verdict.ok:
            if self._legacy_refused(username):
                return paramiko.AUTH_FAILED
            if self._tenant_refused(username, method):
                # Counted for max_auth_attempts (a client that keeps trying), not for bans.
                conn.auth_failures += 1
                if conn.auth_failures >= self.server.cfg.max_auth_attempts:
                    self.log.warning("sftp.too_many_auth_failures", attempts=conn.auth_failures)
                    conn.kill.set()
                return paramiko.AUTH_FAILED
            with self._login_lock:
                self._login(username, method)
            return paramiko.AUTH_SUCCESSFUL
        if verdict is Verdict.wrong_key:
            # Clients offer every key they hold; a key that does not fit is not an attack.
            self.log.info("sftp.key_rejected", username=_safe(username))
            return paramiko.AUTH_FAILED
        conn.auth_failures += 1
        metrics.SFTP_AUTH_FAILURES.labels(str(verdict)).inc()
        # The fail2ban line: fixed event name, remote_ip key (see config/fail2ban/).
        self.log.warning("sftp.auth_failed", username=_safe(username), method=method,
                         reason=str(verdict), attempt=conn.auth_failures)  # fmt: skip
        if verdict is not Verdict.source_not_allowed:
            banned = self.server.bans.failure(
                conn.remote_ip, unknown_user=verdict is Verdict.unknown_user
            )
            if banned is not None:
                conn.kill.set()
        if conn.auth_failures >= self.server.cfg.max_auth_attempts:
            self.log.warning("sftp.too_many_auth_failures", attempts=conn.auth_failures)
            conn.kill.set()
        return paramiko.AUTH_FAILED

    # -- what an authenticated client may open ----------------------------------------------
    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session" and self.key_login():
            return paramiko.OPEN_SUCCEEDED
        if self.refusal is not None:
            return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED  # logged at the login
        self._refused("channel", kind=kind)
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_subsystem_request(self, channel: Any, name: str) -> bool:
        if name == "sftp" and self.key_login():
            return bool(super().check_channel_subsystem_request(channel, name))
        self._refused("subsystem", name=_safe(name))
        return False

    def check_channel_shell_request(self, channel: Any) -> bool:
        self._refused("shell")
        return False

    def check_channel_exec_request(self, channel: Any, command: bytes) -> bool:
        self._refused("exec", command=_safe(command.decode("utf-8", "backslashreplace")))
        return False

    def check_channel_pty_request(self, *args: Any) -> bool:
        self._refused("pty")
        return False

    def check_channel_x11_request(self, *args: Any) -> bool:
        self._refused("x11")
        return False

    def check_channel_forward_agent_request(self, channel: Any) -> bool:
        self._refused("agent_forwarding")
        return False

    def check_port_forward_request(self, address: str, port: int) -> bool:
        self._refused("remote_port_forwarding", address=_safe(address), port=port)
        return False

    def check_channel_direct_tcpip_request(
        self, chanid: int, origin: Any, destination: Any
    ) -> int:
        self._refused("local_port_forwarding", destination=_safe(str(destination)))
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_env_request(self, channel: Any, name: bytes, value: bytes) -> bool:
        return False  # clients send LANG etc. unasked; refusing is silent and harmless

    def _refused(self, what: str, **details: Any) -> None:
        metrics.SFTP_REFUSED.labels(f"request_{what}").inc()
        self.log.warning("sftp.request_refused", request=what, **details)


class SftpServer:
    def __init__(
        self,
        config: Config,
        spool: Spool,
        hostkeys: list[HostKey],
        bans: BanList,
        tenant_status: TenantStatusCache | None = None,
    ) -> None:
        self.log = get_logger(component="sftp")
        self.spool = spool
        self.hostkeys = hostkeys
        self.bans = bans
        # None: no tenant check at all (every verified login goes in).
        self.tenant_status = tenant_status
        self._apply(config)
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: dict[str, Connection] = {}
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] = config.sftp.address

    def _apply(self, config: Config) -> None:
        self.config = config
        self.cfg: SftpConfig = config.sftp
        self.accounts = Accounts(config.sftp.accounts)
        self.legacy_offered = config.sftp.legacy_algorithms or any(
            a.legacy_algorithms for a in config.sftp.accounts
        )

    def reload(self, config: Config) -> None:
        """New accounts and limits apply to new connections; sessions keep theirs."""
        if config.sftp.listen != self.cfg.listen:
            self.log.warning("sftp.listen_changed_needs_restart", listen=config.sftp.listen)
        self.bans.cfg = config.sftp.bans
        self._apply(config)

    # -- listener ------------------------------------------------------------------------
    def start(self) -> None:
        # paramiko logs every failed handshake (a load balancer's TCP check, a port scan)
        # as a multi-line traceback; our own one-line JSON events say what happened.
        paramiko_log = logging.getLogger("paramiko")
        paramiko_log.addHandler(logging.NullHandler())
        paramiko_log.propagate = False
        host, port = self.cfg.address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server(
            (host, port), family=family, backlog=128, reuse_port=False,
            dualstack_ipv6=(host == "::"),
        )  # fmt: skip
        sock.settimeout(0.5)
        self._sock = sock
        self.address = sock.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept_loop, name="sftp-accept", daemon=True)
        self._thread.start()
        self.log.info(
            "sftp.listening",
            address=self.address[0],
            port=self.address[1],
            accounts=len(self.accounts),
            legacy_algorithms=self.legacy_offered,
            hostkeys=[f"{k.algorithm} {k.fingerprint}" for k in self.hostkeys],
        )

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            conns = list(self._conns.values())
        for conn in conns:
            conn.kill.set()
            if conn.transport is not None:
                conn.transport.close()
        deadline = time.monotonic() + timeout
        while self.connection_count() and time.monotonic() < deadline:
            time.sleep(0.05)

    def connection_count(self) -> int:
        with self._lock:
            return len(self._conns)

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            health.beat("sftp.accept", 1.0)
            try:
                sock, addr = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                self.log.exception("sftp.accept_failed")
                time.sleep(0.1)
                continue
            ip = addr[0].removeprefix("::ffff:")
            if self.bans.banned_until(ip) is not None:
                metrics.SFTP_CONNECTIONS.labels("banned").inc()
                self.log.info("sftp.banned_connection_closed", remote_ip=ip)
                sock.close()
                continue
            with self._lock:
                total = len(self._conns)
                per_ip = sum(1 for c in self._conns.values() if c.remote_ip == ip)
                over = (
                    total >= self.cfg.max_connections
                    or per_ip >= self.cfg.max_connections_per_ip
                )
                if not over:
                    conn = Connection(f"c{next(self._ids)}", ip, addr[1])
                    self._conns[conn.id] = conn
            if over:
                metrics.SFTP_CONNECTIONS.labels("limit").inc()
                self.log.warning("sftp.connection_limit", remote_ip=ip, total=total,
                                 from_ip=per_ip)  # fmt: skip
                sock.close()
                continue
            metrics.SFTP_CONNECTIONS.labels("accepted").inc()
            threading.Thread(
                target=self._serve, args=(sock, conn), name=f"sftp-{conn.id}", daemon=True
            ).start()

    # -- one connection --------------------------------------------------------------------
    def _serve(self, sock: socket.socket, conn: Connection) -> None:
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
            transport.banner_timeout = self.cfg.auth_timeout
            transport.handshake_timeout = self.cfg.auth_timeout
            for key in self.hostkeys:
                transport.add_server_key(key.key)
            transport.set_subsystem_handler("sftp", IngestSFTPServer, sftp_si=InboxSFTP)
            policy = _ServerPolicy(self, conn)
            try:
                transport.start_server(server=policy)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                metrics.SFTP_CONNECTIONS.labels("handshake_failed").inc()
                log.warning("sftp.handshake_failed", detail=str(exc) or type(exc).__name__,
                            client=_safe(str(transport.remote_version or "")))  # fmt: skip
                reason = "handshake_failed"
                return
            agreed = negotiated(transport)
            conn.legacy = uses_legacy(agreed)
            log.info("sftp.connected", client=_safe(str(transport.remote_version)), **agreed)
            if conn.legacy:
                log.warning("sftp.legacy_algorithms", algorithms=conn.legacy)
            reason = self._wait_for_login(transport, conn, policy)
            if reason == "ok":
                reason = self._run_session(transport, conn)
        except Exception:
            reason = "internal_error"
            log.exception("sftp.connection_error")
        finally:
            if transport is not None:
                transport.close()
            sock.close()
            with self._lock:
                self._conns.pop(conn.id, None)
            session = conn.session
            log.info("sftp.disconnected", reason=reason,
                     seconds=round(time.monotonic() - conn.started, 3),
                     uploads=session.uploads if session else 0,
                     bytes=session.upload_bytes if session else 0)  # fmt: skip

    def _wait_for_login(
        self, transport: paramiko.Transport, conn: Connection, policy: _ServerPolicy
    ) -> str:
        deadline = conn.started + self.cfg.auth_timeout
        while not policy.key_login():
            if conn.kill.is_set() or self._stop.is_set():
                return policy.refusal or "auth_failed"
            if not transport.is_active():
                return "client_closed"
            if transport.is_authenticated():
                return "ok"  # the session itself starts with the first channel
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.log.warning("sftp.auth_timeout", conn=conn.id, remote_ip=conn.remote_ip)
                return "auth_timeout"
            conn.authenticated.wait(min(remaining, 0.1))
        return "ok"

    def _run_session(self, transport: paramiko.Transport, conn: Connection) -> str:
        since = time.monotonic()
        while transport.is_active():
            if conn.kill.wait(1.0) or self._stop.is_set():
                return "server_stopping"
            session = conn.session
            last = session.last_activity if session is not None else since
            if time.monotonic() - last > self.cfg.idle_timeout:
                self.log.info("sftp.idle_timeout", conn=conn.id, remote_ip=conn.remote_ip,
                              seconds=self.cfg.idle_timeout)  # fmt: skip
                return "idle_timeout"
        return "client_closed"

    def sessions(self) -> list[dict[str, Any]]:
        with self._lock:
            conns = list(self._conns.values())
        out = []
        for c in conns:
            account = c.session.account.username if c.session else None
            out.append({"conn": c.id, "remote_ip": c.remote_ip, "account": account})
        return out
