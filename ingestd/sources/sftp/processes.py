"""The supervisor of the SFTP processes: starts ``sftp.processes`` of them, hands each
admitted connection to the least busy, answers what they ask, replaces the ones that die.

Why processes and not threads: paramiko does the SSH crypto framing, packet parsing and
SFTP requests in Python, so one process is one core however many threads it has. The
listener stays here, in the daemon: admission (bans, limits, the waiting room) is decided
once, for all processes, and an accepted socket goes to a process over its channel
(SCM_RIGHTS). The supervisor keeps its own copy of every such socket until the process
says the connection ended, so a stop or a dead process can always close it.

A process that dies is logged (``sftp.process_died``, with its exit code or signal and
how many connections it took along), its open uploads' reservations and partial files go
(none of them was acknowledged), a queue entry it wrote but could not report is indexed
from disk, and a new process takes its slot: at once the first time, after a delay
doubling up to ``RESPAWN_MAX`` if it keeps dying young.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import ingestd
from ingestd import log
from ingestd.config.settings import Config
from ingestd.errors import IngestdError
from ingestd.events.outbox import EventLog
from ingestd.runtime import health, metrics
from ingestd.runtime.logflood import FloodGate
from ingestd.sources.sftp.bans import BanList
from ingestd.sources.sftp.connections import Admission, Connection, shut_down
from ingestd.sources.sftp.ipc import Channel, Message, Op, Peer, PeerGone, Reply, StartArgs
from ingestd.sources.sftp.spool import Spool
from ingestd.sources.sftp.spool_answers import SPOOL_OPS, answer_spool
from ingestd.sources.sftp.tenant_status import TenantStatusCache

# Seconds a new process may take to import and load its keys before it counts as failed.
START_TIMEOUT = 60.0
# A process that lived shorter than this died young: its replacement waits, doubling.
YOUNG = 10.0
RESPAWN_MAX = 30.0


def default_count() -> int:
    """``sftp.processes = 0``: one per core this process may run on."""
    return max(1, len(os.sched_getaffinity(0)))


@dataclass
class Child:
    slot: int
    proc: subprocess.Popen[bytes]
    channel: Channel
    peer: Peer
    owner: str
    started: float = field(default_factory=time.monotonic)
    ready: threading.Event = field(default_factory=threading.Event)
    conns: dict[str, Connection] = field(default_factory=dict)
    retired: bool = False
    handed: int = 0  # connections handed to it: ties go to whoever had fewer


class SftpProcesses:
    def __init__(
        self,
        config: Config,
        spool: Spool,
        bans: BanList,
        tenant_status: TenantStatusCache | None,
        events: EventLog | None,
        count: int,
    ) -> None:
        self.config = config
        self.spool = spool
        self.bans = bans
        self.tenant_status = tenant_status
        self.events = events
        self.count = count
        self.log = log.get_logger(component="sftp")
        # Set by the server that owns both: its admission and its log gates.
        self.admission: Admission | None = None
        self.gates: dict[str, FloodGate] = {}
        self._lock = threading.Lock()
        self._children: dict[int, Child] = {}
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._delays: dict[int, float] = {}
        self._pushed: tuple[float, float] = (0.0, 0.0)  # (read_at, max_age) last sent

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> None:
        if self.tenant_status is not None:
            self.tenant_status.listeners.append(self.push_tenants)
        for slot in range(1, self.count + 1):
            self._spawn(slot)
        deadline = time.monotonic() + START_TIMEOUT
        for child in list(self._children.values()):
            # A process that cannot start (a broken install) is not waited for: the
            # supervisor logs its death and keeps trying, the daemon serves the rest.
            while not child.ready.wait(0.05):
                if child.proc.poll() is not None or time.monotonic() > deadline:
                    self.log.error("sftp.process_start_failed", slot=child.slot, pid=child.proc.pid)
                    break
        self._supervisor = threading.Thread(
            target=self._supervise, name="sftp-supervisor", daemon=True
        )
        self._supervisor.start()
        self.log.info(
            "sftp.processes_started",
            processes=self.count,
            pids=[c.proc.pid for c in self._children.values()],
        )

    def _spawn(self, slot: int) -> Child:
        level, fmt, stream = log.settings()
        try:
            log_fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            log_fd = sys.stderr.fileno()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        # The child imports exactly what this process imports: this ingestd and its
        # dependencies, wherever they were found (a venv, a source checkout, a bench).
        # (An editable install finds ingestd through a .pth hook that PYTHONPATH entries
        # do not run: its root goes first.)
        root = str(Path(ingestd.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([root, *(p for p in sys.path if p)])
        argv = ["-m", "ingestd.sources.sftp.process", str(theirs.fileno()), str(log_fd)]
        with theirs:
            try:
                proc = self._popen([sys.executable, *argv], theirs, log_fd, env)
            except PermissionError:
                # The interpreter's path is not ours to walk (a venv whose python links
                # into a home directory the service user cannot enter); the running
                # binary itself still is.
                proc = self._popen(["/proc/self/exe", *argv], theirs, log_fd, env)
        channel = Channel(ours)
        child = Child(slot, proc, channel, Peer(channel), owner=f"p{slot}.{proc.pid}")
        with self._lock:
            self._children[slot] = child
        start = StartArgs(self.config, child.owner, level, fmt, self.tenant_status is not None)
        with contextlib.suppress(PeerGone):  # a child dead at once: the supervisor sees it
            child.peer.notify(Op.start, start)
            if self.tenant_status is not None:
                child.peer.notify(Op.tenants, *self.tenant_status.snapshot())
        threading.Thread(
            target=self._read, args=(child,), name=f"sftp-{child.owner}", daemon=True
        ).start()
        return child

    @staticmethod
    def _popen(
        argv: list[str], theirs: socket.socket, log_fd: int, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv, pass_fds=(theirs.fileno(), log_fd), stdin=subprocess.DEVNULL, env=env
        )

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        with self._lock:
            children = list(self._children.values())
        for child in children:
            with contextlib.suppress(PeerGone):
                child.peer.notify(Op.stop)
        deadline = time.monotonic() + timeout
        for child in children:
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log.warning("sftp.process_killed", pid=child.proc.pid, slot=child.slot)
                child.proc.kill()
                child.proc.wait()
            self._retire(child, expected=True)
        if self._supervisor is not None:
            self._supervisor.join(5)

    def pids(self) -> dict[str, int]:
        """Owner name -> pid of every live process."""
        with self._lock:
            return {c.owner: c.proc.pid for c in self._children.values() if not c.retired}

    def alive(self) -> int:
        with self._lock:
            return sum(1 for c in self._children.values() if c.proc.poll() is None)

    # -- connections -------------------------------------------------------------------
    def dispatch(self, conn: Connection) -> None:
        """Admission's ``start``: hand ``conn`` to the live process with the fewest."""
        assert conn.sock is not None
        with self._lock:
            ready = [c for c in self._children.values() if c.ready.is_set() and not c.retired]
            child = min(ready, key=lambda c: (len(c.conns), c.handed), default=None)
            if child is not None:
                child.handed += 1
                child.conns[conn.id] = conn
                conn.owner = child.owner
        if child is not None:
            try:
                child.peer.notify(
                    Op.connection,
                    conn.id,
                    conn.remote_ip,
                    conn.remote_port,
                    conn.started,
                    fd=conn.sock.fileno(),
                )
                return
            except PeerGone:
                with self._lock:
                    child.conns.pop(conn.id, None)
        self.log.error("sftp.no_process", conn=conn.id, remote_ip=conn.remote_ip)
        self._ended(conn)

    def kill(self, conn: Connection) -> None:
        """Admission's ``kill`` (an eviction): the process serving ``conn`` closes it."""
        with self._lock:
            child = next((c for c in self._children.values() if c.owner == conn.owner), None)
        try:
            if child is None:
                raise PeerGone("no such process")
            child.peer.notify(Op.kill, conn.id, conn.evicted)
        except PeerGone:
            shut_down(conn)

    def reload(self, config: Config) -> None:
        self.config = config
        with self._lock:
            children = list(self._children.values())
        for child in children:
            with contextlib.suppress(PeerGone):
                child.peer.notify(Op.reload, config)

    def _ended(self, conn: Connection) -> None:
        if conn.sock is not None:
            conn.sock.close()
        if self.admission is not None:
            self.admission.remove(conn)

    # -- what the processes ask ----------------------------------------------------------
    def _read(self, child: Child) -> None:
        try:
            while True:
                message, fd = child.channel.recv()
                if fd is not None:
                    os.close(fd)  # nothing sends us descriptors
                if isinstance(message, Reply):
                    continue
                try:
                    value: object = self._answer(child, message)
                    error: IngestdError | None = None
                except IngestdError as exc:
                    value, error = None, exc
                except Exception as exc:
                    self.log.error("sftp.supervisor_error", op=str(message.op), exc_info=True)
                    value, error = None, IngestdError(f"{type(exc).__name__}: {exc}")
                if message.call_id:
                    child.channel.send(Reply(message.call_id, value, error))
        except PeerGone:
            pass  # the process exited; _supervise retires it

    def _answer(self, child: Child, m: Message) -> object:
        a = m.args
        if m.op in SPOOL_OPS:
            return answer_spool(self.spool, child.owner, m.op, a)
        match m.op:
            case Op.ready:
                child.ready.set()
            case Op.admit_session:
                conn = self._conn(a[0])
                if conn is None or self.admission is None:
                    return False
                conn.account = str(a[1]) if a[1] is not None else None
                return self.admission.admit_session(conn)
            case Op.ended:
                with self._lock:
                    conn = child.conns.pop(str(a[0]), None)
                if conn is not None:
                    self._ended(conn)
            case Op.ban_failure:
                return self.bans.failure(str(a[0]), unknown_user=bool(a[1]))
            case Op.event:
                if self.events is not None:
                    type_, severity, tenant, detail, trace, dedupe = a
                    self.events.emit(
                        str(type_),
                        severity,  # type: ignore[arg-type]
                        tenant if isinstance(tenant, str) else None,
                        detail if isinstance(detail, dict) else None,
                        trace if isinstance(trace, str) else None,
                        dedupe=dedupe if isinstance(dedupe, str) else None,
                    )
            case Op.counters:
                (deltas,) = a
                assert isinstance(deltas, list)
                for index, labels, delta in deltas:
                    counter = metrics.SFTP_PROCESS_COUNTERS[index]
                    if labels:
                        counter.labels(**labels).inc(delta)
                    else:
                        counter.inc(delta)
            case Op.flood:
                gate_name, level, event, key, fields = a
                gate = self.gates.get(str(gate_name))
                if gate is not None and isinstance(fields, dict):
                    gate.log_event(str(level), str(event), str(key), **fields)
            case _:
                raise IngestdError(f"unexpected message {m.op}")
        return None

    def _conn(self, conn_id: object) -> Connection | None:
        if self.admission is None:
            return None
        with self.admission.lock:
            return self.admission.conns.get(str(conn_id))

    # -- deaths and replacements ---------------------------------------------------------
    def pushed(self) -> tuple[float, float]:
        """(read_at, max_age) of the statuses last sent to every process: a connection
        dispatched after this went out is judged by them (one ordered channel a process)."""
        return self._pushed

    def push_tenants(self) -> None:
        """The cache's listener: every process gets the statuses just read (and, from the
        supervisor's loop, a max_age changed meanwhile)."""
        if self.tenant_status is None:
            return
        snapshot = self.tenant_status.snapshot()
        self._pushed = snapshot[1:]
        with self._lock:
            children = [c for c in self._children.values() if not c.retired]
        for child in children:
            with contextlib.suppress(PeerGone):
                child.peer.notify(Op.tenants, *snapshot)

    def _supervise(self) -> None:
        due: dict[int, float] = {}
        while not self._stopping.wait(0.2):
            health.beat("sftp.processes", 1.0)
            cache = self.tenant_status
            if cache is not None and cache.snapshot()[1:] != self._pushed:
                self.push_tenants()
            with self._lock:
                children = list(self._children.values())
            for child in children:
                if child.retired or child.proc.poll() is None:
                    continue
                self._retire(child, expected=False)
                lived = time.monotonic() - child.started
                delay = self._delays.get(child.slot, 0.0)
                delay = min(RESPAWN_MAX, max(1.0, delay * 2)) if lived < YOUNG else 0.0
                self._delays[child.slot] = delay
                due[child.slot] = time.monotonic() + delay
            for slot, when in list(due.items()):
                if time.monotonic() >= when and not self._stopping.is_set():
                    del due[slot]
                    metrics.SFTP_PROCESS_RESTARTS.inc()
                    new = self._spawn(slot)
                    self.log.info("sftp.process_replaced", slot=slot, pid=new.proc.pid)

    def _retire(self, child: Child, *, expected: bool) -> None:
        """``child`` has exited: close what it served, drop what it held."""
        with self._lock:
            if child.retired:
                return
            child.retired = True
            conns = list(child.conns.values())
            child.conns.clear()
        child.peer.fail_all("the SFTP process exited")
        child.channel.close()
        for conn in conns:
            self._ended(conn)
        partials = self.spool.forget(child.owner)
        # Only a death can leave an entry on disk unreported: a process told to stop
        # reported everything before it exited, and the next start reads the queue anyway.
        found = 0 if expected else self.spool.reindex()
        code = child.proc.returncode
        fields: dict[str, object] = {
            "slot": child.slot,
            "pid": child.proc.pid,
            "connections": len(conns),
            "partials_discarded": partials,
            "entries_recovered": found,
        }
        if code is not None and code < 0:
            fields["signal"] = signal.Signals(-code).name
        else:
            fields["exit_code"] = code
        if expected:
            self.log.info("sftp.process_stopped", **fields)
        else:
            self.log.error("sftp.process_died", **fields)
