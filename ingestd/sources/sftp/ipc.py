"""Messages between the SFTP supervisor and its SFTP processes, over a Unix socket pair.

A message is a pickled ``Message`` or ``Reply`` behind a 4-byte length, with at most one
descriptor (an accepted connection) passed along with the length (SCM_RIGHTS). Pickle is
safe here: both ends are our own processes, and the socket pair is made by the
supervisor and inherited, never reachable from outside.

``Peer`` adds calls on top: ``call`` sends a request and waits for its reply (any thread
may call; replies are matched by id), ``notify`` sends one-way. Messages from one side
arrive in the order they were sent, so a one-way "this upload is queued" is always seen
before a later call that lists the queue.
"""

from __future__ import annotations

import itertools
import pickle
import socket
import struct
import threading
from dataclasses import dataclass, field
from enum import StrEnum

from ingestd import log
from ingestd.config.settings import Config
from ingestd.errors import ExitCode, IngestdError

_LENGTH = struct.Struct("!I")
MAX_MESSAGE = 256 * 1024 * 1024  # a config or a listing; anything larger is a bug


class Op(StrEnum):
    # supervisor -> SFTP process
    start = "start"  # (config, owner): the first message
    connection = "connection"  # (conn_id, remote_ip, remote_port, started) + the socket
    kill = "kill"  # (conn_id, evicted): close that connection
    reload = "reload"  # (config,)
    stop = "stop"  # (): close every connection and exit
    tenants = "tenants"  # (statuses, read_at, max_age): the tenant status cache, refreshed
    # SFTP process -> supervisor
    ready = "ready"  # (pid,)
    admit_session = "admit_session"  # (conn_id, account) -> bool
    ended = "ended"  # (conn_id,)
    grant = "grant"  # (account, want, need, limit) -> int, or the quota refusal
    release = "release"  # (account, nbytes)
    stage = "stage"  # (account, reserved, size)
    release_staged = "release_staged"  # (account, nbytes)
    enqueued = "enqueued"  # (entry, reserved, staged)
    pending = "pending"  # (account, subdir) -> list[Entry]
    pending_under = "pending_under"  # (account, subdir) -> bool
    remove = "remove"  # (entry_id,) -> bool
    rename = "rename"  # (entry_id, subdir, filename) -> bool
    ban_failure = "ban_failure"  # (ip, unknown_user) -> float | None
    event = "event"  # (type, severity, tenant, detail, trace_id, dedupe)
    counters = "counters"  # (deltas,): metrics counted since the last report
    flood = "flood"  # (gate, level, event, key, fields): a line for a supervisor's FloodGate


@dataclass(frozen=True)
class StartArgs:
    config: Config
    owner: str
    log_level: str
    log_format: log.Format
    tenant_check: bool  # the supervisor checks tenant statuses (else every login goes in)


@dataclass(frozen=True)
class Message:
    op: Op
    args: tuple[object, ...] = ()
    call_id: int = 0  # 0: one-way


@dataclass(frozen=True)
class Reply:
    call_id: int
    value: object = None
    error: IngestdError | None = None  # raised again in the caller


class PeerGone(IngestdError):
    """The other end of the channel closed (the supervisor or the SFTP process exited)."""

    exit_code = ExitCode.internal
    transient = True


class Channel:
    """Whole messages over a connected Unix stream socket; sends from many threads."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()

    def send(self, message: Message | Reply, fd: int | None = None) -> None:
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        head = _LENGTH.pack(len(body))
        try:
            with self._send_lock:
                if fd is None:
                    self.sock.sendall(head + body)
                else:
                    # The descriptor rides on the first byte of the length; the receiver
                    # reads exactly one message at a time, so it lands with its message.
                    sent = socket.send_fds(self.sock, [head], [fd])
                    self.sock.sendall(head[sent:] + body)
        except OSError as exc:
            raise PeerGone(f"channel closed: {exc.strerror or exc}") from None

    def recv(self) -> tuple[Message | Reply, int | None]:
        """The next message and the descriptor sent with it; PeerGone at the end."""
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.sock, _LENGTH.size, 1)
        except OSError as exc:
            raise PeerGone(f"channel closed: {exc.strerror or exc}") from None
        if not data:
            raise PeerGone("channel closed")
        head = data + self._exactly(_LENGTH.size - len(data))
        (length,) = _LENGTH.unpack(head)
        if length > MAX_MESSAGE:
            raise PeerGone(f"message of {length} bytes")
        message = pickle.loads(self._exactly(length))  # noqa: S301 (our own processes)
        if not isinstance(message, Message | Reply):
            raise PeerGone(f"not a message: {type(message).__name__}")
        return message, (fds[0] if fds else None)

    def _exactly(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        while view:
            try:
                got = self.sock.recv_into(view)
            except OSError as exc:
                raise PeerGone(f"channel closed: {exc.strerror or exc}") from None
            if not got:
                raise PeerGone("channel closed mid-message")
            view = view[got:]
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


@dataclass
class _Waiter:
    done: threading.Event = field(default_factory=threading.Event)
    reply: Reply | None = None


class Peer:
    """Calls and one-way messages over a ``Channel``. Whoever reads the channel hands
    each ``Reply`` to ``resolve``; ``fail_all`` wakes every caller when it closes."""

    def __init__(self, channel: Channel, timeout: float = 30.0) -> None:
        self.channel = channel
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, _Waiter] = {}
        self._gone: str | None = None

    def notify(self, op: Op, *args: object, fd: int | None = None) -> None:
        self.channel.send(Message(op, args), fd)

    def call(self, op: Op, *args: object) -> object:
        waiter = _Waiter()
        with self._lock:
            if self._gone is not None:
                raise PeerGone(self._gone)
            call_id = next(self._ids)
            self._waiting[call_id] = waiter
        try:
            self.channel.send(Message(op, args, call_id))
            if not waiter.done.wait(self.timeout):
                raise PeerGone(f"no answer to {op} within {self.timeout:g} s")
        finally:
            with self._lock:
                self._waiting.pop(call_id, None)
        reply = waiter.reply
        if reply is None:
            raise PeerGone(self._gone or "channel closed")
        if reply.error is not None:
            raise reply.error
        return reply.value

    def resolve(self, reply: Reply) -> None:
        with self._lock:
            waiter = self._waiting.get(reply.call_id)
        if waiter is not None:
            waiter.reply = reply
            waiter.done.set()

    def fail_all(self, why: str) -> None:
        with self._lock:
            self._gone = why
            waiters = list(self._waiting.values())
        for waiter in waiters:
            waiter.done.set()
