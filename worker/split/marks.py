"""What reading a page yields: the one hand-off between ``scan`` and ``plan``."""

from __future__ import annotations

from dataclasses import dataclass

from ingestd.config.split import Symbology


@dataclass(frozen=True, slots=True)
class Code:
    """One barcode read on a page."""

    symbology: Symbology
    text: str


@dataclass(frozen=True, slots=True)
class PageScan:
    """One page of a batch as ``scan`` read it."""

    index: int  # 0-based position in the batch
    codes: tuple[Code, ...]
    # Percent of the page (margins excluded) that is ink: a blank page is close to 0.
    ink: float
