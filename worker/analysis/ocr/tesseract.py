"""The in-process engine: tesseract through tesserocr, page by page, on every core.

For each page of the input PDF (an image became one page per frame already):

- mode ``skip``: a page that has text (pdfium finds characters on it) keeps it and is not
  rasterised at all; a file whose pages all have text (born digital) needs no engine,
  no slot and no rendering: its derived PDF is a copy, its text is pdfium's;
- every other page is rendered by pdfium straight into memory, in gray, at the scan's
  own resolution (the page's images tell it; ``image_dpi`` for pages without), and read
  by a warm engine (worker/analysis/ocr/warm.py) while its thread holds a host-wide page
  slot (worker/analysis/ocr/slots.py). Pages of one file run on ``jobs`` threads at once;
- orientation: a page read with high confidence is upright (upside-down or sideways
  text reads as nonsense at a confidence near 30, upright scans score 80 to 95). Only a
  page below ``CONFIDENT`` goes through tesseract's orientation detection (on a half-size
  copy: as reliable, a quarter of the time), and is turned when that is at least
  ``rotate_threshold`` sure and the turned page reads better. The searchable PDF shows
  it turned (its /Rotate), like ocrmypdf --rotate-pages does, but OSD is not paid for
  the ~99 % of pages that are upright;
- time: each page is recognised with a deadline (``page_timeout``, and what is left of
  the file's ``timeout``): tesseract stops at it, the page's error names it;
- the searchable PDF is the input with the text layer of each OCRed page laid over the
  original page (worker/analysis/ocr/textlayer.py): nothing of the page is re-encoded.

pdfium is not thread-safe: every call into it holds ``_PDFIUM``. Rendering is a tenth
of a page's OCR time, so that lock costs nothing measurable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pikepdf
import pypdfium2  # type: ignore[import-untyped]
from PIL import Image

from ingestd import log
from worker.analysis.ocr import command_line, warm
from worker.analysis.ocr.errors import OcrError, OcrFailed, OcrLimitExceeded, OcrTimeout
from worker.analysis.ocr.inspection import page_images
from worker.analysis.ocr.options import OcrOptions
from worker.analysis.ocr.reading import Reading
from worker.analysis.ocr.slots import PageSlots
from worker.analysis.ocr.text import clean, page_text
from worker.analysis.ocr.textlayer import PageWords, Word, glyphless_font, lay_over, page_rotation

CONFIDENT = 70  # mean word confidence (0..100) above which a page is taken as upright
TURN_SLACK = 5  # confidence points a turned page may read worse and still be turned
MIN_WORDS_FOR_OSD = 3  # a page with fewer words has nothing to orient by
MIN_DPI, MAX_DPI = 150, 600  # the resolution pages are rendered at, from their images
_PDFIUM = threading.Lock()
_log = log.get_logger(component="ocr")


@dataclass(frozen=True, slots=True)
class PageResult:
    text: str
    words: PageWords


def ocr_pdf(
    pdf_in: Path,
    out_pdf: Path,
    opts: OcrOptions,
    deadline: float,
    tessdata: str,
    slots: PageSlots | None,
) -> tuple[list[str], int]:
    """OCR ``pdf_in`` into ``out_pdf``; the text of every page, and how many were OCRed
    (the others had text)."""
    with _pdfium(pdf_in) as doc:
        count = len(doc)
        texts: list[str | None] = [None] * count
        todo: list[int] = []
        for i in range(count):
            text = None if opts.mode == "force" else _text_of(doc, i)
            if text:
                texts[i] = text
            else:
                todo.append(i)
        if not todo:
            # Born digital: the derived PDF is the original, byte for byte.
            shutil.copyfile(pdf_in, out_pdf)
            return [clean(t or "") for t in texts], 0
        results = _ocr_pages(doc, pdf_in, todo, opts, deadline, tessdata, slots)
    _write_searchable(pdf_in, out_pdf, results, tessdata)
    for i, res in results.items():
        texts[i] = res.text
    return [clean(t or "") for t in texts], len(results)


@contextlib.contextmanager
def _pdfium(path: Path) -> Iterator[Any]:
    with _PDFIUM:
        try:
            doc = pypdfium2.PdfDocument(str(path))
        except pypdfium2.PdfiumError as exc:
            raise OcrFailed(f"pdfium cannot open the PDF: {exc}") from None
    try:
        yield doc
    finally:
        with _PDFIUM:
            doc.close()


def _text_of(doc: Any, index: int) -> str:
    """The page's text layer ('' for none); whitespace alone is none."""
    with _PDFIUM:
        text = page_text(doc, index)
    return text if text.strip() else ""


