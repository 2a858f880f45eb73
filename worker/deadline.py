"""One deadline for a whole network exchange (lookup, connect, TLS, request, answer).

Used by the webhook delivery (``worker/webhooks.py``) and the SMTP client
(``worker/notify_sinks.py``): both must give up at a fixed time however the other end
behaves, and socket timeouts alone only bound each read.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Self

_AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]


class Deadline:
    """The end of one delivery, enforced on every step of it.

    Socket timeouts bound each operation, not their sum: a receiver that sends a byte a
    little more often than the timeout (or an endless body) would hold the job for as long
    as it likes. So a timer shuts the connection's socket down when the time is up; every
    send or recv blocked on it then returns at once, whichever layer is waiting (TLS
    handshake, proxy tunnel, status line, headers, body), and the request fails. The timer
    shuts down a duplicate of the socket's descriptor that it owns: the connection is the
    same, but the descriptor cannot be closed (and its number reused) under the timer, nor
    be detached by ``ssl.wrap_socket`` mid-handshake. Before there is a connection the
    lookup and the connect are bounded by the time that is left (``connect``).

    This keeps urllib doing the HTTP (proxies, TLS defaults, no redirects) and needs no
    check between reads inside http.client, which reads headers through a buffered file.
    """

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._watched: socket.socket | None = None  # our dup of the connection's socket
        self._finished = False
        self.expired = False  # the timer fired before the delivery had finished
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.name = "webhook-deadline"
        self._timer.daemon = True

    def __enter__(self) -> Self:
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._finished = True
            self._timer.cancel()
            self._forget()

    def remaining(self) -> float:
        """Seconds left; TimeoutError once there are none."""
        left = self._end - time.monotonic()
        if left <= 0 or self.expired:
            raise TimeoutError("deadline passed")
        return left

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down when the time is up; TimeoutError if it already is."""
        # After settimeout: dup() copies the timeout, and so the descriptors' shared
        # O_NONBLOCK flag stays as ``sock`` needs it.
        dup = sock.dup()
        with self._lock:
            self._forget()
            self._watched = dup
            if self.expired or self._finished:
                raise TimeoutError("deadline passed")

    def connect(
        self,
        address: tuple[str, int],
        timeout: float | None = None,
        source_address: tuple[str, int] | None = None,
    ) -> socket.socket:
        """``socket.create_connection`` within the deadline (which supersedes ``timeout``).

        Every address tried gets the time that is left, not a full timeout each; the
        socket keeps that timeout as a backstop for later operations, which the timer
        ends at the deadline anyway.
        """
        host, port = address
        error: OSError | None = None
        for family, kind, proto, _, sockaddr in self._resolve(host, port):
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(self.remaining())
                self.watch(sock)
                if source_address is not None:
                    sock.bind(source_address)
                sock.connect(sockaddr)
                return sock
            except TimeoutError:
                sock.close()
                raise
            except OSError as exc:
                sock.close()
                error = exc
        raise error if error is not None else OSError(f"no address found for {host}")

    def _resolve(self, host: str, port: int) -> list[_AddrInfo]:
        # getaddrinfo has no timeout of its own (the resolver waits 5 s and more per server
        # and attempt): look up in a thread and stop waiting at the deadline. A lookup that
        # outlives it finishes unobserved in its daemon thread.
        found: list[_AddrInfo] = []
        failed: list[Exception] = []

        def lookup() -> None:
            try:
                found.extend(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
            except Exception as exc:  # handed to the caller, as if raised there
                failed.append(exc)

        thread = threading.Thread(target=lookup, name="webhook-lookup", daemon=True)
        thread.start()
        thread.join(self.remaining())
        if thread.is_alive():
            raise TimeoutError(f"looking up {host} took too long")
        if failed:
            raise failed[0]
        return found

    def _expire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self.expired = True
            if self._watched is not None:
                with contextlib.suppress(OSError):
                    self._watched.shutdown(socket.SHUT_RDWR)

    def _forget(self) -> None:
        # With the lock held.
        if self._watched is not None:
            self._watched.close()
            self._watched = None
