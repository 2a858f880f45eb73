"""What a client sees of its inbox: folders, temp-named files and pending uploads.

Never our uid/gid or real permissions: a client only needs file vs directory. A completed
upload waiting in the spool's queue is shown where the client put it until intake has it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import paramiko

from ingestd.sources.sftp.spool_entry import Entry

PENDING_FILE_MODE = 0o100640
DIR_ATTR_MODE = 0o040750


def attrs(st: os.stat_result, name: str) -> paramiko.SFTPAttributes:
    """A file or folder of the inbox as the client sees it."""
    attr = paramiko.SFTPAttributes.from_stat(st, name)
    # Never show our uid/gid or real permissions: the client only needs file vs directory.
    attr.st_uid = attr.st_gid = 0
    attr.st_mode = DIR_ATTR_MODE if stat.S_ISDIR(st.st_mode) else PENDING_FILE_MODE
    return attr


def entry_attrs(entry: Entry) -> paramiko.SFTPAttributes:
    """A completed upload still in the spool, as the client sees it."""
    attr = paramiko.SFTPAttributes()
    attr.filename = entry.filename
    attr.st_size, attr.st_mode = entry.size, PENDING_FILE_MODE
    attr.st_uid = attr.st_gid = 0
    attr.st_mtime = attr.st_atime = int(entry.mtime)
    return attr


def listing(directory: Path, pending: list[Entry]) -> list[paramiko.SFTPAttributes]:
    """A folder of the inbox: its folders and (temp-named) files, no links, FIFOs or
    devices, and the completed uploads of ``pending`` that wait in the spool for it."""
    out = []
    with os.scandir(directory) as it:
        for entry in it:
            est = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(est.st_mode) or stat.S_ISREG(est.st_mode):
                out.append(attrs(est, entry.name))
    out.extend(entry_attrs(e) for e in pending)
    return out
