"""OCR of one archived file: a searchable PDF, the text of every page, a thumbnail.

Every input becomes a PDF first (images through img2pdf, losslessly: JPEG data is passed
through, multi-frame TIFFs become one page per frame). Then one of the engines:

- ``tesseract`` (the default; worker/analysis/ocr/tesseract.py): in the job child, with
  engines that stay warm from job to job (models load once), pages rendered by pdfium
  straight into memory and recognised on as many threads as ``jobs`` allows, each page
  holding a host-wide slot (worker.concurrency pages at once, all workers together). A
  file whose pages all have text (born digital) is not rasterised at all. The text
  layer is laid over the original pages; tesseract runs single-threaded per page
  (``OMP_THREAD_LIMIT=1``): one page per core beats tesseract's own threads.
  ``tesseract-cli`` is the same with each page read by tesseract's command line
  (worker/analysis/ocr/command_line.py, through pytesseract): no tesserocr wheel needed,
  a model load per page more;
- ``ocrmypdf``: its command line in a process group of its own (killed at the deadline
  with everything it started), for sites that want its output (and for mode "redo",
  which only it does: it strips an old OCR layer and keeps everything else).

Text per page comes from the engine for the pages it OCRed and from pdfium for pages
that had text; pdfium also renders the thumbnail of page 1 at thumbnail size.

The source is only ever read (it is a 0440 WORM file). Everything is made in a private
temp directory inside ``out_dir`` (ocrmypdf's own temp files too, via TMPDIR), fsynced and
renamed into place, so a re-run replaces the outputs atomically and a killed run leaves
only a temp directory that the next run removes.

This module is the API and the order of the steps; the steps are its modules: options
and errors, installation (tesseract, its language packs, the engines), inspection (the
input and the page and pixel limits), images (to PDF), tesseract with warm, slots and
textlayer (the in-process engine), command_line and reading (the page reader without
tesserocr), engine (the ocrmypdf command line and its exit
status), text (page text and thumbnail), files (publishing, stale temp dirs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pypdfium2  # type: ignore[import-untyped]

from ingestd.durable import fsync_dir
from worker.analysis.ocr import warm
from worker.analysis.ocr.engine import run_ocrmypdf
from worker.analysis.ocr.errors import (
    OcrConfigError,
    OcrError,
    OcrFailed,
    OcrInputError,
    OcrLimitExceeded,
    OcrTimeout,
    out_of_memory,
)
from worker.analysis.ocr.files import TMP_PREFIX, publish, remove_stale_temp_dirs
from worker.analysis.ocr.images import image_to_pdf
from worker.analysis.ocr.inspection import check_image, check_pdf, check_source
from worker.analysis.ocr.installation import (
    check_installation,
    check_options,
    tessdata_dir,
    tesseract_info,
    uses_ocrmypdf,
)
from worker.analysis.ocr.options import IMAGE_TYPES, PDF, OcrOptions
from worker.analysis.ocr.slots import page_slots
from worker.analysis.ocr.tesseract import ocr_pdf
from worker.analysis.ocr.text import ocred_pages, pages_and_thumbnail, render_thumbnail
from worker.limits import growth_limit

# The API: analyze_file with its options, result and errors (worker/jobs/analyze.py,
# the CLI's check-config and the tests use these names from here).
__all__ = [
    "SEARCHABLE_PDF",
    "THUMBNAIL",
    "OcrConfigError",
    "OcrError",
    "OcrFailed",
    "OcrInputError",
    "OcrLimitExceeded",
    "OcrOptions",
    "OcrResult",
    "OcrTimeout",
    "analyze_file",
    "available_languages",
]

SEARCHABLE_PDF = "searchable.pdf"
THUMBNAIL = "thumbnail.png"
STALE_GRACE = 60.0  # seconds past a run's timeout after which its temp dir is debris


@dataclass(frozen=True)
class OcrResult:
    """What one OCR run made: the text per page and the names of its files."""

    pages: list[str]  # text per page, in order
    page_count: int
    searchable_pdf: str  # file name inside out_dir
    thumbnail: str  # file name inside out_dir
    engine: str  # e.g. "tesseract 5.5.4 (tesserocr)", "ocrmypdf 17.13.0, tesseract 5.3.0"
    ocr_pages: int = 0  # pages the engine read (the others had text)
    engine_loads: int = 0  # models this run loaded (0: the warm engines did it all)


def _in_process(
    pdf_in: Path, out_pdf: Path, opts: OcrOptions, deadline: float, mime_type: str
) -> tuple[list[str], int]:
    """The tesseract engine in this process, its address space allowed to grow by
    ``memory_limit`` while it runs (the models it loaded before are not the page's)."""
    slots = None
    if opts.slots_dir is not None:
        slots = page_slots(opts.slots_dir, opts.slots or os.cpu_count() or 1)
    limit = growth_limit(opts.memory_limit) if opts.memory_limit else contextlib.nullcontext()
    try:
        with limit:
            return ocr_pdf(pdf_in, out_pdf, opts, deadline, tessdata_dir(), slots)
    except MemoryError:
        raise out_of_memory(opts.memory_limit, "PDF" if mime_type == PDF else "image") from None


def available_languages() -> set[str]:
    """The language packs tesseract has (``tesseract --list-langs``), cached per process."""
    return set(tesseract_info()[0])


def analyze_file(src: Path, mime_type: str, out_dir: Path, opts: OcrOptions) -> OcrResult:
    """OCR ``src`` (never written to) into ``out_dir``/searchable.pdf and thumbnail.png."""
    deadline = time.monotonic() + opts.timeout
    loads_before = warm.loads()
    check_options(opts)
    engine = check_installation(opts)
    if mime_type != PDF and mime_type not in IMAGE_TYPES:
        raise OcrInputError(
            f"ingestd cannot OCR files of type {mime_type!r} (only PDF, TIFF, JPEG and PNG)"
        )
    src, out_dir = Path(src), Path(out_dir)
    check_source(src)
    if out_dir.resolve() == src.resolve().parent:
        raise OcrConfigError(
            f"OCR output directory {out_dir} is the source's directory; "
            "nothing may be written next to an archived file"
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_dirs(out_dir, opts.timeout + STALE_GRACE)
        work = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=out_dir))
    except OSError as exc:
        raise OcrFailed(f"cannot write into the OCR output directory {out_dir}: {exc}") from None
    try:
        if mime_type == PDF:
            check_pdf(src, opts)
            pdf_in = src
        else:
            check_image(src, opts)
            pdf_in = image_to_pdf(src, work / "input.pdf", opts.image_dpi)
        out_pdf, thumb = work / SEARCHABLE_PDF, work / THUMBNAIL
        if uses_ocrmypdf(opts):
            sidecar = work / "sidecar.txt"
            run_ocrmypdf(pdf_in, out_pdf, sidecar, work, opts, deadline, mime_type)
            pages = pages_and_thumbnail(out_pdf, sidecar, opts, thumb)
            ocred = ocred_pages(sidecar, len(pages), opts.mode)
        else:
            pages, ocred = _in_process(pdf_in, out_pdf, opts, deadline, mime_type)
            if not pages or render_thumbnail(out_pdf, opts.thumbnail_width, thumb) == 0:
                raise OcrFailed("the searchable PDF has no pages")
        publish(out_pdf, out_dir / SEARCHABLE_PDF)
        publish(thumb, out_dir / THUMBNAIL)
        fsync_dir(out_dir)
    except OSError as exc:  # disk full, permissions, the directory removed under us
        raise OcrFailed(f"OCR output in {out_dir}: {exc}") from None
    except pypdfium2.PdfiumError as exc:
        raise OcrFailed(f"pdfium cannot read the PDF: {exc}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return OcrResult(
        pages=pages,
        page_count=len(pages),
        searchable_pdf=SEARCHABLE_PDF,
        thumbnail=THUMBNAIL,
        engine=engine,
        ocr_pages=ocred,
        engine_loads=warm.loads() - loads_before,
    )
