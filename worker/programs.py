"""Run one external program (ocrmypdf, tesseract, ...) with a deadline and bounded output.

The program gets a session of its own, so a timeout kills everything it started (its
worker processes, the tesseract runs under them) with one ``killpg``, and never the
caller. The price: the worker's own timeout kill of the job child (a ``killpg`` of the
child's group) no longer reaches it. So the program is also started under
``setpriv --pdeathsig KILL``: when the calling thread dies (SIGKILLed job child), the
kernel kills the program's leader; its workers then lose their pipes and exit. Call from
the thread that lives as long as the program (the death signal follows the thread).

Output is drained while the program runs (no pipe can fill up and stall it) and only the
last ``tail_bytes`` of each stream are kept: a chatty program cannot exhaust memory.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ingestd.errors import ExitCode, IngestdError

TAIL_BYTES = 64 * 1024
KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL: time to remove temp files
READ_CHUNK = 65536
GROUP_GONE_WAIT = 10.0  # seconds to wait for SIGKILLed processes to be gone (bounded)


class ProgramError(IngestdError):
    """An external program failed to run or to finish; worth a retry unless the caller
    maps it to something that says otherwise."""

    exit_code = ExitCode.external_program
    transient = True


class ProgramNotFound(ProgramError):
    """The executable is not installed (or not executable)."""

    def __init__(self, program: str, detail: str) -> None:
        super().__init__(f"{program}: cannot start it ({detail})")
        self.program = program


class ProgramTimeout(ProgramError):
    """The program ran past its deadline; it and everything it started were killed."""

    def __init__(self, argv: Sequence[str], timeout: float, stderr: str) -> None:
        super().__init__(f"{Path(argv[0]).name} did not finish within {timeout:g} s; killed")
        self.argv = tuple(argv)
        self.timeout = timeout
        self.stderr = stderr


@dataclass(frozen=True)
class ProgramResult:
    argv: tuple[str, ...]
    returncode: int  # negative: killed by that signal
    stdout: str  # the last TAIL_BYTES, decoded leniently
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class _Tail:
    """The last ``limit`` bytes written to it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.dropped = False

    def add(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > self.limit:
            del self.buf[: len(self.buf) - self.limit]
            self.dropped = True

    def text(self) -> str:
        text = self.buf.decode("utf-8", errors="replace")
        return ("[...]" + text) if self.dropped else text


def _pdeathsig_prefix() -> list[str]:
    # util-linux (essential in Debian) has setpriv; without it, only our own timeout applies.
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def _limit_prefix(memory_limit: int | None) -> list[str]:
    """``prlimit --as=N --``: the program and everything it starts (each process on its
    own) may map at most ``memory_limit`` bytes. A PDF that would need gigabytes fails
    with an allocation error instead of waking the OOM killer, which may pick PostgreSQL.
    """
    if memory_limit is None:
        return []
    prlimit = shutil.which("prlimit")  # util-linux, essential in Debian like setpriv
    if prlimit is None:
        raise ProgramNotFound("prlimit", "util-linux is needed to limit memory")
    return [prlimit, f"--as={int(memory_limit)}", "--"]


def _merged_env(env: Mapping[str, str | None] | None) -> dict[str, str]:
    merged = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _kill_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the program's process group, then SIGKILL whatever is left of it; reap it."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    # Even if the leader went, its workers may not have: the group id lives on with them,
    # and the unreaped leader cannot have its pid reused before this kill.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    proc.wait()
    # A signal is delivered when its target next runs: on a loaded machine a killed worker
    # can still be alive (and writing) for a moment. Return only once none is, so callers
    # may remove the program's temp files and report "nothing left".
    _wait_group_gone(pgid, GROUP_GONE_WAIT)


def _group_members(pgid: int) -> list[int]:
    """Pids of live (not yet zombie) processes in process group ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def _wait_group_gone(pgid: int, limit: float) -> None:
    deadline = time.monotonic() + limit
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    timeout: float,
    env: Mapping[str, str | None] | None = None,
    cwd: Path | None = None,
    tail_bytes: int = TAIL_BYTES,
    kill_grace: float = KILL_GRACE,
    memory_limit: int | None = None,
) -> ProgramResult:
    """Run ``argv`` (no shell) to completion or ``timeout`` seconds, whichever is first.

    ``env`` overrides the inherited environment (None removes a variable);
    ``memory_limit``: bytes of address space per process (see ``_limit_prefix``). Returns
    the result whatever the exit code; raises ``ProgramNotFound`` or ``ProgramTimeout``.
    """
    args = [os.fspath(a) for a in argv]
    if not args:
        raise ValueError("empty argv")
    merged = _merged_env(env)
    # Checked here: behind setpriv, a missing program would only be setpriv's exit code.
    exe = args[0] if os.sep in args[0] else shutil.which(args[0], path=merged.get("PATH"))
    if exe is None or not os.access(exe, os.X_OK):
        raise ProgramNotFound(args[0], "not found or not executable")
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        proc = subprocess.Popen(
            [*_pdeathsig_prefix(), *_limit_prefix(memory_limit), exe, *args[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=merged,
            cwd=cwd,
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError) as exc:
        raise ProgramNotFound(args[0], exc.strerror or str(exc)) from None
    out, err = _Tail(tail_bytes), _Tail(tail_bytes)
    finished = False
    try:
        with selectors.DefaultSelector() as sel:
            assert proc.stdout is not None and proc.stderr is not None
            sel.register(proc.stdout, selectors.EVENT_READ, out)
            sel.register(proc.stderr, selectors.EVENT_READ, err)
            # Until both streams close: the leader and every process holding them exited.
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                for key, _ in sel.select(remaining):
                    chunk = os.read(key.fd, READ_CHUNK)
                    if chunk:
                        key.data.add(chunk)
                    else:
                        sel.unregister(key.fileobj)
            if not sel.get_map():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(0.0, deadline - time.monotonic()))
        finished = proc.returncode is not None
    finally:
        if not finished:  # the deadline, or the caller interrupted (KeyboardInterrupt, ...)
            _kill_group(proc, kill_grace)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    if not finished:
        raise ProgramTimeout(args, timeout, err.text())
    return ProgramResult(
        tuple(args), proc.returncode, out.text(), err.text(), time.monotonic() - t0
    )
