"""The host-wide OCR page slots (worker/analysis/ocr/slots.py): a bound on pages at once
over threads and processes, fair to a waiting page, never leaked by a killed process."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import wait_until
from worker.analysis.ocr.slots import PageSlots


def turnstile_taken(directory: Path) -> bool:
    fd = os.open(directory / "turnstile", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_no_more_pages_at_once_than_slots(tmp_path: Path) -> None:
    """Six threads on two slots: never more than two inside at once, all get through."""
    slots = PageSlots(tmp_path, 2)
    inside, most, done = 0, 0, []
    lock = threading.Lock()
    gate = threading.Event()

    def page(n: int) -> None:
        nonlocal inside, most
        with slots.hold(lambda: False):
            with lock:
                inside += 1
                most = max(most, inside)
            gate.wait(0.05)
            with lock:
                inside -= 1
        done.append(n)
        slots.close()

    threads = [threading.Thread(target=page, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(done) == list(range(6)) and most == 2


def test_a_waiting_page_gets_the_slot_before_its_holder_takes_it_again(tmp_path: Path) -> None:
    """One slot held by a batch's thread, a one-page scan waiting: when the batch gives
    the slot back and asks again at once, the waiting page goes first (the turnstile)."""
    slots = PageSlots(tmp_path, 1)
    order: list[str] = []
    release = threading.Event()
    waiter_in = threading.Event()

    def batch() -> None:
        with slots.hold(lambda: False):
            order.append("batch page 1")
            release.wait(60)
        with slots.hold(lambda: False):
            order.append("batch page 2")
        slots.close()

    def scan() -> None:
        waiter_in.set()
        with slots.hold(lambda: False):
            order.append("scan page")
        slots.close()

    a = threading.Thread(target=batch)
    a.start()
    wait_until(lambda: order == ["batch page 1"])
    b = threading.Thread(target=scan)
    b.start()
    waiter_in.wait(60)
    wait_until(lambda: turnstile_taken(tmp_path))  # the scan waits inside the turnstile
    release.set()
    a.join(60)
    b.join(60)
    assert order == ["batch page 1", "scan page", "batch page 2"]


def test_giving_up_ends_the_wait(tmp_path: Path) -> None:
    """A wait whose give_up() says so (the file's deadline) ends with TimeoutError."""
    slots = PageSlots(tmp_path, 1)
    held = threading.Event()
    done = threading.Event()

    def holder() -> None:
        with slots.hold(lambda: False):
            held.set()
            done.wait(60)
        slots.close()

    t = threading.Thread(target=holder)
    t.start()
    held.wait(60)
    with pytest.raises(TimeoutError), slots.hold(lambda: True):
        pass
    done.set()
    t.join(60)


def test_a_killed_process_leaves_no_slot_taken(tmp_path: Path) -> None:
    """A job child SIGKILLed while it holds the only slot: the kernel drops its lock and
    the next page gets the slot (a semaphore would have lost it for good)."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from worker.analysis.ocr.slots import PageSlots\n"
        "slots = PageSlots(Path(sys.argv[1]), 1)\n"
        "with slots.hold(lambda: False):\n"
        "    print('held', flush=True)\n"
        "    sys.stdin.read()  # held until killed (its stdin never ends)\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=root,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
        slots = PageSlots(tmp_path, 1)
        with pytest.raises(TimeoutError), slots.hold(lambda: True):
            pass
        proc.kill()
        proc.wait(60)
        with slots.hold(lambda: False) as number:
            assert number == 0
        slots.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)
