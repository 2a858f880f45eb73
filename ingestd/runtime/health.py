"""Liveness and readiness of a process, answered by ``/healthz`` and ``/readyz``.

**Liveness** (``/healthz``): the process answers and its loops turn. Each long-running
loop calls ``beat(name, period)`` once per turn; a loop is *stale* when it has not turned
for ``max(STALE_FACTOR x period, STALE_FLOOR)`` seconds (plus what ``busy()`` allows, for
a loop that runs one bounded long step per turn, the worker's job). A loop a process must
run but that never turned counts as stale once ``STALE_FLOOR`` has passed since start.
What a supervisor restarts on (systemd's own watchdog is pinged by the main loop alone).

**Readiness** (``/readyz``): what the process needs from outside is there (the database,
a writable spool and archive). Each check returns None or why it fails; it runs in a
thread of its own and is given ``CHECK_TIMEOUT`` seconds: a check stuck on a hung NFS
mount fails with "no answer after N s" instead of hanging the probe, and is not started
again while it hangs (one stuck thread per check at most). What a load balancer in front
of the SFTP port, or an operator's alert, looks at; a restart would not fix it.

Both answer with ``{"status": "ok"|"fail", "checks": {name: {"ok": ..., "reason": ...}}}``.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STALE_FACTOR = 3.0
# Loops that turn every 0.1-1 s must not be called dead for a GC pause, a slow reload
# or a busy disk: at least this long without a turn.
STALE_FLOOR = 30.0
CHECK_TIMEOUT = 2.0
# A filesystem with less free space (or no free inode) is full for the next file.
MIN_FREE_BYTES = 1 << 20
# linux/fs.h: the inode flags lsattr shows (FS_IOC_GETFLAGS reads an int).
_FS_IOC_GETFLAGS = 0x80086601
_FS_IMMUTABLE_FL = 0x10


@dataclass(frozen=True, slots=True)
class _Beat:
    at: float  # time.monotonic()
    period: float
    busy: Callable[[], float] | None


class Heartbeats:
    """The last turn of each named loop of this process (thread-safe: one dict store)."""

    def __init__(self) -> None:
        self._beats: dict[str, _Beat] = {}

    def beat(self, name: str, period: float, busy: Callable[[], float] | None = None) -> None:
        self._beats[name] = _Beat(time.monotonic(), period, busy)

    def get(self, name: str) -> _Beat | None:
        return self._beats.get(name)

    def ages(self) -> dict[str, float]:
        """Seconds since each loop's last turn."""
        now = time.monotonic()
        return {n: round(now - b.at, 3) for n, b in sorted(self._beats.copy().items())}


HEARTBEATS = Heartbeats()


def beat(name: str, period: float, busy: Callable[[], float] | None = None) -> None:
    """Loop ``name`` turned now; it turns again within ``period`` seconds when healthy.

    ``busy``: seconds more the loop may need right now (asked when health is checked),
    e.g. the time limit of the job the worker's loop is running."""
    HEARTBEATS.beat(name, period, busy)


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    ok: bool
    reason: str | None = None
    extra: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok}
        if self.reason is not None:
            out["reason"] = self.reason
        out.update(self.extra)
        return out


def body(results: list[Result]) -> dict[str, Any]:
    ok = all(r.ok for r in results)
    return {"status": "ok" if ok else "fail", "checks": {r.name: r.as_json() for r in results}}


@dataclass(frozen=True, slots=True)
class Loop:
    """A loop the process must run; ``required`` says whether it must right now (the
    SFTP accept loop only while SFTP is on)."""

    name: str
    required: Callable[[], bool] = lambda: True


Check = Callable[[], str | None]


class _Bounded:
    """Run ``fn`` in a thread; wait at most ``timeout``; never two runs at once."""

    def __init__(self, name: str, fn: Check, timeout: float) -> None:
        self.name, self.fn, self.timeout = name, fn, timeout
        self._lock = threading.Lock()
        self._running: Future[str | None] | None = None
        self._started = 0.0

    def start(self) -> tuple[Future[str | None], float]:
        with self._lock:
            if self._running is None or self._running.done():
                fut: Future[str | None] = Future()
                self._running, self._started = fut, time.monotonic()
                threading.Thread(
                    target=self._run, args=(fut,), name=f"check-{self.name}", daemon=True
                ).start()
            return self._running, self._started

    def _run(self, fut: Future[str | None]) -> None:
        try:
            fut.set_result(self.fn())
        except Exception as exc:  # a bug in a check is a failed check, not a 500
            fut.set_result(f"the check itself failed: {type(exc).__name__}: {exc}")

    def wait(self, fut: Future[str | None], started: float) -> str | None:
        left = self.timeout - (time.monotonic() - started)
        try:
            return fut.result(max(left, 0.0))
        except FutureTimeout:
            return (
                f"no answer after {time.monotonic() - started:.0f} s "
                "(a hung filesystem or database?)"
            )


