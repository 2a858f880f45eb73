"""The supervisor's channel to its SFTP processes: whole messages, a descriptor with its
message, calls matched to their replies, errors raised again in the caller."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from ingestd.sources.sftp.ipc import Channel, Message, Op, Peer, PeerGone, Reply
from ingestd.sources.sftp.spool_ledger import QuotaExceeded


def pair() -> tuple[Channel, Channel]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return Channel(a), Channel(b)


def test_messages_arrive_whole_and_in_order_with_their_descriptor() -> None:
    """A large message, a descriptor riding on the next one, then a small one."""
    left, right = pair()
    r, w = os.pipe()
    big = "x" * 3_000_000
    sender = threading.Thread(
        target=lambda: [
            left.send(Message(Op.pending, (big,))),
            left.send(Message(Op.connection, ("c1",)), fd=r),
            left.send(Message(Op.ended, ("c1",))),
        ]
    )
    sender.start()
    first, fd1 = right.recv()
    second, fd2 = right.recv()
    third, fd3 = right.recv()
    sender.join()
    assert isinstance(first, Message) and first.args == (big,) and fd1 is None
    assert isinstance(second, Message) and second.op is Op.connection and fd2 is not None
    assert isinstance(third, Message) and third.op is Op.ended and fd3 is None
    os.write(w, b"ok")
    assert os.read(fd2, 2) == b"ok"  # the same pipe, passed across
    for fd in (r, w, fd2):
        os.close(fd)


def test_a_call_gets_its_reply_and_an_error_is_raised_again() -> None:
    """Replies are matched by id; a QuotaExceeded keeps its figures across the channel."""
    left, right = pair()
    peer = Peer(left, timeout=10)

    def serve() -> None:
        for _ in range(2):
            message, _fd = right.recv()
            assert isinstance(message, Message)
            if message.op is Op.grant:
                right.send(Reply(message.call_id, error=QuotaExceeded(120, 100)))
            else:
                right.send(Reply(message.call_id, value=["entry"]))

    threading.Thread(target=serve, daemon=True).start()
    reader = threading.Thread(target=lambda: _read_replies(left, peer), daemon=True)
    reader.start()
    assert peer.call(Op.pending, "scan1", "") == ["entry"]
    with pytest.raises(QuotaExceeded) as info:
        peer.call(Op.grant, "scan1", 10, 10, 100)
    assert (info.value.used, info.value.limit) == (120, 100)
    right.close()
    reader.join(10)
    with pytest.raises(PeerGone):
        peer.call(Op.pending, "scan1", "")


def _read_replies(channel: Channel, peer: Peer) -> None:
    try:
        while True:
            message, _fd = channel.recv()
            if isinstance(message, Reply):
                peer.resolve(message)
    except PeerGone as exc:
        peer.fail_all(exc.message)
