"""Every benchmark's small mode runs in `make test`, so none can break unnoticed.

The numbers are not asserted (speed is the benchmarks' business, on a quiet machine);
only that each one runs the product and its baseline to the end and prints its table.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SMALL = {
    "intake": ["--files", "40", "--rounds", "1", "--size", "50000"],
    "watch": ["--files", "40", "--rounds", "1", "--stable", "0.5"],
    "queue": ["--small", "--rounds", "1", "--no-pgqueuer"],
    "sftp": ["--small"],
    "ocr": ["--small"],
    "split": ["--pages", "12", "--rounds", "1"],
    "audit": ["--events", "20000", "--rounds", "1"],
    "search": ["--small"],
    "web": ["--small"],
    "documents": ["--docs", "15", "--rounds", "1"],
}


@pytest.mark.timeout(900)  # the subprocess's own bound; a busy CI machine needs minutes
@pytest.mark.parametrize("bench", sorted(SMALL))
def test_bench_small_mode_prints_its_table(bench: str) -> None:
    """bench/<name>.py in its small mode exits 0 with a table comparing to a baseline."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / f"{bench}.py"), *SMALL[bench]],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert len(table) >= 3, proc.stdout[-2000:]
    assert "ratio" in table[0] or "vs baseline" in table[0], table[0]


def test_every_benchmark_has_a_small_mode_here() -> None:
    """A new bench/ script cannot be left out of `make test`: each one is listed above."""
    scripts = {p.stem for p in (REPO / "bench").glob("*.py") if not p.stem.startswith("_")}
    assert scripts == set(SMALL)