# -- pages on threads ----------------------------------------------------------------------
def _ocr_pages(
    doc: Any,
    pdf_in: Path,
    todo: list[int],
    opts: OcrOptions,
    deadline: float,
    tessdata: str,
    slots: PageSlots | None,
) -> dict[int, PageResult]:
    dpis = _render_dpis(pdf_in, todo, opts)
    threads = max(1, min(len(todo), opts.jobs or os.cpu_count() or 1))
    pending = list(reversed(todo))
    results: dict[int, PageResult] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()

    def give_up() -> bool:
        return stop.is_set() or time.monotonic() >= deadline

    def run() -> None:
        try:
            while not stop.is_set():
                with lock:
                    if not pending:
                        return
                    index = pending.pop()
                res = _one_page(doc, index, dpis[index], opts, deadline, tessdata, slots, give_up)
                with lock:
                    results[index] = res
        except BaseException as exc:
            with lock:
                errors.append(exc)
            stop.set()
        finally:
            if slots is not None:
                slots.close()

    workers = [
        threading.Thread(target=run, name=f"ocr-page-{k}", daemon=True) for k in range(threads)
    ]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        # The first real error, not a TimeoutError of a thread told to stop because of it.
        first = next((e for e in errors if isinstance(e, OcrError)), errors[0])
        if isinstance(first, TimeoutError):
            raise OcrTimeout(
                f"OCR did not finish within {opts.timeout:g} s (OcrOptions.timeout)"
            ) from None
        raise first  # MemoryError too: analyze_file names the limit
    return results


def _render_dpis(pdf_in: Path, todo: list[int], opts: OcrOptions) -> dict[int, float]:
    """Per page: the resolution of its largest image (a scan's own), else image_dpi;
    lowered where the raster would exceed max_page_pixels."""
    out: dict[int, float] = {}
    with pikepdf.open(pdf_in) as pdf:
        for index in todo:
            page = pdf.pages[index]
            box = page.cropbox if "/CropBox" in page.obj else page.mediabox
            w_in = abs(float(box[2]) - float(box[0])) / 72 or 1.0
            h_in = abs(float(box[3]) - float(box[1])) / 72 or 1.0
            native = 0.0
            with contextlib.suppress(pikepdf.PdfError, ValueError, TypeError, KeyError):
                for image in page_images(page).values():
                    width, height = int(image.get("/Width", 0)), int(image.get("/Height", 0))
                    # The page's long side against the image's: a sideways scan too.
                    native = max(native, max(width, height) / max(w_in, h_in))
            dpi = float(opts.image_dpi) if native < MIN_DPI else min(native, MAX_DPI)
            if opts.max_page_pixels is not None:
                fit = (opts.max_page_pixels / (w_in * h_in)) ** 0.5
                dpi = min(dpi, fit)
            out[index] = dpi
    return out


def _one_page(
    doc: Any,
    index: int,
    dpi: float,
    opts: OcrOptions,
    deadline: float,
    tessdata: str,
    slots: PageSlots | None,
    give_up: Callable[[], bool],
) -> PageResult:
    hold = slots.hold(give_up) if slots is not None else contextlib.nullcontext(-1)
    with hold as slot:
        began = time.time()
        image, rotate = _render(doc, index, dpi)
        languages = "+".join(opts.languages)
        reading = read(tessdata, languages, image, dpi, index, opts, deadline)
        doubtful = reading.confidence < CONFIDENT or not reading.upright
        if opts.rotate_pages and doubtful and len(reading.words) >= MIN_WORDS_FOR_OSD:
            turn = turn_by(tessdata, image, opts, deadline)
            if turn:
                turned = image.rotate(turn, expand=True)
                again = read(tessdata, languages, turned, dpi, index, opts, deadline)
                # Tesseract reads sideways lines too (as well, turned or not): then the
                # turn is for the searchable PDF, which should show the page upright.
                if again.confidence >= reading.confidence - TURN_SLACK:
                    image, reading = turned, again
                    rotate = (rotate + 360 - turn) % 360
        width, height = image.size
        # Debug level: per page, for the tests that pin "both cores at once" and for an
        # operator tracing a slow file; wall-clock times, comparable across processes.
        _log.debug(
            "ocr.page_read",
            page=index + 1,
            slot=slot,
            dpi=round(dpi),
            confidence=reading.confidence,
            rotate=rotate,
            began=round(began, 3),
            ended=round(time.time(), 3),
            pid=os.getpid(),
        )
    return PageResult(reading.text, PageWords(reading.words, width, height, rotate))


def _render(doc: Any, index: int, dpi: float) -> tuple[Image.Image, int]:
    """The page as displayed, in gray, at ``dpi``; and the /Rotate it is displayed with."""
    with _PDFIUM:
        page = doc[index]
        try:
            rotate = int(page.get_rotation()) % 360
            bitmap = page.render(scale=dpi / 72, grayscale=True, may_draw_forms=False)
            try:
                image = bitmap.to_pil().convert("L")
            finally:
                bitmap.close()
        finally:
            page.close()
    return image, rotate


def read(
    tessdata: str,
    languages: str,
    image: Image.Image,
    dpi: float,
    index: int,
    opts: OcrOptions,
    deadline: float,
) -> Reading:
    """One page image read by the engine the options name: a warm tesserocr engine, or
    tesseract's command line (worker/analysis/ocr/command_line.py)."""
    if opts.engine == "tesseract-cli":
        return command_line.recognize(tessdata, languages, image, dpi, index, opts, deadline)
    return _recognize(tessdata, languages, image, dpi, index, opts, deadline)


