"""OCR's outputs put in place atomically, and the debris of killed runs removed."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

TMP_PREFIX = ".ocr-tmp-"


def publish(tmp: Path, dest: Path) -> None:
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)  # data on disk before the name points at it
    finally:
        os.close(fd)
    os.replace(tmp, dest)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_stale_temp_dirs(out_dir: Path, max_age: float) -> None:
    """Temp dirs of killed runs (worker timeout, SIGKILL, power loss): their process is gone,
    or they are older than any live run may be. Names carry the run's pid."""
    now = time.time()
    with os.scandir(out_dir) as entries:
        for entry in entries:
            if not entry.name.startswith(TMP_PREFIX):
                continue
            pid = entry.name[len(TMP_PREFIX) :].split("-", 1)[0]
            with contextlib.suppress(OSError):
                too_old = now - entry.stat(follow_symlinks=False).st_mtime > max_age
                if too_old or not pid.isdigit() or not _pid_alive(int(pid)):
                    shutil.rmtree(entry.path, ignore_errors=True)
