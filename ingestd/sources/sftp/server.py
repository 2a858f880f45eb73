"""The SSH side: listener, connection limits, authentication, channel policy, timeouts.

One thread per connection (paramiko adds a transport thread and one per SFTP channel).
Order at accept: banned IP -> close before the handshake; the session pool (logged-in
connections, ``max_connections``/``_per_ip``) full for it -> close; the unauthenticated
pool (``max_unauthenticated``/``_per_ip``) full for it -> if the address logged in within
``known_good_for``, the longest-waiting unauthenticated connection (older than
``EVICTABLE_AFTER``; of this address if its share is full, else of the address holding
the most) is closed in its favour; otherwise the socket waits, without a thread or a
banner, in a waiting room as large as the pool (a burst of scanners behind one NAT gets
in a few milliseconds later instead of failing) for at most ``handshake_timeout``; with
the waiting room full too -> close. Then TCP_NODELAY (without it every small SFTP reply
waits for a delayed ACK: ~50 ms per file), banner and key exchange within
``handshake_timeout``, login within ``auth_timeout`` of that; a login moves the connection
to the session pool (if that is full by then, it is closed), and the session runs until
the client leaves or is idle for ``idle_timeout``.

Why eviction by age: before a login nothing tells a scanner from an attacker behind the
same NAT, but time does: a scanner's handshake and login take milliseconds on a LAN, an
idle or trickling socket waits. So a client that proved itself recently is let in at the
expense of whoever has waited longest without proving anything, and the address holding
the most such sockets gives first. Unknown addresses wait for (or, past the waiting room,
are refused) slots freed by logins and by ``handshake_timeout``.

Per-connection events a flood repeats (handshake_failed, connection_limit, evicted,
banned_connection_closed, auth_timeout, connected, disconnected before a login, ...) go
through one ``FloodGate`` per server, keyed by remote IP: the first lines of an interval,
then one ``<event>.summary``. Failed logins have a gate of their own with a larger burst,
so fail2ban and the admin still see every failure that leads to a ban.

A login whose credentials are right is still refused while the account's tenant is not
active (``sftp.auth_refused``; not a failure: it never counts towards a ban). The status
comes from ``TenantStatusCache``, never from the database directly; when the cache cannot
tell (database down), the login goes ahead and the uploads wait in the spool.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import resource
import socket
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

import paramiko

from ingestd.config.settings import Config, SftpConfig
from ingestd.log import get_logger
from ingestd.ops import health, metrics
from ingestd.ops.logflood import FloodGate
from ingestd.sources.sftp.accounts import Accounts, Verdict
from ingestd.sources.sftp.algorithms import disabled_algorithms, negotiated, record_kex, uses_legacy
from ingestd.sources.sftp.bans import BanList
from ingestd.sources.sftp.hostkeys import HostKey
from ingestd.sources.sftp.spool import Spool
from ingestd.sources.sftp.tenant_status import MISSING, TenantStatusCache
from ingestd.sources.sftp.vfs import HandleBudget, InboxSFTP, IngestSFTPServer, Session

SERVER_VERSION = "SSH-2.0-ingestd"  # no library or version numbers for scanners of scanners

# An unauthenticated connection younger than this is never evicted for a known-good one:
# a scanner's handshake takes milliseconds, so one still waiting after a second is slow,
# idle or an attacker's. (It also keeps a burst of scanners from evicting each other.)
EVICTABLE_AFTER = 1.0
# Addresses remembered with their last successful login; the least recent go first.
MAX_KNOWN_GOOD = 4096
# Bytes a client may send before its key exchange is done (banner, KEXINIT, its key):
# paramiko reads the banner line without any length limit.
MAX_PREAUTH_BYTES = 64 * 1024
# accept() failing (EMFILE: out of descriptors, ENFILE, ENOBUFS, ENOMEM) is retried after a
# delay doubling from the first to the last; one line per interval says so (FloodGate).
ACCEPT_BACKOFF = (0.1, 1.0)
# A client aborting before accept() returns: nothing to wait for, nothing to log.
_ACCEPT_HARMLESS = {errno.ECONNABORTED, errno.EPROTO, errno.EINTR}
# sftp.auth_failed lines per address and interval before the rest are summarised: at
# least the fail2ban jail's maxretry (10) and the ban threshold, so both fail2ban and the
# admin see every failure that leads to a ban (and the ban ends the flood).
AUTH_BURST = 20


def handle_budget() -> int:
    """Handles all sessions together may hold: half the descriptor limit, the rest is for
    sockets, the spool, the database and logs."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, soft // 2)


