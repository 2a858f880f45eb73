"""Asking a running ``ingestd serve`` to read its config again, after a command changed it.

The daemon records its pid in ``<state_dir>/serve.lock`` (ingestd/daemon/lock.py). If
that process is alive and is an ``ingestd serve``, it is asked to reload: through
``systemctl reload`` when it runs as a systemd service (so systemd knows it reloads and
the unit's ExecReload is the one way in), else with SIGHUP. Nothing running is no error:
the change then takes effect at the next start.

A signal returns at once, and so does systemd's ``reload`` of a unit whose ExecReload is a
``kill -HUP``; the next command (a scanner's first login) must not race the reload. So the
daemon records each reload it finished, ok or not, in ``<state_dir>/run/reload.json``
(``record_reload``), and ``request_reload`` waits for that record to change.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ingestd import durable
from ingestd.daemon.lock import LOCK_NAME

RECORD = Path("run") / "reload.json"
# How long a command waits for the daemon to finish a reload it asked for.
WAIT_SECONDS = 60.0


def record_reload(state_dir: Path, count: int, problems: list[str] | None) -> None:
    """The daemon's side: reload number ``count`` of this process is done (``problems``
    None: the new config is in force; else why it was refused and the old one kept)."""
    path = state_dir / RECORD
    body = {"pid": os.getpid(), "count": count, "ok": problems is None, "problems": problems}
    with contextlib.suppress(OSError):  # a report for the command, never the daemon's end
        path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        durable.replace_whole(path, json.dumps(body).encode(), 0o640)


def _read_record(state_dir: Path) -> dict[str, object] | None:
    try:
        data = json.loads((state_dir / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _wait(state_dir: Path, pid: int, before: dict[str, object] | None, how: str) -> str:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        now = _read_record(state_dir)
        if now is not None and now != before and now.get("pid") == pid:
            if now.get("ok"):
                return f"ingestd serve (pid {pid}) reloaded its config ({how})"
            problems = now.get("problems") or []
            shown = "; ".join(str(p) for p in problems) if isinstance(problems, list) else ""
            return (
                f"ingestd serve (pid {pid}) refused the new config and keeps the old one "
                f"({how}): {shown}"
            )
        time.sleep(0.2)
    return (
        f"asked ingestd serve (pid {pid}) to reload ({how}); no confirmation within "
        f"{WAIT_SECONDS:g} s (see its log)"
    )


def daemon_pid(state_dir: Path) -> int | None:
    """The pid of the ``ingestd serve`` holding ``state_dir``'s lock, if it runs."""
    try:
        text = (state_dir / LOCK_NAME).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None  # gone (the lock file stays after a daemon ends)
    if b"serve" not in cmdline or not any(b"ingestd" in part for part in cmdline):
        return None  # a pid reused by something else
    return pid


def systemd_unit(pid: int) -> str | None:
    """The systemd service ``pid`` runs in (``ingestd.service``), if any."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            m = re.search(r"/([^/]+\.service)$", line)
            if m:
                return m.group(1)
    return None


def request_reload(state_dir: Path) -> str:
    """Ask the daemon of ``state_dir`` to reload and wait until it did; what happened."""
    pid = daemon_pid(state_dir)
    if pid is None:
        return "ingestd serve is not running; the change takes effect at its start"
    before = _read_record(state_dir)
    unit = systemd_unit(pid)
    systemctl = shutil.which("systemctl")
    if unit is not None and unit.startswith("ingestd") and systemctl and os.geteuid() == 0:
        result = subprocess.run(
            [systemctl, "reload", unit], capture_output=True, text=True, timeout=60
        )
        if result.returncode != 0:
            return (
                f"systemctl reload {unit} failed ({result.stderr.strip() or result.returncode}); "
                f"run it yourself"
            )
        return _wait(state_dir, pid, before, f"systemctl reload {unit}")
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        return "ingestd serve is not running; the change takes effect at its start"
    except PermissionError:
        return f"not allowed to signal ingestd serve (pid {pid}): run `kill -HUP {pid}` as its user"
    return _wait(state_dir, pid, before, "SIGHUP")
