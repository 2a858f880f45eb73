"""Asking a running ``ingestd serve`` to read its config again, after a command changed it.

The daemon records its pid in ``<state_dir>/serve.lock`` (ingestd/ops/daemonlock.py). If
that process is alive and is an ``ingestd serve``, it is asked to reload: through
``systemctl reload`` when it runs as a systemd service (so systemd knows it reloads and
the unit's ExecReload is the one way in), else with SIGHUP. Nothing running is no error:
the change then takes effect at the next start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from ingestd.ops.daemonlock import LOCK_NAME


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
    """Ask the daemon of ``state_dir`` to reload; what was done, in words."""
    pid = daemon_pid(state_dir)
    if pid is None:
        return "ingestd serve is not running; the change takes effect at its start"
    unit = systemd_unit(pid)
    systemctl = shutil.which("systemctl")
    if unit is not None and unit.startswith("ingestd") and systemctl and os.geteuid() == 0:
        result = subprocess.run(
            [systemctl, "reload", unit], capture_output=True, text=True, timeout=60
        )
        if result.returncode == 0:
            return f"reloaded {unit} (systemctl reload {unit})"
        return (
            f"systemctl reload {unit} failed ({result.stderr.strip() or result.returncode}); "
            f"run it yourself"
        )
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        return "ingestd serve is not running; the change takes effect at its start"
    except PermissionError:
        return f"not allowed to signal ingestd serve (pid {pid}): run `kill -HUP {pid}` as its user"
    return f"asked ingestd serve (pid {pid}) to reload (SIGHUP)"
