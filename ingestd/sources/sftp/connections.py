"""Connection limits before and at login: the two pools, the waiting room, eviction by age.

Order at accept: banned IP -> close before the handshake; the session pool (logged-in
connections, ``max_connections``/``_per_ip``) full for it -> close; the unauthenticated
pool (``max_unauthenticated``/``_per_ip``) full for it -> if the address logged in within
``known_good_for``, the longest-waiting unauthenticated connection (older than
``EVICTABLE_AFTER``; of this address if its share is full, else of the address holding
the most) is closed in its favour; otherwise the socket waits, without a thread or a
banner, in a waiting room as large as the pool (a burst of scanners behind one NAT gets
in a few milliseconds later instead of failing; an address may have as many waiting as
``max_connections_per_ip``) for at most ``handshake_timeout``; with the waiting room full
too -> close. A login moves the connection to the session pool (if
that is full by then, it is closed).

Why eviction by age: before a login nothing tells a scanner from an attacker behind the
same NAT, but time does: a scanner's handshake and login take milliseconds on a LAN, an
idle or trickling socket waits. So a client that proved itself recently is let in at the
expense of whoever has waited longest without proving anything, and the address holding
the most such sockets gives first. Unknown addresses wait for (or, past the waiting room,
are refused) slots freed by logins and by ``handshake_timeout``.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import paramiko

from ingestd.config.settings import SftpConfig
from ingestd.runtime import metrics
from ingestd.runtime.logflood import FloodGate
from ingestd.sources.sftp.bans import BanList
from ingestd.sources.sftp.views import FloodLog

if TYPE_CHECKING:
    from ingestd.sources.sftp.session import Session

# An unauthenticated connection younger than this is never evicted for a known-good one:
# a scanner's handshake takes milliseconds, so one still waiting after a second is slow,
# idle or an attacker's. (It also keeps a burst of scanners from evicting each other.)
EVICTABLE_AFTER = 1.0
# Addresses remembered with their last successful login; the least recent go first.
MAX_KNOWN_GOOD = 4096
# Bytes a client may send before its key exchange is done (banner, KEXINIT, its key):
# paramiko reads the banner line without any length limit.
MAX_PREAUTH_BYTES = 64 * 1024


class PreAuthSocket(socket.socket):
    """An accepted socket that refuses more than ``budget`` bytes until ``budget`` is
    lifted (None) after the key exchange: a pre-authentication client costs bounded
    memory, also when it sends megabytes without a newline as its "banner"."""

    budget: int | None = None

    @classmethod
    def adopt(cls, sock: socket.socket) -> PreAuthSocket:
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
    # The SFTP process serving it ("" for this process's own host) and, once logged in,
    # its account: what the supervisor knows of a connection another process serves.
    owner: str = ""
    account: str | None = None


@dataclass
class Waiter:
    """An accepted socket waiting for a slot in the unauthenticated pool: no thread, no
    banner yet, just the descriptor. A burst of scanners behind one NAT waits here for a
    few milliseconds instead of being refused; nobody waits longer than handshake_timeout."""

    sock: PreAuthSocket
    remote_ip: str
    remote_port: int
    since: float
    known_good: bool = False  # promoted first; may displace an unknown waiter


def shut_down(conn: Connection) -> None:
    """Wake paramiko's reader of ``conn``; the connection's own thread then cleans up."""
    if conn.sock is not None:
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)


def conn_log(gate: FloodLog, level: str, event: str, conn: Connection, **fields: Any) -> None:
    """A per-connection log line through ``gate`` (keyed by the remote IP)."""
    gate.log_event(level, event, conn.remote_ip, conn=conn.id, remote_ip=conn.remote_ip, **fields)


class AdmissionView(Protocol):
    """The session pool: a verified login takes a slot (or is refused); a connection that
    ends frees what it held. ``Admission`` itself in a single-process server, a proxy of
    the supervisor's in an SFTP process (process.py)."""

    def admit_session(self, conn: Connection) -> bool: ...

    def remove(self, conn: Connection) -> None: ...


