"""The split's own memory cap (worker/limits.py: address_space_limit)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import resource
from worker.limits import address_space_limit
before = resource.getrlimit(resource.RLIMIT_AS)
try:
    with address_space_limit(1 << 30):
        bytearray(2 << 30)
except MemoryError:
    print("refused")
with address_space_limit(1 << 30):
    bytearray(64 << 20)
print("small ok")
print("restored" if resource.getrlimit(resource.RLIMIT_AS) == before else "changed")
"""


def test_a_page_past_the_memory_limit_fails_and_the_limit_is_put_back() -> None:
    """2 GiB under a 1 GiB cap is a MemoryError; 64 MiB is fine; the cap is lifted after."""
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    assert out == ["refused", "small", "ok", "restored"]
