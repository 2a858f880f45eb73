"""Refusals of SFTP requests: the reason for the log and metrics, the message the client reads.

One exception (``SftpRefusal``) for every refused request, mapped to an SFTP status in one
place (``subsystem``). Also what the content check and a failing spool filesystem say.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from paramiko.sftp import SFTP_FAILURE, SFTP_PERMISSION_DENIED

from ingestd.errors import ExitCode, IngestdError
from ingestd.intake import filetypes
from ingestd.intake.items import Reason


class SftpRefusal(IngestdError):
    """A request we refuse; carries the SFTP status code, the reason for the log and the
    message the client sees. ``quiet``: already logged (a refusal repeated, not a new one).

    Not transient: the server answers the request and is done with it; nothing here tries
    it again (the client may send it again, and some reasons, a full spool, pass).
    """

    exit_code = ExitCode.refused
    transient = False

    def __init__(self, code: int, reason: str, message: str, *, quiet: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.quiet = quiet


def refuse(reason: str, message: str, code: int = SFTP_PERMISSION_DENIED) -> SftpRefusal:
    """A refusal of ``reason`` that the client reads as ``message`` (and ``code``)."""
    return SftpRefusal(code, reason, message)


NO_SPACE = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}
# Refusals that are an operator's business, not only the scanner's: wrong content, limits,
# a full spool, a name that is not UTF-8 (a scanner set to another character set loses
# every upload with an umlaut; the event names it escaped). (Other bad names, links and
# paths are refused quietly: attacks and typos.)
OPERATOR_REASONS = frozenset(
    {"bad_type", "empty", "too_large", "quota_exceeded", "spool_full", "bad_encoding"}
)


def storage_refusal(
    exc: OSError, reason: str, outcome: str = "the upload was not stored"
) -> SftpRefusal:
    """What the client reads when the spool's filesystem fails us. A full disk is said as
    such: the scanner's operator cannot fix it, but must know to call the admin, not retry."""
    if exc.errno in NO_SPACE:
        return refuse(
            "spool_full",
            f"the server's spool is full ({NO_SPACE[exc.errno]}); {outcome}",
            SFTP_FAILURE,
        )
    return refuse(reason, f"cannot store the data: {exc.strerror or exc}; {outcome}", SFTP_FAILURE)


def content_refusal(header: bytes, size: int, allowed: frozenset[str]) -> SftpRefusal | None:
    """Why intake would refuse a file of ``size`` bytes starting with ``header``, or None.

    The same test as intake's (``filetypes.detect`` against the allowed types), said
    while the scanner still waits for its answer: refused later, in intake, the file only
    lands in the failed folder and the scanner shows success.
    """
    if size == 0:
        return refuse(str(Reason.empty), "refused: file is empty", SFTP_FAILURE)
    ftype = filetypes.detect(header)
    if ftype is None or ftype.name not in allowed:
        return refuse(
            str(Reason.bad_type),
            f"refused: content is {filetypes.describe(header)}; "
            f"allowed types: {', '.join(sorted(allowed))}",
            SFTP_FAILURE,
        )
    return None


def read_header(path: Path) -> bytes:
    """The first ``HEADER_BYTES`` of a file the server wrote (a partial or a temp upload)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return os.pread(fd, filetypes.HEADER_BYTES, 0)
    finally:
        os.close(fd)


# Refusals a client can repeat in a tight loop (OPEN after OPEN): logged through the
# server's FloodGate, not one line each.
FLOOD_REASONS = frozenset({"too_many_handles", "handles_exhausted"})
