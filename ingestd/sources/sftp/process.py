"""One SFTP process (``sftp.processes`` > 1): serves the connections its supervisor hands
it, from the key exchange to the last upload, on a core of its own.

Started by ``SftpProcesses`` as ``python -m ingestd.sources.sftp.process <fd>`` with one
end of a socket pair; the first message carries the config and the process's owner name.
What all processes must agree on stays with the supervisor and is asked for here through
proxies (views.py): the session pool, ban scores, tenant statuses, operator events, the
quota ledger and the queue's index (spool_client.py). What is local: the handshake, the
login check, the SFTP requests, the upload's bytes and their fsync, the queue entry's
files. Counters go to the supervisor once a second, so /metrics adds up across processes.

The process ends when the supervisor says stop or when its channel closes (the supervisor
died: nobody would index the uploads); it closes its connections first. SIGTERM, SIGINT
and SIGHUP are ignored: stopping and reloading are the supervisor's, which passes them on
(systemd's KillMode=mixed sends SIGTERM to the supervisor alone).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ingestd import log
from ingestd.config.settings import Config
from ingestd.runtime import metrics
from ingestd.sources.sftp import hostkeys
from ingestd.sources.sftp.connections import Connection, PreAuthSocket, shut_down
from ingestd.sources.sftp.ipc import Channel, Message, Op, Peer, PeerGone, Reply, StartArgs
from ingestd.sources.sftp.session_host import SessionHost, quiet_paramiko
from ingestd.sources.sftp.spool_client import SpoolClient

if TYPE_CHECKING:
    from ingestd.events.outbox import Severity
from ingestd.sources.sftp.tenant_status import TenantStatusCopy

COUNTER_PERIOD = 1.0
# Every SFTP request passes from paramiko's transport thread (reads, decrypts) to the
# session's thread (handles, answers): with CPython's default 5 ms switch interval the
# thread woken by a packet often waits that long for the GIL while the other one works.
# 0.5 ms measured +20-70 % files/s for one session of small files (bench/sftp.py).
SWITCH_INTERVAL = 0.0005


class SupervisorAdmission:
    def __init__(self, peer: Peer, conns: dict[str, Connection]) -> None:
        self.peer = peer
        self.conns = conns

    def admit_session(self, conn: Connection) -> bool:
        return bool(self.peer.call(Op.admit_session, conn.id, conn.account))

    def remove(self, conn: Connection) -> None:
        self.conns.pop(conn.id, None)
        with contextlib.suppress(PeerGone):
            self.peer.notify(Op.ended, conn.id)


class SupervisorEvents:
    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    def emit(
        self,
        type: str,
        severity: Severity,
        tenant: str | None,
        detail: Mapping[str, Any] | None = None,
        trace_id: str | None = None,
        *,
        dedupe: str | None = None,
    ) -> str:
        self.peer.notify(Op.event, type, severity, tenant, dict(detail or {}), trace_id, dedupe)
        return ""  # the event id is the supervisor's; no caller here needs it


class SupervisorBans:
    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self._events = SupervisorEvents(peer)

    @property
    def events(self) -> SupervisorEvents:
        return self._events

    def failure(self, ip: str, *, unknown_user: bool) -> float | None:
        until = self.peer.call(Op.ban_failure, ip, unknown_user)
        return float(until) if isinstance(until, int | float) else None


class SupervisorGate:
    """A FloodGate of the supervisor: lines a flood repeats are gated there, for every
    process at once."""

    def __init__(self, peer: Peer, gate: str, owner: str) -> None:
        self.peer, self.gate, self.owner = peer, gate, owner

    def log_event(self, level: str, event: str, key: str, **fields: Any) -> bool:
        with contextlib.suppress(PeerGone):
            self.peer.notify(
                Op.flood, self.gate, level, event, key, {**fields, "process": self.owner}
            )
        return True  # whether it was written or summarised is the supervisor's to know

    def close(self) -> None:
        pass  # the supervisor's gates write their summaries


class CounterReport:
    """The SFTP counters of this process, as increments since the last report."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, tuple[tuple[str, str], ...]], float] = {}

    def deltas(self) -> list[tuple[int, dict[str, str], float]]:
        out = []
        for index, counter in enumerate(metrics.SFTP_PROCESS_COUNTERS):
            for family in counter.collect():
                for sample in family.samples:
                    if not sample.name.endswith("_total"):
                        continue
                    key = (index, tuple(sorted(sample.labels.items())))
                    delta = sample.value - self._last.get(key, 0.0)
                    if delta:
                        self._last[key] = sample.value
                        out.append((index, dict(sample.labels), delta))
        return out


