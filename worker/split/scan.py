"""Read every page of a batch: its barcodes and how much of it is ink.

One page at a time (``pageimages`` yields a page's picture, this reads it and lets it
go), so memory does not grow with the batch. Per page: the picture at half size (a
scanned page's JPEG decoded at half size by libjpeg; scanned pages are never rendered),
the paper's tone, the ink mask and its block averages (``candidates``), the ink
percentage from those, and the codes (``barcodes``: half-size passes, then the crops of
regions that look like a code and hold none read so far, at full size when they need it).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from pathlib import Path

from ingestd.config.split import Symbology
from worker.split import pageimages
from worker.split.barcodes import read_page
from worker.split.candidates import blocks
from worker.split.ink import ink_mask, ink_percent, paper_level
from worker.split.marks import PageScan
from worker.split.pageimages import BatchUnreadable, PageImage

page_count = pageimages.page_count


def scan_image(page: PageImage, symbologies: Collection[Symbology]) -> PageScan:
    """What one page's picture says."""
    half = page.half
    # The paper's tone from an eighth-size copy: its histogram is 16x cheaper, and paper
    # is paper at any scale.
    paper = paper_level(half.reduce(4) if min(half.size) >= 32 else half)
    averages = blocks(half, ink_mask(half, paper))
    codes = read_page(page, averages, symbologies)
    return PageScan(index=page.index, codes=codes, ink=round(ink_percent(averages.ink), 3))


def scan_pages(path: Path, symbologies: Collection[Symbology]) -> Iterator[PageScan]:
    """Every page of the PDF or multi-page TIFF at ``path``, in order."""
    for page in pageimages.page_images(path):
        yield scan_image(page, symbologies)


__all__ = ["BatchUnreadable", "page_count", "scan_image", "scan_pages"]
