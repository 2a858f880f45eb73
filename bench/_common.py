"""Shared helpers for the benchmarks: a durable embedded Postgres and table printing."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ingestd.db.pgcluster import EmbeddedPostgres


@contextlib.contextmanager
def bench_cluster(durable: bool = True) -> Iterator[EmbeddedPostgres]:
    """A private cluster with production settings (fsync on) in a fresh temp dir."""
    base = Path(tempfile.mkdtemp(prefix="ingestd-bench-pg-"))
    base.chmod(0o711)
    cluster = EmbeddedPostgres(base / "pgdata", durable=durable, dbname="bench")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop("fast")
        shutil.rmtree(base, ignore_errors=True)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(cells[0], widths, strict=True)) + " |"
    print(line)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


class BenchError(Exception):
    """A benchmark cannot produce a valid figure (a side failed or timed out)."""


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # Unwind like Ctrl-C does, so servers, workers and Postgres stop and temp dirs go.
    raise KeyboardInterrupt


def run_main(main: Callable[[], None], what: str) -> None:
    """Run a benchmark's main(): SIGTERM unwinds like Ctrl-C; errors exit 1, Ctrl-C 130."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        main()
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(f"interrupted; {what} stopped, temp dirs removed", file=sys.stderr)
        sys.exit(130)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (for a server the bench starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def toml_str(value: str) -> str:
    """``value`` as a TOML basic string: a JSON string (ASCII-only, standard escapes) is one."""
    return json.dumps(value)
