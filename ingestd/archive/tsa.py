"""RFC 3161 timestamps for the seals: the request and the check through ``openssl ts``,
the request sent to the timestamp authority over HTTP(S).

The one wrapper around the ``openssl`` program: every call has a deadline, its failure
is a ``TsaError`` carrying openssl's own words. openssl is on every Debian system and is
the tool an auditor checks a token with, so our check is the auditor's check.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ingestd.errors import ExitCode, IngestdError

OPENSSL_TIMEOUT = 30.0
MAX_REPLY_BYTES = 1024 * 1024  # a reply is a few KiB; a TSA sending more is refused


class TsaError(IngestdError):
    """The timestamp could not be obtained or does not verify."""

    exit_code = ExitCode.external_program
    transient = True


def _openssl(args: list[str], stdin: bytes | None = None) -> bytes:
    try:
        done = subprocess.run(
            ["openssl", *args],
            input=stdin,
            capture_output=True,
            timeout=OPENSSL_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise TsaError("openssl is not installed (apt-get install openssl)") from None
    except subprocess.TimeoutExpired:
        raise TsaError(f"openssl {args[0]} {args[1]} took over {OPENSSL_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        raise TsaError(f"openssl {' '.join(args[:2])}: {said[-1] if said else 'failed'}")
    return done.stdout


def request(digest_hex: str) -> bytes:
    """A DER TimeStampReq for a SHA-256 digest, asking for the TSA's certificate in the
    reply (so the token verifies with the CA alone) and with a random nonce."""
    return _openssl(["ts", "-query", "-digest", digest_hex, "-sha256", "-cert"])


def stamp(url: str, digest_hex: str, *, timeout: float) -> str:
    """Ask the TSA at ``url`` to timestamp ``digest_hex``; the reply, base64 DER."""
    # The scheme is checked at config load (http or https only).
    req = urllib.request.Request(  # noqa: S310
        url,
        data=request(digest_hex),
        headers={"Content-Type": "application/timestamp-query"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            reply = resp.read(MAX_REPLY_BYTES + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise TsaError(f"timestamp authority {url}: {exc}") from exc
    if len(reply) > MAX_REPLY_BYTES:
        raise TsaError(f"timestamp authority {url}: the reply is larger than 1 MiB")
    status = _with_file(reply, lambda p: _openssl(["ts", "-reply", "-in", p, "-text"]))
    if b"Status: Granted" not in status:
        first = status.decode(errors="replace").strip().splitlines()[:3]
        raise TsaError(f"timestamp authority {url} did not grant it: {' '.join(first)}")
    return base64.b64encode(reply).decode()


def verify(reply_b64: str, digest_hex: str, ca_file: Path) -> None:
    """TsaError unless the reply is a token over ``digest_hex`` signed by a TSA whose
    certificate chains to ``ca_file``."""
    try:
        reply = base64.b64decode(reply_b64, validate=True)
    except ValueError:
        raise TsaError("the timestamp is not base64") from None
    _with_file(
        reply,
        lambda p: _openssl(
            ["ts", "-verify", "-digest", digest_hex, "-in", p, "-CAfile", str(ca_file)]
        ),
    )


def _with_file(data: bytes, run: Callable[[str], bytes]) -> bytes:
    # openssl ts reads replies from files only.
    fd, name = tempfile.mkstemp(prefix="ingestd-tsr-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return run(name)
    finally:
        os.unlink(name)
