"""Move a refused file out of the way, with a note saying why. Never follows a link."""

from __future__ import annotations

import contextlib
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

from ingestd.durable import fsync_dir, write_new
from ingestd.intake.fsops import move_entry, same_filesystem
from ingestd.textsafe import escaped, recordable_text

ERROR_SUFFIX = ".error.txt"


def safe_name(name: str) -> str:
    """A file name that is valid UTF-8 and free of control characters, for the failed dir."""
    name = recordable_text(name)
    cleaned = "".join("_" if (ord(c) < 32 or 127 <= ord(c) < 160) else c for c in name)
    # Leave room for ".N" and ".error.txt" within NAME_MAX (255 bytes).
    while len(cleaned.encode()) > 230:
        cleaned = cleaned[:-1]
    return cleaned or "unnamed"


def _free_target(directory: Path, name: str) -> Path:
    target = directory / name
    n = 1
    while os.path.lexists(target) or os.path.lexists(f"{target}{ERROR_SUFFIX}"):
        stem, dot, ext = name.rpartition(".")
        target = directory / (f"{stem}.{n}.{ext}" if dot and stem else f"{name}.{n}")
        n += 1
    return target


def quarantine(
    path: Path,
    failed_dir: Path,
    *,
    subdir: str,
    tenant: str,
    reason: str,
    detail: str,
    name: str | None = None,
) -> Path:
    """Move ``path`` into ``failed_dir/subdir`` with ``<name>.error.txt`` beside it.

    The note is written (and fsynced) first and the file moved second, so a file never
    sits in the failed folder without its reason; if the move fails, the note goes again
    and the file stays where it was (the caller retries). Across filesystems a regular
    file is copied under a temp name, renamed, and only then is the source removed; if
    the source cannot be removed the copy goes too, so a retry never leaves a second
    copy. A symlink, FIFO or device is moved as the directory entry itself (rename never
    follows or opens it); across filesystems such an entry has no content to keep and is
    removed. ``name`` is the file's real name when ``path`` is a spool file with an
    internal name. Returns the path of the note.
    """
    target_dir = failed_dir / subdir if subdir else failed_dir
    target_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
    target = _free_target(target_dir, safe_name(name or path.name))
    note_extra = ""
    if not same_filesystem(path, target_dir) and not stat.S_ISREG(os.lstat(path).st_mode):
        note_extra = "note: the entry was removed (not a regular file, other filesystem)\n"
        target = Path(f"{target}.removed")
    note = Path(f"{target}{ERROR_SUFFIX}")
    # One line per field whatever the text holds: a name's bytes and controls escaped by
    # the one rule for untrusted text (ingestd/textsafe.py).
    text = (
        f"file: {escaped(name if name else str(path))}\n"
        f"tenant: {escaped(tenant)}\n"
        f"reason: {escaped(reason)}\n"
        f"detail: {escaped(detail)}\n"
        f"time: {datetime.now(UTC).isoformat(timespec='seconds')}\n"
        f"{note_extra}"
    )
    write_new(note, text.encode(), 0o640)
    try:
        move_entry(path, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(note)
        raise
    fsync_dir(target_dir)
    with contextlib.suppress(OSError):
        fsync_dir(path.parent)
    return note
