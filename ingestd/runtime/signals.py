"""Signal handling for every long-running process (the daemon, the worker and its
lanes): flags a handler sets, and a wake-up pipe it writes to.

The one rule: a handler only sets a flag and writes a byte to the pipe. The loop waits
on the pipe's read end (``sleep``, or ``fileno`` in its own select) together with
everything else it waits for, so a signal is seen at once, and nothing that could block
(a lock, I/O beyond one byte) ever runs inside a handler. So the flags are plain
attributes, never ``threading.Event``s: ``Event.set()`` takes a lock, and a handler that
interrupts the main thread while it holds that lock (inside ``wait`` or ``clear``) would
wait for itself forever. Threads that need an Event to wait on get one set by the loop,
outside the handler (the daemon's ``stopping``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from types import FrameType
from typing import Any


class Flag:
    """A boolean a signal handler may set. Not a threading.Event: Event.set() takes a
    lock, and a handler running while the main thread holds that lock (in clear() or
    is_set()) would wait for itself forever. A plain attribute store cannot block."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = False

    def set(self) -> None:
        self._value = True

    def clear(self) -> None:
        self._value = False

    def is_set(self) -> bool:
        return self._value


class Flags:
    """Set by signal handlers (nothing else happens in a handler) and by the loop itself
    (``request_stop``: the worker's ``Runner.stop``, a drained queue)."""

    def __init__(self) -> None:
        self.stop = Flag()
        self.reload = Flag()
        self.stop_at = 0.0
        self.signal_name = ""
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._saved: dict[int, Any] = {}
        self._closed = False

    def fileno(self) -> int:
        return self._r

    def install(self) -> None:
        for sig, handler in (
            (signal.SIGTERM, self._on_stop),
            (signal.SIGINT, self._on_stop),
            (signal.SIGHUP, self._on_reload),
        ):
            self._saved[sig] = signal.signal(sig, handler)

    def restore(self) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()

    def close(self) -> None:
        """The previous handlers back first: no late signal may write to a closed fd.
        Closed once, by whoever owns these flags (a process of several slots closes each
        slot's after every slot's thread ended: it pokes them until then); a later poke
        is a no-op, never a byte written into whatever file reused the number."""
        if self._closed:
            return
        self.restore()
        self._closed = True
        os.close(self._r)
        os.close(self._w)

    def sleep(self, seconds: float) -> None:
        """Until a signal (or a ``poke``) comes or ``seconds`` have passed."""
        readable, _, _ = select.select([self._r], [], [], max(0.0, seconds))
        if readable:
            self.clear_wake()

    def poke(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(BlockingIOError):
            os.write(self._w, b"\0")

    def clear_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._r, 512):
                pass

    def request_stop(self, why: str) -> None:
        if not self.stop.is_set():
            self.stop_at = time.monotonic()
            self.signal_name = why
            self.stop.set()
        self.poke()

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop(signal.Signals(signum).name)

    def _on_reload(self, signum: int, frame: FrameType | None) -> None:
        self.reload.set()
        self.poke()
