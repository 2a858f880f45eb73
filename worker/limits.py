"""The job child's own address space, capped while a block decodes untrusted pages.

The OCR command line gets its cap through prlimit (worker/programs.py); what runs inside
the job child itself (the split's page reader, the in-process tesseract engine) gets it
here: a page that decodes to gigabytes raises MemoryError (or fails an allocation in C)
instead of pushing the machine into swap. Only the soft limit moves, and it is put back
afterwards for the child's next job.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager

_M_ARENA_MAX = -8  # mallopt(3)
ARENAS = 4


@contextmanager
def address_space_limit(limit: int) -> Iterator[None]:
    """RLIMIT_AS (soft) at ``limit`` bytes while the block runs (never raised above a
    lower limit that is already in force)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def address_space_in_use() -> int:
    """Bytes of address space this process maps now (VmSize)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def growth_limit(extra: int) -> Iterator[None]:
    """The address space may grow by ``extra`` bytes while the block runs: what the
    process maps already (interpreter, libraries, warm OCR models) is not the page's."""
    with address_space_limit(address_space_in_use() + extra):
        yield


def fewer_malloc_arenas(arenas: int = ARENAS) -> None:
    """At most ``arenas`` glibc malloc arenas in this process. Every thread that
    allocates may otherwise get an arena of its own, each reserving 64 MiB of address
    space: OCR page threads would use up a growth_limit without touching a page."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, arenas)
