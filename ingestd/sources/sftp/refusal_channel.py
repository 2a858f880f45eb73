"""The one channel of a refused login (tenant not active): say why in every way a client shows.

OpenSSH's ``sftp`` prints the channel's stderr and nothing of an SFTP status message;
lftp (over ``ssh``) shows an SFTP status message and, for a session that just closes,
only retries. So the channel says both: the reason on stderr as soon as the client sent
its first bytes, then, to an SFTP client, an SFTP version 3 handshake and, to each of
its first requests, a ``permission denied`` status whose message is the same reason;
then exit status 1 and close. No request is ever served. curl (libssh2) shows neither a
stderr line nor a status message, only its own words for the status code.

Bounded: at most ``MAX_ANSWERS`` requests are answered, packets over ``MAX_PACKET`` end
the conversation, and a client silent for ``wait`` seconds is closed.
"""

from __future__ import annotations

import contextlib
import struct

import paramiko
from paramiko.sftp import CMD_INIT, CMD_STATUS, CMD_VERSION, SFTP_PERMISSION_DENIED

# Requests answered with the reason before the channel closes.
MAX_ANSWERS = 16
# The largest request read (a WRITE of 32 KiB data and its header fits); larger: close.
MAX_PACKET = 64 * 1024
SFTP_VERSION = 3


def _read_exact(channel: paramiko.Channel, n: int) -> bytes | None:
    """``n`` bytes from ``channel``; None at end of file or timeout."""
    data = b""
    while len(data) < n:
        try:
            chunk = channel.recv(n - len(data))
        except TimeoutError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def _packet(channel: paramiko.Channel) -> tuple[int, bytes] | None:
    """One SFTP packet: (type, the rest); None at the end, a timeout or an oversized one."""
    head = _read_exact(channel, 4)
    if head is None:
        return None
    (length,) = struct.unpack(">I", head)
    if not 1 <= length <= MAX_PACKET:
        return None
    body = _read_exact(channel, length)
    if body is None:
        return None
    return body[0], body[1:]


def _string(text: bytes) -> bytes:
    return struct.pack(">I", len(text)) + text


def _send(channel: paramiko.Channel, kind: int, payload: bytes) -> None:
    channel.sendall(struct.pack(">IB", len(payload) + 1, kind) + payload)


def tell(channel: paramiko.Channel, text: str, wait: float) -> None:
    """Tell the client of a refused login ``text`` (see the module docstring), then close
    the channel. A client that left first was refused all the same."""
    line = f"ingestd: {text}"
    with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
        channel.settimeout(wait)
        first = _packet(channel)  # the client's first bytes (an SFTP client's INIT)
        channel.send_stderr(f"{line}\r\n".encode())
        if first is not None and first[0] == CMD_INIT:
            _send(channel, CMD_VERSION, struct.pack(">I", SFTP_VERSION))
            for _ in range(MAX_ANSWERS):
                request = _packet(channel)
                if request is None or len(request[1]) < 4:
                    break
                request_id = request[1][:4]
                status = struct.pack(">I", SFTP_PERMISSION_DENIED) + _string(line.encode())
                _send(channel, CMD_STATUS, request_id + status + _string(b""))
        channel.send_exit_status(1)
        channel.close()
