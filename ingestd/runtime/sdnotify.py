"""sd_notify(3) without a dependency: datagrams to ``$NOTIFY_SOCKET``.

systemd passes the socket as a path or, with a leading ``@``, as a name in the abstract
namespace. Without ``$NOTIFY_SOCKET`` (not started by systemd, or Type=simple) every call
is a no-op. Sending never raises: a lost status line must not stop a worker.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping


class Notifier:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        self.address: str | None = None
        if raw.startswith("@"):
            self.address = "\0" + raw[1:]
        elif raw.startswith("/"):
            self.address = raw
        self.watchdog_interval: float | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        # WATCHDOG_PID names the process the watchdog is meant for (not our children).
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            # sd_watchdog_enabled(3): ping at half the interval.
            self.watchdog_interval = int(usec) / 1e6 / 2
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: str) -> bool:
        """Send ``KEY=value`` lines as one datagram; False if not sent."""
        if self.address is None:
            return False
        message = "\n".join(f.replace("\n", " ") for f in fields).encode("utf-8", "replace")
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(message, self.address)
        except OSError:
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def reloading(self) -> bool:
        """Type=notify-reload wants the monotonic time with it; READY=1 ends the reload."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self, status: str | None = None) -> bool:
        return self.send("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
