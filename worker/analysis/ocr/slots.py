"""Page slots: how many pages are OCRed at once on this host, by every worker together.

A worker runs ``worker.concurrency`` jobs at once and each job OCRs its pages on as many
threads; without a common limit two busy jobs would run four tesseracts on two cores.
So a page is only recognised while its thread holds one of ``worker.concurrency`` slots:
an exclusive ``flock`` on one of the files ``slot-0`` .. ``slot-<N-1>`` in a directory of
the state dir. A lock dies with its process, so a job child killed at its timeout (or by
the OOM killer) can never leak a slot, which a semaphore would.

Fairness: a thread that just gave its slot back and wants the next one must queue like
everybody else. Waiting for a slot happens while holding the ``turnstile`` lock, and a
thread can only take the turnstile once the one inside got its slot; without it, a
300-page batch would win every race for the slot it just freed and a one-page scan
queued behind it would wait for the whole batch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from worker.analysis.ocr.errors import OcrFailed

# Seconds between looks at the slots (a page takes about a second). Polling, not a
# blocking flock: flock has no timeout (a page past the file's deadline must give up
# with OcrTimeout, not wait on) and cannot wait for "any one of N" slots.
POLL = 0.01


class PageSlots:
    """``count`` host-wide page slots in ``directory`` (created, 0700)."""

    def __init__(self, directory: Path, count: int) -> None:
        if count < 1:
            raise ValueError("page slots: count must be >= 1")
        self.directory = Path(directory)
        self.count = count
        self._local = threading.local()
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise OcrFailed(f"cannot make the OCR page slots in {self.directory}: {exc}") from None

    def _fds(self) -> tuple[int, list[int]]:
        """This thread's own descriptors: flock locks belong to an open file, and two
        threads sharing one descriptor would share its lock."""
        fds: tuple[int, list[int]] | None = getattr(self._local, "fds", None)
        if fds is None:
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            try:
                turnstile = os.open(self.directory / "turnstile", flags, 0o600)
                slots = [
                    os.open(self.directory / f"slot-{i}", flags, 0o600) for i in range(self.count)
                ]
            except OSError as exc:
                where = self.directory
                raise OcrFailed(f"cannot open the OCR page slots in {where}: {exc}") from None
            fds = (turnstile, slots)
            self._local.fds = fds
        return fds

    @contextlib.contextmanager
    def hold(self, give_up: Callable[[], bool]) -> Iterator[int]:
        """Wait for a free slot (``give_up()`` True ends the wait with TimeoutError);
        yields its number, frees it on exit."""
        turnstile, slots = self._fds()
        while not _try_lock(turnstile):
            if give_up():
                raise TimeoutError("no OCR page slot became free")
            time.sleep(POLL)
        try:
            start = threading.get_ident() % self.count  # threads start at different slots
            while True:
                for k in range(self.count):
                    number = (start + k) % self.count
                    if _try_lock(slots[number]):
                        break
                else:
                    if give_up():
                        raise TimeoutError("no OCR page slot became free")
                    time.sleep(POLL)
                    continue
                break
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield number
        finally:
            fcntl.flock(slots[number], fcntl.LOCK_UN)

    def close(self) -> None:
        """Close this thread's descriptors (threads of a finished job call it)."""
        fds = getattr(self._local, "fds", None)
        if fds is not None:
            self._local.fds = None
            for fd in (fds[0], *fds[1]):
                with contextlib.suppress(OSError):
                    os.close(fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


_made: dict[tuple[Path, int], PageSlots] = {}
_made_lock = threading.Lock()


def page_slots(directory: Path, count: int) -> PageSlots:
    """The process's PageSlots for ``directory`` (one set of descriptors per thread)."""
    key = (Path(directory), count)
    with _made_lock:
        slots = _made.get(key)
        if slots is None:
            slots = _made[key] = PageSlots(directory, count)
        return slots
