"""What an OCR run is asked to do, and the file types it takes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PDF = "application/pdf"
IMAGE_TYPES = frozenset({"image/tiff", "image/jpeg", "image/png"})


Engine = Literal["tesseract", "tesseract-cli", "ocrmypdf"]


@dataclass(frozen=True)
class OcrOptions:
    # "tesseract": in the job child, warm engines, pages on threads (what the worker
    # uses unless analysis.engine says otherwise); "tesseract-cli": the same pages on
    # threads, each read by tesseract's command line (no tesserocr wheel needed; models
    # load per page); "ocrmypdf": its command line per file
    # (mode "redo" always takes this one). The library's default stays the command
    # line, so a caller that names no engine gets what it got before.
    engine: Engine = "ocrmypdf"
    languages: tuple[str, ...] = ("deu", "eng")
    # PDF pages that already have text: skip them (their text is still extracted), redo
    # (replace an old OCR layer) or force (rasterise and OCR everything).
    mode: Literal["skip", "redo", "force"] = "skip"
    rotate_pages: bool = True  # tesseract's orientation detection; needs tesseract-ocr-osd
    # Orientation confidence a page needs before it is turned (ocrmypdf's default 14).
    # Sparse pages in sans-serif fonts often score lower; lower values also turn pages
    # tesseract is unsure of, wrongly now and then.
    rotate_threshold: float = 14.0
    jobs: int = 0  # pages of this file at once (ocrmypdf --jobs); 0: one per core
    timeout: float = 1800.0  # seconds for the whole file
    page_timeout: float = 600.0  # seconds tesseract may spend on one page
    # Host-wide page slots (worker/analysis/ocr/slots.py): a directory and how many;
    # None: this run is not limited by other runs.
    slots_dir: Path | None = None
    slots: int = 0  # 0: one per core
    thumbnail_width: int = 400  # px, PNG of page 1
    image_dpi: int = 300  # for images without (credible) resolution metadata
    # Limits (None: none). Pages of one file; pixels of one page as OCR rasterises it
    # (PDF pages at image_dpi, images as they are); address space of each process of
    # the OCR run.
    max_pages: int | None = None
    max_page_pixels: int | None = None
    memory_limit: int | None = None
