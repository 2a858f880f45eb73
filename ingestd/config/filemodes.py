"""One check for files that hold secrets (host keys, the server secret, webhook secrets):
a regular file, not open to others. Refused with a ConfigError saying how to fix it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

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


def read_secret_file(path: Path, what: str, forbidden: int = PRIVATE, limit: int = 4096) -> bytes:
    """The secret in ``path`` as a process reads it (trailing newline stripped); a
    ConfigError naming ``what`` if it is missing, unreadable, not a regular file, open to
    others, larger than ``limit`` bytes or empty. Symlinks are followed (systemd and
    Kubernetes credentials are links): the mode checked is the target's."""
    try:
        # O_NONBLOCK: a FIFO put there must be refused, not wait for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError(f"{what}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{what}: cannot open: {exc.strerror}") from None
    try:
        check_secret_file(os.fstat(fd), what, forbidden)
        data = os.read(fd, limit + 1)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ConfigError(f"{what}: larger than {limit} bytes")
    secret = data.rstrip(b"\r\n")
    if not secret.strip():
        raise ConfigError(f"{what}: is empty")
    return secret