def turn_by(tessdata: str, image: Image.Image, opts: OcrOptions, deadline: float) -> int:
    """Degrees (counter-clockwise) to turn the page image by so it reads upright."""
    if opts.engine == "tesseract-cli":
        return command_line.orientation(tessdata, image, opts, deadline)
    return _orientation(tessdata, image, opts)


def _recognize(
    tessdata: str,
    languages: str,
    image: Image.Image,
    dpi: float,
    index: int,
    opts: OcrOptions,
    deadline: float,
) -> Reading:
    import tesserocr  # type: ignore[import-untyped]  # loaded already by warm.engine

    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the file's OCR time is used up")
    budget = min(left, opts.page_timeout)
    with warm.engine(tessdata, languages) as api:
        api.SetImageBytes(image.tobytes(), image.width, image.height, 1, image.width)
        api.SetSourceResolution(round(dpi))
        t0 = time.monotonic()
        ok = api.Recognize(max(1, int(budget * 1000)))
        took = time.monotonic() - t0
        if not ok:
            if took >= budget * 0.95:
                if budget < opts.page_timeout:
                    raise TimeoutError("the file's OCR time ran out on a page")
                raise OcrLimitExceeded(
                    f"page {index + 1}: OCR took longer than analysis.page_timeout "
                    f"({opts.page_timeout:g} s); the page is not read"
                )
            raise OcrFailed(f"tesseract could not read page {index + 1}")
        text = str(api.GetUTF8Text())
        confidence = int(api.MeanTextConf())
        words = _words(api, tesserocr)
        upright = _upright(api, tesserocr)
    return Reading(text, words, confidence, upright)


def _upright(api: Any, tesserocr: Any) -> bool:
    """Whether most text blocks are upright (PAGE_UP), from the layout the recognition
    already made: free, where a separate orientation pass costs a third of a page."""
    level = tesserocr.RIL.BLOCK
    iterator = api.GetIterator()
    if iterator is None:
        return True
    up = other = 0
    for item in tesserocr.iterate_level(iterator, level):
        try:
            orientation, direction = item.Orientation()[:2]
        except (RuntimeError, TypeError, ValueError):
            continue
        # A page turned by 90° reads as upright lines written top to bottom.
        sideways = direction == tesserocr.WritingDirection.TOP_TO_BOTTOM
        if orientation == tesserocr.Orientation.PAGE_UP and not sideways:
            up += 1
        else:
            other += 1
    return up >= other


def _words(api: Any, tesserocr: Any) -> list[Word]:
    level = tesserocr.RIL.WORD
    words: list[Word] = []
    iterator = api.GetIterator()
    if iterator is None:
        return words
    for item in tesserocr.iterate_level(iterator, level):
        try:
            text = item.GetUTF8Text(level)
            box = item.BoundingBox(level)
        except RuntimeError:  # "No text returned": an empty element
            continue
        if not text or not box:
            continue
        baseline = item.Baseline(level)
        if baseline:
            (_, y1), (_, y2) = baseline
            base = round((y1 + y2) / 2)
        else:
            base = box[3]
        words.append(Word(str(text), (box[0], box[1], box[2], box[3]), base))
    return words


def _orientation(tessdata: str, image: Image.Image, opts: OcrOptions) -> int:
    """Degrees (counter-clockwise) to turn the image by so it reads upright; 0 to keep."""
    half = image.reduce(2)
    with warm.engine(tessdata, warm.OSD) as osd:
        osd.SetImageBytes(half.tobytes(), half.width, half.height, 1, half.width)
        found = osd.DetectOrientationScript()
    if not found:
        return 0
    degrees = int(found.get("orient_deg", 0)) % 360
    if degrees not in (90, 180, 270) or float(found.get("orient_conf", 0)) < opts.rotate_threshold:
        return 0
    return degrees


# -- the searchable PDF --------------------------------------------------------------------
def _write_searchable(
    pdf_in: Path, out_pdf: Path, results: dict[int, PageResult], tessdata: str
) -> None:
    font_file = _font_file(tessdata)
    with pikepdf.open(pdf_in) as pdf:
        font = glyphless_font(pdf, font_file)
        for index, res in results.items():
            page = pdf.pages[index]
            if res.words.rotate == page_rotation(page) and not res.words.words:
                continue
            lay_over(pdf, page, res.words, font)
        # No stream decoded and re-encoded: the scan's image data is copied as it is.
        pdf.save(
            out_pdf,
            stream_decode_level=pikepdf.StreamDecodeLevel.none,
            object_stream_mode=pikepdf.ObjectStreamMode.preserve,
        )


def _font_file(tessdata: str) -> Path | None:
    """tesseract's glyphless pdf.ttf, next to its language packs (tesseract-ocr-eng)."""
    path = Path(tessdata) / "pdf.ttf"
    return path if path.is_file() else None
