"""One check for files that hold secrets (host keys, the server secret, webhook secrets):
a regular file, not open to others. Refused with a ConfigError saying how to fix it."""

from __future__ import annotations

import os
import stat

from ingestd.errors import ConfigError

# Nothing for group or others: host keys, the server secret.
PRIVATE = 0o077
# Group read allowed (0640 root:ingestd is how a service user reads a root-owned file).
GROUP_READABLE = 0o027


def check_secret_file(st: os.stat_result, what: str, forbidden: int = PRIVATE) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{what}: not a regular file")
    if st.st_mode & forbidden:
        fix = "chmod 600" if forbidden == PRIVATE else "chmod 0600 (or 0640 for a service group)"
        raise ConfigError(f"{what}: mode {stat.S_IMODE(st.st_mode):04o} is too open; {fix}")
