"""What the running daemon knows, on disk, for ``ingestd status`` when Postgres is down.

During an outage the queue's numbers are out of reach, and the questions are exactly the
ones only the daemon can answer: since when is the database gone, how many uploads wait
in the spool, which hot-folder files wait or are stuck. A thread of ``ingestd serve``
probes the database every few seconds and writes ``<state_dir>/run/daemon.json``
(atomically: temp file, rename) with the answers; ``ingestd status`` reads it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingestd.db.database import Database
from ingestd.errors import DatabaseError
from ingestd.log import get_logger

STATE_FILE = Path("run") / "daemon.json"
INTERVAL = 2.0
# Older than this, the file describes a daemon that is gone (stopped, killed, hung).
STALE_AFTER = 30.0

Provider = Callable[[], dict[str, Any]]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class DaemonState(threading.Thread):
    """Probe the database and write the state file every ``interval`` seconds."""

    def __init__(
        self,
        db: Database,
        state_dir: Path,
        providers: dict[str, Provider],
        *,
        interval: float = INTERVAL,
    ) -> None:
        super().__init__(name="daemon-state", daemon=True)
        self.db = db
        self.path = state_dir / STATE_FILE
        self.providers = providers
        self.interval = interval
        self.log = get_logger(component="daemon")
        self._halt = threading.Event()
        self.started_at = _now()
        self.database_up: bool | None = None  # None: not probed yet
        self.down_since: str | None = None
        self.last_error: str | None = None
        self._down_t0 = 0.0

    def stop(self, timeout: float = 10.0) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout)
        with contextlib.suppress(OSError):  # a stopped daemon has no live state
            self.path.unlink()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.probe()
                self.write()
            except Exception:  # a bug here must not end the reports for good
                self.log.exception("daemon.state_failed")
            self._halt.wait(self.interval)

    def probe(self) -> None:
        try:
            with self.db.transaction() as tx:
                tx.raw("SELECT 1")
        except DatabaseError as exc:
            if self.database_up is not False:
                self.down_since, self._down_t0 = _now(), time.monotonic()
                self.log.error("daemon.database_down", detail=exc.message, spool_keeps_uploads=True)
            self.database_up, self.last_error = False, exc.message
            return
        if self.database_up is False:
            self.log.info(
                "daemon.database_up", outage_seconds=round(time.monotonic() - self._down_t0, 1)
            )
        self.database_up, self.down_since, self.last_error = True, None, None

    def snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pid": os.getpid(),
            "started_at": self.started_at,
            "updated_at": _now(),
            "updated_epoch": time.time(),
            "database": {
                "up": self.database_up,
                "down_since": self.down_since,
                "error": self.last_error,
            },
        }
        for name, provider in self.providers.items():
            out[name] = provider()
        return out

    def write(self) -> None:
        body = json.dumps(self.snapshot(), ensure_ascii=False, default=str).encode()
        self.path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".daemon-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            os.chmod(tmp, 0o640)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """The running daemon's last report, or None (not running, stale, unreadable)."""
    try:
        data = json.loads((state_dir / STATE_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if time.time() - float(data.get("updated_epoch", 0)) > STALE_AFTER:
        return None
    return data
