"""Client paths: canonicalised here and only here, and kept inside the account's inbox.

A NUL byte, a control character or a ``..`` above the root is refused (``resolve``). We
never create symlinks, and any found on the way (an admin's mistake) is refused, not
followed (``Chroot``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from paramiko.sftp import SFTP_NO_SUCH_FILE

from ingestd.sources.sftp.refusals import refuse


def resolve(vpath: str) -> tuple[str, ...]:
    """Canonicalise a client path to components below the inbox root, or refuse it."""
    if "\x00" in vpath:
        raise refuse("nul_byte", "path contains a NUL byte")
    if any(ord(c) < 32 or ord(c) == 127 for c in vpath):
        raise refuse("control_character", "path contains control characters")
    parts: list[str] = []
    for comp in vpath.split("/"):
        if comp in ("", "."):
            continue
        if comp == "..":
            if not parts:
                raise refuse("path_escape", "path leads outside your inbox")
            parts.pop()
            continue
        parts.append(comp)
    return tuple(parts)


def vpath_of(parts: tuple[str, ...]) -> str:
    return "/" + "/".join(parts)


class Chroot:
    """The real paths below an account's inbox ``root``, refusing any symlink on the way."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)

    def real(self, parts: tuple[str, ...]) -> Path:
        real = self.root.joinpath(*parts)
        # Any symlink on the way would make realpath differ from the lexical path. Checked
        # for missing names too: "no such file" below a link would tell what exists there.
        if parts and os.path.realpath(real) != os.path.join(self.real_root, *parts):
            raise refuse("symlink", "symbolic links are not allowed")
        return real

    def lstat(self, parts: tuple[str, ...]) -> os.stat_result | None:
        try:
            st = os.lstat(self.real(parts))
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise refuse("symlink", "symbolic links are not allowed")
        return st

    def parent_dir(self, parts: tuple[str, ...]) -> Path:
        parent = parts[:-1]
        st = self.lstat(parent) if parent else os.lstat(self.root)
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise refuse("no_parent", "the folder does not exist", SFTP_NO_SUCH_FILE)
        return self.real(parent)