class Admission:
    """The connections of one server: who is in which pool, who waits, who proved itself.

    ``start(conn)`` runs a connection admitted to the unauthenticated pool (its thread).
    ``cfg`` is swapped on reload; the pools keep what they hold.
    """

    def __init__(
        self,
        cfg: SftpConfig,
        bans: BanList,
        flood: FloodGate,
        start: Callable[[Connection], None],
        *,
        kill: Callable[[Connection], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.bans = bans
        self.flood = flood
        self.start = start
        # Closes an evicted connection; an SFTP process's are closed by that process.
        self.kill = kill or shut_down
        self.lock = threading.Lock()
        self.conns: dict[str, Connection] = {}
        # Sockets waiting for a slot in the unauthenticated pool (at most as many as it has).
        self.waiting: list[Waiter] = []
        # Remote IP -> monotonic time of its last successful login (bounded, LRU).
        self.known_good: OrderedDict[str, float] = OrderedDict()
        self._ids = itertools.count(1)

    def flood_log(self, level: str, event: str, conn: Connection, **fields: Any) -> None:
        conn_log(self.flood, level, event, conn, **fields)

    def count(self) -> int:
        with self.lock:
            return len(self.conns)

    def remove(self, conn: Connection) -> None:
        """``conn`` has ended: its slot goes to whoever waits longest."""
        with self.lock:
            self.conns.pop(conn.id, None)
        self.promote()

    def admit(self, sock: socket.socket, addr: tuple[Any, ...]) -> None:
        """Admit an accepted socket into the unauthenticated pool, let it wait for a slot,
        or close it."""
        ip = str(addr[0]).removeprefix("::ffff:")
        if self.bans.banned_until(ip) is not None:
            metrics.SFTP_CONNECTIONS.labels("banned").inc()
            self.flood.log_event("info", "sftp.banned_connection_closed", ip, remote_ip=ip)
            sock.close()
            return
        psock = PreAuthSocket.adopt(sock)
        now = time.monotonic()
        with self.lock:
            result, victim, details = self._admission(ip, now)
            if result == "accepted":
                conn = self._register(psock, ip, addr[1])
            elif result == "queued":
                self.waiting.append(Waiter(psock, ip, addr[1], now, self._is_known_good(ip, now)))
        metrics.SFTP_CONNECTIONS.labels(result).inc()
        if result == "queued":
            displaced = details.get("displaced")
            if isinstance(displaced, Waiter):
                self._refuse_waiter(displaced, now, displaced_by=ip)
            self.promote()  # a slot may have freed meanwhile
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
        self.start(conn)

    def _register(self, sock: PreAuthSocket, ip: str, port: int) -> Connection:
        conn = Connection(f"c{next(self._ids)}", ip, port, sock=sock)
        self.conns[conn.id] = conn
        return conn

    def _pools(self) -> tuple[list[Connection], list[Connection]]:
        """With the lock held: (sessions, unauthenticated). Connections being closed by the
        server (killed, evicted) are in neither: their slot is free already."""
        live = [c for c in self.conns.values() if not c.kill.is_set()]
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
        waiting_ip = sum(1 for w in self.waiting if w.remote_ip == ip)
        # Any address may have as many waiting as it may have sessions: a scan relay or a
        # NAT opens a burst of 20 at once, known or not, and each of them is to get in a
        # few milliseconds later, not be refused. (The waiting room as a whole stays as
        # large as the pool; a known-good address may displace an unknown waiter.)
        may_wait = max(cfg.max_unauthenticated_per_ip, cfg.max_connections_per_ip)
        if waiting_ip < may_wait:
            if len(self.waiting) < cfg.max_unauthenticated:
                return "queued", None, {}
            unknown = [w for w in self.waiting if not w.known_good]
            if details.get("known_good") and unknown:
                # The waiting room is full (of an attacker's sockets, likely): a known-good
                # address takes the place of the oldest unknown waiter of the address with
                # the most waiting.
                waiting = Counter(w.remote_ip for w in unknown)
                displaced = max(unknown, key=lambda w: (waiting[w.remote_ip], now - w.since))
                self.waiting.remove(displaced)
                return "queued", None, {"displaced": displaced}
        return result, None, {**details, "waiting": len(self.waiting)}

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
        self.kill(victim)
        pending.remove(victim)
        return victim

    def _refuse_waiter(self, w: Waiter, now: float, **details: Any) -> None:
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

    def promote(self) -> None:
        """Give freed slots of the unauthenticated pool to the sockets waiting longest (that
        fit their address's share); close those that waited handshake_timeout."""
        if not self.waiting:  # unlocked peek: the common case costs nothing
            return
        now = time.monotonic()
        started: list[Connection] = []
        expired: list[Waiter] = []
        evicted: list[tuple[Connection, str]] = []
        cfg = self.cfg
        with self.lock:
            _sessions, pending = self._pools()
            keep: list[Waiter] = []
            # Known-good addresses first, then the longest-waiting.
            for w in sorted(self.waiting, key=lambda w: (not w.known_good, w.since)):
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
            self.waiting = keep
        for w in expired:
            self._refuse_waiter(w, now)
        for victim, ip in evicted:
            metrics.SFTP_CONNECTIONS.labels("evicted").inc()
            self.flood_log(
                "warning", "sftp.evicted", victim, for_ip=ip, seconds=round(now - victim.started, 3)
            )
        for conn in started:
            self.start(conn)

    def _is_known_good(self, ip: str, now: float) -> bool:
        last = self.known_good.get(ip)
        return last is not None and now - last <= self.cfg.known_good_for

    def admit_session(self, conn: Connection) -> bool:
        """A verified login: move ``conn`` to the session pool, or refuse (logged) when
        that pool or the address's share of it is full."""
        with self.lock:
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
                self.known_good[conn.remote_ip] = time.monotonic()
                self.known_good.move_to_end(conn.remote_ip)
                while len(self.known_good) > MAX_KNOWN_GOOD:
                    self.known_good.popitem(last=False)
        self.promote()  # its unauthenticated slot is free now (or it is being closed)
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