class SftpProcess:
    def __init__(self, channel: Channel, start: StartArgs) -> None:
        self.channel = channel
        self.peer = Peer(channel)
        self.owner = start.owner
        self.config = start.config
        self.log = log.get_logger(component="sftp", process=start.owner)
        self.stopping = threading.Event()
        self.conns: dict[str, Connection] = {}
        self.tenants = TenantStatusCopy()
        self.spool = SpoolClient(
            start.config.paths.spool, start.config.sftp.temp_names, start.owner, self.peer
        )
        keys = hostkeys.load_or_create(start.config.paths.state_dir, create=False)
        self.host = SessionHost(
            start.config,
            self.spool,
            keys,
            SupervisorBans(self.peer),
            SupervisorAdmission(self.peer, self.conns),
            self.tenants if start.tenant_check else None,
            self.stopping,
            process=start.owner,
            gates=(
                SupervisorGate(self.peer, "flood", start.owner),
                SupervisorGate(self.peer, "auth", start.owner),
            ),
        )
        self.counters = CounterReport()

    # -- the channel ---------------------------------------------------------------------
    def read(self) -> None:
        """The reader thread: the supervisor's messages and replies, until it goes."""
        why = "the supervisor closed the channel"
        try:
            while not self.stopping.is_set():
                message, fd = self.channel.recv()
                if isinstance(message, Reply):
                    self.peer.resolve(message)
                elif fd is not None:
                    self._connection(message, fd)
                else:
                    self._handle(message)
        except PeerGone as exc:
            why = exc.message
        except Exception:
            why = "internal error"
            self.log.error("sftp.process_error", exc_info=True)
        finally:
            self.peer.fail_all(why)
            self.stopping.set()

    def _connection(self, message: Message, fd: int) -> None:
        conn_id, ip, port, started = message.args
        sock = PreAuthSocket.adopt(socket.socket(fileno=fd))
        assert isinstance(conn_id, str) and isinstance(ip, str)
        assert isinstance(port, int) and isinstance(started, float)
        conn = Connection(conn_id, ip, port, started=started, sock=sock, owner=self.owner)
        self.conns[conn_id] = conn
        if self.stopping.is_set():
            sock.close()
            self.host.admission.remove(conn)
            return
        self.host.start(conn)

    def _handle(self, message: Message) -> None:
        if message.op is Op.kill:
            conn_id, evicted = message.args
            conn = self.conns.get(str(conn_id))
            if conn is not None:
                conn.evicted = bool(evicted)
                conn.kill.set()
                shut_down(conn)
        elif message.op is Op.reload:
            (config,) = message.args
            assert isinstance(config, Config)
            self.config = config
            self.spool.temp_names = [p.lower() for p in config.sftp.temp_names]
            self.host.apply(config)
        elif message.op is Op.tenants:
            statuses, read_at, max_age = message.args
            assert isinstance(read_at, float) and isinstance(max_age, float)
            self.tenants.update(statuses if isinstance(statuses, dict) else None, read_at, max_age)
        elif message.op is Op.stop:
            self.stopping.set()

    # -- the process ---------------------------------------------------------------------
    def report_counters(self) -> None:
        deltas = self.counters.deltas()
        if deltas:
            with contextlib.suppress(PeerGone):
                self.peer.notify(Op.counters, deltas)

    def close_connections(self, timeout: float = 10.0) -> None:
        for conn in list(self.conns.values()):
            conn.kill.set()
            if conn.transport is not None:
                conn.transport.close()
            shut_down(conn)
        deadline = time.monotonic() + timeout
        while self.conns and time.monotonic() < deadline:
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    # Signals are the supervisor's: a SIGTERM or Ctrl-C to the whole group (systemd's
    # stop, a terminal) must not end sessions before the supervisor stops listening, nor
    # look like a crash to it. It says stop; if it dies, the channel closes.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sys.setswitchinterval(SWITCH_INTERVAL)
    channel = Channel(socket.socket(fileno=int(argv[0])))
    log_stream = open(int(argv[1]), "w", buffering=1, closefd=False)  # noqa: SIM115
    first, _fd = channel.recv()
    assert isinstance(first, Message) and first.op is Op.start
    (start,) = first.args
    assert isinstance(start, StartArgs)
    log.configure(start.log_level, start.log_format, log_stream)
    quiet_paramiko()
    process = SftpProcess(channel, start)
    reader = threading.Thread(target=process.read, name="sftp-supervisor", daemon=True)
    reader.start()
    process.peer.notify(Op.ready, process.owner)
    next_report = time.monotonic() + COUNTER_PERIOD
    while not process.stopping.wait(0.2):
        if time.monotonic() >= next_report:
            process.report_counters()
            process.spool.return_idle_credit()
            next_report = time.monotonic() + COUNTER_PERIOD
    process.stopping.set()
    process.close_connections()
    process.report_counters()
    process.host.close()
    channel.close()
    return 0


if __name__ == "__main__":
    # Through the module's own name: run with -m, this file is __main__, and the classes
    # the supervisor pickles are the ones of ingestd.sources.sftp.process / ipc.
    from ingestd.sources.sftp.process import main as process_main

    sys.exit(process_main(sys.argv[1:]))
