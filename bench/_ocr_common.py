"""What bench/ocr.py's parts share: the tools and limits, the workloads' names and goals,
running a program with a bound, and one side's result."""

from __future__ import annotations

import contextlib
import string
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import BenchError

# The console scripts next to the interpreter running us: the venv's.
INGESTD = str(Path(sys.executable).with_name("ingestd"))
OCRMYPDF = str(Path(sys.executable).with_name("ocrmypdf"))
TESSERACT = "tesseract"
LANGUAGES = "deu+eng"
TENANT = "bench"
WORKER_ID = "bench-1"
RUN_TIMEOUT = 1800.0  # seconds for one side of one workload in one round
PAGE_TIMEOUT = 600.0  # one tesseract call on one page
CLI_TIMEOUT = 120.0  # migrate, tenant create, ingest, search
START_TIMEOUT = 120.0  # the worker provisions the tenant
STOP_TIMEOUT = 60.0  # SIGTERM to exit, then SIGKILL
POLL = 0.1
SKEW = 1.5  # degrees either way, for the noisy scans
KNOWN_WORD = "Straßenreinigung"  # in the body of every letter
MONTHS = ("Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August")
# Surrounding punctuation a word loses before it is compared (ASCII and German quotes).
PUNCTUATION = string.punctuation + "„“”‚‘’«»–—…·"

SIDES = ("limit", "ocrmypdf", "ingestd")
WORKLOADS = ("0", "a", "b", "c")
NAMES = {"0": "clean letter", "a": "noisy scan", "b": "mixed batch", "c": "born-digital"}
GOAL_LIMIT = 0.95  # ingestd/limit pages/min, for (a) and (b)
GOAL_RECALL = -0.5  # ingestd - ocrmypdf, points
GOAL_DOCS = 20.0  # born-digital documents/s


# -- helpers -------------------------------------------------------------------------------
def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def file_tail(path: Path, lines: int = 25) -> str:
    try:
        return tail(path.read_text(errors="replace"), lines)
    except OSError:
        return "(no log)"


def tool_version(argv: list[str]) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError, IndexError):
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return (res.stdout.strip() or res.stderr.strip()).splitlines()[0]
    return "unknown"


def run(argv: list[str], what: str, timeout: float, **kw: Any) -> subprocess.CompletedProcess[str]:
    """``argv`` to completion; a BenchError with its output's tail if it fails."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        raise BenchError(f"{what} did not finish within {timeout:.0f} s\n{tail(text)}") from None
    except OSError as exc:
        raise BenchError(f"{what}: cannot run {argv[0]}: {exc}") from None
    if res.returncode != 0:
        raise BenchError(f"{what}: exit {res.returncode}\n{tail(res.stdout + res.stderr)}")
    return res


@dataclass
class Result:
    seconds: float
    units: int  # pages, or documents for (c)
    recall: float | None = None  # percent; None for (c)
    per_minute: bool = True  # pages/min; False: documents/s

    @property
    def rate(self) -> float:
        return self.units / self.seconds * (60 if self.per_minute else 1)