class Health:
    """The liveness loops and readiness checks of one process."""

    def __init__(
        self,
        loops: Iterable[Loop | str] = (),
        ready: Mapping[str, Check] | None = None,
        *,
        beats: Heartbeats = HEARTBEATS,
        factor: float = STALE_FACTOR,
        floor: float = STALE_FLOOR,
        check_timeout: float = CHECK_TIMEOUT,
    ) -> None:
        self.loops = [lp if isinstance(lp, Loop) else Loop(lp) for lp in loops]
        self._checks = {n: _Bounded(n, fn, check_timeout) for n, fn in (ready or {}).items()}
        self.beats, self.factor, self.floor = beats, factor, floor
        self._since = time.monotonic()

    def loop_age(self, name: str) -> tuple[float, float]:
        """(seconds since the loop's last turn, the age at which it is stale)."""
        now = time.monotonic()
        b = self.beats.get(name)
        if b is None:
            return now - self._since, self.floor
        limit = max(self.factor * b.period, self.floor)
        if b.busy is not None:
            limit += max(0.0, float(b.busy()))
        return now - b.at, limit

    def live(self) -> list[Result]:
        out = []
        for loop in self.loops:
            if not loop.required():
                continue
            age, limit = self.loop_age(loop.name)
            extra = {"seconds_since_turn": round(age, 3), "stale_after": round(limit, 3)}
            if age <= limit:
                out.append(Result(loop.name, True, extra=extra))
            elif self.beats.get(loop.name) is None:
                out.append(
                    Result(
                        loop.name, False, f"has not turned since the start {age:.0f} s ago", extra
                    )
                )
            else:
                out.append(
                    Result(
                        loop.name,
                        False,
                        f"stuck: last turn {age:.0f} s ago (stale after {limit:.0f} s)",
                        extra,
                    )
                )
        return out

    def ready(self) -> list[Result]:
        started = [(c, *c.start()) for c in self._checks.values()]  # all at once
        out = []
        for check, fut, t0 in started:
            reason = check.wait(fut, t0)
            out.append(Result(check.name, reason is None, reason))
        return out


# -- checks -------------------------------------------------------------------------------
def _space(path: Path) -> str | None:
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        return f"{path} is full ({free} bytes free)"
    if st.f_files and st.f_favail == 0:
        return f"{path} has no free inodes"
    return None


def writable(*dirs: Path) -> Check:
    """A check: this process may create files in each directory (or make it: its nearest
    existing parent counts) and there is space left. ``access(2)`` knows modes,
    ACLs, ``chattr +i`` and a read-only mount, for root too. Nothing is written: the
    archive stays WORM, the spool's recovery and ``ingestd verify`` never meet a probe
    file."""

    def check() -> str | None:
        for d in dirs:
            existing = d  # not made yet (the archive before its first file): its parent
            while not os.path.lexists(existing) and existing != existing.parent:
                existing = existing.parent
            what = str(d) if existing == d else f"{d} cannot be made: {existing}"
            if not existing.is_dir():
                return f"{what} is not a directory"
            if not os.access(existing, os.W_OK | os.X_OK):
                return f"{what} is not writable ({_why(existing)})"
            full = _space(existing)
            if full is not None:
                return full
        return None

    return check


def _why(path: Path) -> str:
    """Why access(2) said no, in words an operator can act on."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "read-only filesystem"
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            raw = fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))
        except OSError:
            raw = bytes(8)  # no such attribute here
        finally:
            os.close(fd)
        if struct.unpack_from("<I", raw)[0] & _FS_IMMUTABLE_FL:
            return "immutable: chattr +i"
        st = os.stat(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    return f"mode {stat.S_IMODE(st.st_mode):o}, owner uid {st.st_uid}, we are uid {os.geteuid()}"
