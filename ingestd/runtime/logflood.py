"""Log lines under a flood: the first few of a kind at once, then one summary per interval.

A connection flood must not become 17,000 ``sftp.handshake_failed`` lines in 40 s: log
volume is a resource (the journal rotates away the lines that matter), and a sysadmin
reads "1,234 handshakes failed from 127.0.0.9 in the last 10 s" faster than 1,234 lines.

``FloodGate.log(level, event, key, **fields)``: per ``(event, key)`` (``key`` is the
source, e.g. the remote address), the first ``burst`` lines of an interval are logged as
they come; the rest are counted, and when the interval is over one
``<event>.summary`` line says how many were held back, with the fields of the last one.
Summaries are written by a background thread, so a flood that stops still gets its
summary. fail2ban-style matchers still see the first lines of every interval.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ingestd.log import Logger, get_logger

INTERVAL = 10.0
BURST = 5
# Lines of one event per interval over all sources: a flood from 1,000 addresses is not
# 5,000 lines either; past it, lines from any source are counted in one summary.
GLOBAL_BURST = 100
# Distinct (event, key) pairs tracked at once; past it, new keys share one bucket per
# event (a flood from 100,000 addresses must not grow this without bound).
MAX_KEYS = 10_000
OTHERS = "<other sources>"


@dataclass
class _Bucket:
    started: float
    passed: int = 0
    held: int = 0
    level: str = "warning"
    last: dict[str, Any] = field(default_factory=dict)


class FloodGate:
    """Thread-safe; one per component (its logger), shared by all its threads."""

    def __init__(
        self,
        logger: Logger | None = None,
        *,
        interval: float = INTERVAL,
        burst: int = BURST,
        global_burst: int = GLOBAL_BURST,
    ) -> None:
        self.log = logger if logger is not None else get_logger()
        self.interval = interval
        self.burst = burst
        self.global_burst = global_burst
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        # event -> (start of its interval, lines logged in it over all sources)
        self._logged: dict[str, tuple[float, int]] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def log_event(self, level: str, event: str, key: str, **fields: Any) -> bool:
        """Log ``event`` now, or count it for the summary; True if it was logged now."""
        now = time.monotonic()
        with self._lock:
            start, count = self._logged.get(event, (now, 0))
            if now - start >= self.interval:
                start, count = now, 0
            everywhere = count >= self.global_burst
            bucket_key = (event, OTHERS if everywhere else key)
            if bucket_key not in self._buckets and len(self._buckets) >= MAX_KEYS:
                bucket_key = (event, OTHERS)
            bucket = self._buckets.get(bucket_key)
            if bucket is None or now - bucket.started >= self.interval:
                if bucket is not None and bucket.held:
                    self._summarise(bucket_key, bucket, now)
                bucket = self._buckets[bucket_key] = _Bucket(started=now)
            if bucket.passed < self.burst and not everywhere:
                bucket.passed += 1
                now_logged = True
            else:
                bucket.held += 1
                bucket.level, bucket.last = level, fields
                now_logged = False
            self._logged[event] = (start, count + now_logged)
            self._ensure_thread()
        if now_logged:
            getattr(self.log, level)(event, **fields)
        return now_logged

    def flush(self, *, all_now: bool = False) -> int:
        """Write the summaries of every interval that is over (``all_now``: of every one);
        returns how many."""
        now = time.monotonic()
        written = 0
        with self._lock:
            for bucket_key, bucket in list(self._buckets.items()):
                if now - bucket.started < self.interval and not all_now:
                    continue
                if bucket.held:
                    self._summarise(bucket_key, bucket, now)
                    written += 1
                del self._buckets[bucket_key]
        return written

    def _summarise(self, bucket_key: tuple[str, str], bucket: _Bucket, now: float) -> None:
        # With the lock held; logging is a write to a stream, it does not call back here.
        event, key = bucket_key
        getattr(self.log, bucket.level)(
            f"{event}.summary",
            source=key,
            held_back=bucket.held,
            logged=bucket.passed,
            seconds=round(now - bucket.started, 1),
            last=bucket.last,
        )

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="log-flood", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval / 2):
            self.flush()
            with self._lock:
                if not self._buckets:
                    self._thread = None
                    return

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(5)
        self.flush(all_now=True)
