"""`ingestd account hash-password` refuses an empty or short password with its reason and
exit 2, from a script's stdin and at a terminal alike (a real process each time)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import bcrypt
import pytest

from ingestd.errors import ExitCode
from ingestd.passwords import MIN_PASSWORD_LENGTH, new_password_problem

COMMAND = [sys.executable, "-m", "ingestd.cli", "account", "hash-password", "--rounds", "4"]


def _from_stdin(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(COMMAND, input=text, capture_output=True, text=True, timeout=60)


def test_minimum_is_a_sensible_one() -> None:
    """The minimum is at least 8 characters, counted as characters, not bytes."""
    assert MIN_PASSWORD_LENGTH >= 8
    assert new_password_problem("ä" * MIN_PASSWORD_LENGTH) is None
    assert new_password_problem("ä" * (MIN_PASSWORD_LENGTH - 1)) is not None


@pytest.mark.parametrize(
    ("typed", "reason"),
    [
        ("", "the password is empty"),
        ("\n", "the password is empty"),
        ("x", "the password is too short (1 characters; at least 8)"),
        ("1234567\n", "the password is too short (7 characters; at least 8)"),
        ("x" * 73, "the password is 73 bytes; bcrypt uses at most 72"),
    ],
    ids=["nothing", "empty-line", "one-character", "seven-characters", "too-long"],
)
def test_bad_password_on_stdin_is_refused_with_its_reason(typed: str, reason: str) -> None:
    """A refused password prints no hash, names the reason and exits 2."""
    result = _from_stdin(typed)
    assert result.returncode == ExitCode.usage == 2
    assert result.stdout == ""
    assert result.stderr == f"ingestd: {reason}; no hash made\n"


def test_long_enough_password_on_stdin_is_hashed() -> None:
    """Eight characters and more give a bcrypt hash of exactly that password."""
    result = _from_stdin("scanner-pw\n")
    assert result.returncode == 0, result.stderr
    hashed = result.stdout.strip()
    assert hashed.startswith("$2b$04$")
    assert bcrypt.checkpw(b"scanner-pw", hashed.encode())


def _at_terminal(answers: list[bytes]) -> tuple[int, str]:
    """Run the command on a pseudo-terminal, answering each password prompt in turn."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, with the terminal as stdin
        os.execv(sys.executable, COMMAND)  # noqa: S606 - the command under test
    out = b""
    deadline = time.monotonic() + 60
    pending = list(answers)
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child is gone (EIO on Linux)
                break
            if not chunk:
                break
            out += chunk
            # A prompt is the last thing written (getpass ends a read with a line break).
            if pending and out.endswith((b"Password: ", b"Again: ")):
                os.write(fd, pending.pop(0) + b"\n")
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_short_password_at_a_terminal_is_refused_before_the_second_prompt() -> None:
    """At a terminal a short password is refused at once, with its reason and exit 2."""
    code, out = _at_terminal([b"abc"])
    assert code == 2, out
    assert "the password is too short (3 characters; at least 8); no hash made" in out
    assert "Again:" not in out


def test_long_enough_password_at_a_terminal_is_hashed() -> None:
    """At a terminal a good password, typed twice, gives its hash."""
    code, out = _at_terminal([b"scanner-pw", b"scanner-pw"])
    assert code == 0, out
    assert "$2b$04$" in out