class _PreAuthSocket(socket.socket):
    """An accepted socket that refuses more than ``budget`` bytes until ``budget`` is
    lifted (None) after the key exchange: a pre-authentication client costs bounded
    memory, also when it sends megabytes without a newline as its "banner"."""

    budget: int | None = None

    @classmethod
    def adopt(cls, sock: socket.socket) -> _PreAuthSocket:
        new = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        new.budget = MAX_PREAUTH_BYTES
        return new

    def recv(self, bufsize: int, flags: int = 0, /) -> bytes:
        data = super().recv(bufsize, flags)
        if self.budget is not None:
            self.budget -= len(data)
            if self.budget < 0:
                # Short: the log line's detail keeps 64 characters, paramiko's prefix 44.
                raise OSError(errno.EMSGSIZE, f"over {MAX_PREAUTH_BYTES} bytes")
        return data


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
    sock: socket.socket | None = None
    # When the key exchange completed (auth_timeout counts from here).
    kex_done: float | None = None
    # In the session pool (logged in) rather than the unauthenticated one.
    in_session: bool = False
    # Closed to make room for a known-good address; no longer counted in any pool.
    evicted: bool = False


@dataclass
class _Waiter:
    """An accepted socket waiting for a slot in the unauthenticated pool: no thread, no
    banner yet, just the descriptor. A burst of scanners behind one NAT waits here for a
    few milliseconds instead of being refused; nobody waits longer than handshake_timeout."""

    sock: _PreAuthSocket
    remote_ip: str
    remote_port: int
    since: float
    known_good: bool = False  # promoted first; may displace an unknown waiter


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
                elif not self.server.admit_session(self.conn):
                    self.refusal = "connection_limit"  # logged by admit_session
                    self.conn.kill.set()
                else:
                    self._login(self._key_user, "publickey")
            return self.session is not None

    def _legacy_refused(self, username: str) -> bool:
        account = self.server.accounts.get(username)
        assert account is not None
        allowed = self.server.cfg.legacy_algorithms or account.legacy_algorithms
        if self.conn.legacy and not allowed:
            self.server.auth_log(
                "warning",
                "sftp.legacy_refused",
                self.conn,
                username=_safe(username),
                algorithms=self.conn.legacy,
            )
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
        metrics.SFTP_REFUSED.labels(account.tenant, f"login_{reason}").inc()
        self.log.warning(
            "sftp.auth_refused",
            account=account.username,
            tenant=account.tenant,
            tenant_status=status,
            reason=reason,
            method=method,
        )
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
            max_handles=self.server.cfg.max_handles_per_session,
            handle_budget=self.server.handles,
            flood=self.server.flood,
        )
        conn.session = self.session
        conn.authenticated.set()
        self.log.info("sftp.login", username=account.username, tenant=account.tenant, method=method)
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
                    self.server.auth_log(
                        "warning", "sftp.too_many_auth_failures", conn, attempts=conn.auth_failures
                    )
                    conn.kill.set()
                return paramiko.AUTH_FAILED
            with self._login_lock:
                if not self.server.admit_session(conn):
                    # The credentials were right: no failure, no ban score. paramiko
                    # answers "authenticated"; no channel opens, the connection closes.
                    self.refusal = "connection_limit"  # logged by admit_session
                    conn.kill.set()
                    return paramiko.AUTH_SUCCESSFUL
                self._login(username, method)
            return paramiko.AUTH_SUCCESSFUL
        if verdict is Verdict.wrong_key:
            # Clients offer every key they hold; a key that does not fit is not an attack.
            self.server.auth_log("info", "sftp.key_rejected", conn, username=_safe(username))
            return paramiko.AUTH_FAILED
        conn.auth_failures += 1
        metrics.SFTP_AUTH_FAILURES.labels(str(verdict)).inc()
        # The fail2ban line: fixed event name, remote_ip key (see config/fail2ban/). Its
        # summary under a flood is "sftp.auth_failed.summary", which the filter ignores.
        self.server.auth_log(
            "warning",
            "sftp.auth_failed",
            conn,
            username=_safe(username),
            method=method,
            reason=str(verdict),
            attempt=conn.auth_failures,
        )
        if verdict is not Verdict.source_not_allowed:
            banned = self.server.bans.failure(
                conn.remote_ip, unknown_user=verdict is Verdict.unknown_user
            )
            if banned is not None:
                conn.kill.set()
        if conn.auth_failures >= self.server.cfg.max_auth_attempts:
            self.server.auth_log(
                "warning", "sftp.too_many_auth_failures", conn, attempts=conn.auth_failures
            )
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

    def check_channel_direct_tcpip_request(self, chanid: int, origin: Any, destination: Any) -> int:
        self._refused("local_port_forwarding", destination=_safe(str(destination)))
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_env_request(self, channel: Any, name: bytes, value: bytes) -> bool:
        return False  # clients send LANG etc. unasked; refusing is silent and harmless

    def _refused(self, what: str, **details: Any) -> None:
        tenant = self.session.account.tenant if self.session is not None else ""
        metrics.SFTP_REFUSED.labels(tenant, f"request_{what}").inc()
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
        # Per-connection events, keyed by remote IP (see the module docstring).
        self.flood = FloodGate(self.log)
        self.auth_flood = FloodGate(self.log, burst=AUTH_BURST)
        self._apply(config)
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: dict[str, Connection] = {}
        # Sockets waiting for a slot in the unauthenticated pool (at most as many as it has).
        self._waiting: list[_Waiter] = []
        # Remote IP -> monotonic time of its last successful login (bounded, LRU).
        self._known_good: OrderedDict[str, float] = OrderedDict()
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] = config.sftp.address
        self.handles = HandleBudget(handle_budget())

    def _apply(self, config: Config) -> None:
        self.config = config
        self.cfg: SftpConfig = config.sftp
        self.accounts = Accounts(config.sftp.accounts)
        self.legacy_offered = config.sftp.legacy_algorithms or any(
            a.legacy_algorithms for a in config.sftp.accounts
        )
        self.auth_flood.burst = max(AUTH_BURST, config.sftp.bans.threshold)

    # -- log lines a flood repeats -----------------------------------------------------------
    def flood_log(self, level: str, event: str, conn: Connection, **fields: Any) -> None:
        self.flood.log_event(
            level, event, conn.remote_ip, conn=conn.id, remote_ip=conn.remote_ip, **fields
        )

    def auth_log(self, level: str, event: str, conn: Connection, **fields: Any) -> None:
        self.auth_flood.log_event(
            level, event, conn.remote_ip, conn=conn.id, remote_ip=conn.remote_ip, **fields
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
            (host, port),
            family=family,
            backlog=128,
            reuse_port=False,
            dualstack_ipv6=(host == "::"),
        )
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
            waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            waiter.sock.close()
        for conn in conns:
            conn.kill.set()
            if conn.transport is not None:
                conn.transport.close()
        deadline = time.monotonic() + timeout
        while self.connection_count() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.flood.close()  # the summaries of what was held back
        self.auth_flood.close()

    def connection_count(self) -> int:
        with self._lock:
            return len(self._conns)

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
                self._promote()  # expires waiters even when nobody connects
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
                self._admit(sock, addr)
            except Exception:
                sock.close()
                self.flood.log_event("error", "sftp.accept_error", "accept", exc_info=True)
            if time.monotonic() - promoted >= 0.25:  # waiters expire under a flood too
                self._promote()
                promoted = time.monotonic()

    def _admit(self, sock: socket.socket, addr: tuple[Any, ...]) -> None:
        """Admit an accepted socket into the unauthenticated pool, let it wait for a slot,
        or close it."""
        ip = str(addr[0]).removeprefix("::ffff:")
        if self.bans.banned_until(ip) is not None:
            metrics.SFTP_CONNECTIONS.labels("banned").inc()
            self.flood.log_event("info", "sftp.banned_connection_closed", ip, remote_ip=ip)
            sock.close()
            return
        psock = _PreAuthSocket.adopt(sock)
        now = time.monotonic()
        with self._lock:
            result, victim, details = self._admission(ip, now)
            if result == "accepted":
                conn = self._register(psock, ip, addr[1])
            elif result == "queued":
                self._waiting.append(_Waiter(psock, ip, addr[1], now, self._is_known_good(ip, now)))
        metrics.SFTP_CONNECTIONS.labels(result).inc()
        if result == "queued":
            displaced = details.get("displaced")
            if isinstance(displaced, _Waiter):
                self._refuse_waiter(displaced, now, displaced_by=ip)
            self._promote()  # a slot may have freed meanwhile
            return
        if result != "accepted":
            self.flood.log_event("warning", "sftp.connection_limit", ip, remote_ip=ip, **details)
            psock.close()
            return
        if victim is not None:
            metrics.SFTP_CONNECTIONS.labels("evicted").inc()
            self.flood_log(
                "warning",
                "sftp.evicted",
                victim,
                for_ip=ip,
                **details,
                seconds=round(now - victim.started, 3),
            )
        self._start(conn)

    def _register(self, sock: _PreAuthSocket, ip: str, port: int) -> Connection:
        conn = Connection(f"c{next(self._ids)}", ip, port, sock=sock)
        self._conns[conn.id] = conn
        return conn

    def _start(self, conn: Connection) -> None:
        assert isinstance(conn.sock, _PreAuthSocket)
        threading.Thread(
            target=self._serve, args=(conn.sock, conn), name=f"sftp-{conn.id}", daemon=True
        ).start()

    def _pools(self) -> tuple[list[Connection], list[Connection]]:
        """With the lock held: (sessions, unauthenticated). Connections being closed by the
        server (killed, evicted) are in neither: their slot is free already."""
        live = [c for c in self._conns.values() if not c.kill.is_set()]
        return [c for c in live if c.in_session], [c for c in live if not c.in_session]

    def _admission(self, ip: str, now: float) -> tuple[str, Connection | None, dict[str, Any]]:
        """With the lock held: ("accepted", the connection evicted for it or None, why),
        ("queued", None, {}) or (the refusal's metric result, None, the log line's fields)."""
        cfg = self.cfg
        sessions, pending = self._pools()
        from_ip = sum(1 for c in sessions if c.remote_ip == ip)
        # Cheapest first: an address whose share of sessions is full cannot log in anyway.
        if len(sessions) >= cfg.max_connections or from_ip >= cfg.max_connections_per_ip:
            return "limit", None, {"pool": "sessions", "total": len(sessions), "from_ip": from_ip}
        own = [c for c in pending if c.remote_ip == ip]
        if len(own) < cfg.max_unauthenticated_per_ip and len(pending) < cfg.max_unauthenticated:
            return "accepted", None, {}
        share_full = len(own) >= cfg.max_unauthenticated_per_ip
        result = "limit_unauthenticated_per_ip" if share_full else "limit_unauthenticated"
        details: dict[str, Any] = {
            "pool": result.removeprefix("limit_"),
            "total": len(pending),
            "from_ip": len(own),
        }
        if self._is_known_good(ip, now):
            victim = self._evict_for(ip, now, pending)
            if victim is not None:
                return "accepted", victim, {"reason": details["pool"]}
            details["known_good"] = True
        waiting_ip = sum(1 for w in self._waiting if w.remote_ip == ip)
        # A known-good address may have as many waiting as it may have sessions: a NAT
        # with a burst of scanners, while every pool slot is too young to evict.
        may_wait = cfg.max_unauthenticated_per_ip
        if details.get("known_good"):
            may_wait = max(may_wait, cfg.max_connections_per_ip)
        if waiting_ip < may_wait:
            if len(self._waiting) < cfg.max_unauthenticated:
                return "queued", None, {}
            unknown = [w for w in self._waiting if not w.known_good]
            if details.get("known_good") and unknown:
                # The waiting room is full (of an attacker's sockets, likely): a known-good
                # address takes the place of the oldest unknown waiter of the address with
                # the most waiting.
                waiting = Counter(w.remote_ip for w in unknown)
                displaced = max(unknown, key=lambda w: (waiting[w.remote_ip], now - w.since))
                self._waiting.remove(displaced)
                return "queued", None, {"displaced": displaced}
        return result, None, {**details, "waiting": len(self._waiting)}

    def _evict_for(self, ip: str, now: float, pending: list[Connection]) -> Connection | None:
        """With the lock held: close an unauthenticated connection to make room for a
        known-good ``ip``, and return it; None if none has waited EVICTABLE_AFTER. Its
        own share full -> its own longest-waiting connection goes; else the longest-
        waiting one of the address holding the most."""
        own = [c for c in pending if c.remote_ip == ip]
        share_full = len(own) >= self.cfg.max_unauthenticated_per_ip
        held = Counter(c.remote_ip for c in pending)
        candidates = [
            c for c in (own if share_full else pending) if now - c.started >= EVICTABLE_AFTER
        ]
        if not candidates:
            return None
        victim = max(candidates, key=lambda c: (held[c.remote_ip], now - c.started))
        victim.evicted = True
        victim.kill.set()
        if victim.sock is not None:
            # Wakes paramiko's reader; the victim's own thread then cleans up.
            with contextlib.suppress(OSError):
                victim.sock.shutdown(socket.SHUT_RDWR)
        pending.remove(victim)
        return victim

    def _refuse_waiter(self, w: _Waiter, now: float, **details: Any) -> None:
        metrics.SFTP_CONNECTIONS.labels("limit_unauthenticated").inc()
        self.flood.log_event(
            "warning",
            "sftp.connection_limit",
            w.remote_ip,
            remote_ip=w.remote_ip,
            pool="unauthenticated",
            waited=round(now - w.since, 3),
            **details,
        )
        w.sock.close()

    def _promote(self) -> None:
        """Give freed slots of the unauthenticated pool to the sockets waiting longest (that
        fit their address's share); close those that waited handshake_timeout."""
        if not self._waiting:  # unlocked peek: the common case costs nothing
            return
        now = time.monotonic()
        started: list[Connection] = []
        expired: list[_Waiter] = []
        evicted: list[tuple[Connection, str]] = []
        cfg = self.cfg
        with self._lock:
            _sessions, pending = self._pools()
            keep: list[_Waiter] = []
            # Known-good addresses first, then the longest-waiting.
            for w in sorted(self._waiting, key=lambda w: (not w.known_good, w.since)):
                if now - w.since >= cfg.handshake_timeout:
                    expired.append(w)
                    continue
                own = sum(1 for c in pending if c.remote_ip == w.remote_ip)
                fits = own < cfg.max_unauthenticated_per_ip
                fits = fits and len(pending) < cfg.max_unauthenticated
                if not fits and w.known_good:
                    # Queued while every candidate was too young to evict; maybe not now.
                    victim = self._evict_for(w.remote_ip, now, pending)
                    if victim is not None:
                        evicted.append((victim, w.remote_ip))
                        fits = True
                if fits:
                    conn = self._register(w.sock, w.remote_ip, w.remote_port)
                    pending.append(conn)
                    started.append(conn)
                else:
                    keep.append(w)
            self._waiting = keep
        for w in expired:
            self._refuse_waiter(w, now)
        for victim, ip in evicted:
            metrics.SFTP_CONNECTIONS.labels("evicted").inc()
            self.flood_log(
                "warning", "sftp.evicted", victim, for_ip=ip, seconds=round(now - victim.started, 3)
            )
        for conn in started:
            self._start(conn)

    def _is_known_good(self, ip: str, now: float) -> bool:
        last = self._known_good.get(ip)
        return last is not None and now - last <= self.cfg.known_good_for

    def admit_session(self, conn: Connection) -> bool:
        """A verified login: move ``conn`` to the session pool, or refuse (logged) when
        that pool or the address's share of it is full."""
        with self._lock:
            if conn.evicted or conn.kill.is_set():
                return False
            sessions, _pending = self._pools()
            from_ip = sum(1 for c in sessions if c.remote_ip == conn.remote_ip)
            full = (
                len(sessions) >= self.cfg.max_connections
                or from_ip >= self.cfg.max_connections_per_ip
            )
            if not full:
                conn.in_session = True
                self._known_good[conn.remote_ip] = time.monotonic()
                self._known_good.move_to_end(conn.remote_ip)
                while len(self._known_good) > MAX_KNOWN_GOOD:
                    self._known_good.popitem(last=False)
        self._promote()  # its unauthenticated slot is free now (or it is being closed)
        if full:
            metrics.SFTP_CONNECTIONS.labels("limit").inc()
            self.flood_log(
                "warning",
                "sftp.connection_limit",
                conn,
                pool="sessions",
                total=len(sessions),
                from_ip=from_ip,
                stage="login",
            )
        return not full

    # -- one connection --------------------------------------------------------------------
    def _serve(self, sock: _PreAuthSocket, conn: Connection) -> None:
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
            # second never trips them; _handshake enforces the deadline, these back it up.
            transport.banner_timeout = self.cfg.handshake_timeout
            transport.handshake_timeout = self.cfg.handshake_timeout
            for key in self.hostkeys:
                transport.add_server_key(key.key)
            transport.set_subsystem_handler("sftp", IngestSFTPServer, sftp_si=InboxSFTP)
            policy = _ServerPolicy(self, conn)
            reason = self._handshake(transport, conn, policy)
            if reason != "ok":
                return
            conn.kex_done = time.monotonic()
            sock.budget = None
            agreed = negotiated(transport)
            conn.legacy = uses_legacy(agreed)
            self.flood_log(
                "info",
                "sftp.connected",
                conn,
                client=_safe(str(transport.remote_version)),
                **agreed,
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
            with self._lock:
                self._conns.pop(conn.id, None)
            self._promote()
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
        self, transport: paramiko.Transport, conn: Connection, policy: _ServerPolicy
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
            detail=_safe(detail),
            timeout=timeout,
            client=_safe(str(transport.remote_version or "")),
        )
        return "handshake_failed"

    def _wait_for_login(
        self, transport: paramiko.Transport, conn: Connection, policy: _ServerPolicy
    ) -> str:
        deadline = (conn.kex_done or conn.started) + self.cfg.auth_timeout
        while not policy.key_login():
            if conn.evicted:
                return "evicted"
            if conn.kill.is_set() or self._stop.is_set():
                return policy.refusal or "auth_failed"
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

    def sessions(self) -> list[dict[str, Any]]:
        with self._lock:
            conns = list(self._conns.values())
        out = []
        for c in conns:
            account = c.session.account.username if c.session else None
            out.append({"conn": c.id, "remote_ip": c.remote_ip, "account": account})
        return out
