"""A batch from file to children: read its pages, plan, write the parts.

The one entry point the split-batch job and ``bench/split.py`` share, so the benchmark
measures exactly what a worker does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ingestd.config.split import SplitPolicy
from worker.split import children
from worker.split.plan import Plan, plan
from worker.split.scan import page_count, scan_pages


@dataclass(frozen=True, slots=True)
class SplitOutcome:
    plan: Plan
    # The children's PDFs in out_dir, one per part (none when the plan needs attention
    # or is the whole batch).
    children: list[Path] = field(default_factory=list)


def split_batch(path: Path, policy: SplitPolicy, out_dir: Path) -> SplitOutcome:
    """Split the batch at ``path`` by ``policy``, writing its children into ``out_dir``."""
    count = page_count(path)
    pages = list(scan_pages(path, policy.symbologies))
    decided = plan(pages, policy, count)
    if decided.attention is not None or decided.whole:
        return SplitOutcome(decided)
    with children.as_pdf(path, out_dir) as pdf:
        written = children.write_children(pdf, decided.parts, out_dir)
    return SplitOutcome(decided, written)
