"""The command-line page reader (``analysis.engine = "tesseract-cli"``): tesseract's own
program run once per page through pytesseract, for hosts where the tesserocr wheel is
missing (another architecture, a Python it was not built for).

Everything around the reading is the in-process engine's (worker/analysis/ocr/
tesseract.py): pages rendered by pdfium at the scan's resolution, pages on threads under
the host-wide page slots, the text layer laid over the original pages, the same
deadlines. What differs: every page loads its language models again (about a quarter of
a second for deu+eng), and tesseract's TSV output names no text direction. Tesseract
reads a sideways page well, as lines written top to bottom, so confidence alone cannot
tell; the words' boxes can: a word of three letters or more printed across the page is
wider than tall, one running up or down it is taller than wide. A page whose words are
mostly tall goes through orientation detection (``--psm 0``), as with the warm engine.

The page goes to tesseract as a PNG in the job's temp directory; tesseract runs with
the job child's environment (``OMP_THREAD_LIMIT=1``: one page per core), and is killed
at the page's deadline.
"""

from __future__ import annotations

import shlex
import time
from typing import Any

import pytesseract
from PIL import Image

from worker.analysis.ocr.errors import OcrConfigError, OcrFailed, OcrLimitExceeded
from worker.analysis.ocr.options import OcrOptions
from worker.analysis.ocr.reading import Reading
from worker.analysis.ocr.textlayer import Word

WORD_LEVEL = 5  # TSV level of a word (1 page, 2 block, 3 paragraph, 4 line)


def recognize(
    tessdata: str,
    languages: str,
    image: Image.Image,
    dpi: float,
    index: int,
    opts: OcrOptions,
    deadline: float,
) -> Reading:
    """Read one page image; the deadline rules as in the in-process engine: past the
    file's time a TimeoutError, past ``page_timeout`` the page's limit."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the file's OCR time is used up")
    budget = min(left, opts.page_timeout)
    config = f"--psm 3 --dpi {max(1, round(dpi))} --tessdata-dir {shlex.quote(tessdata)}"
    try:
        data = pytesseract.image_to_data(
            image,
            lang=languages,
            config=config,
            output_type=pytesseract.Output.DICT,
            timeout=max(0.01, budget),  # seconds; tesseract is killed past it
        )
    except RuntimeError as exc:  # pytesseract: "Tesseract process timeout"
        if "timeout" not in str(exc).lower():
            raise OcrFailed(f"tesseract could not read page {index + 1}: {exc}") from None
        if budget < opts.page_timeout:
            raise TimeoutError("the file's OCR time ran out on a page") from None
        raise OcrLimitExceeded(
            f"page {index + 1}: OCR took longer than analysis.page_timeout "
            f"({opts.page_timeout:g} s); the page is not read"
        ) from None
    except pytesseract.TesseractNotFoundError:
        raise OcrConfigError("tesseract is not installed (apt-get install tesseract-ocr)") from None
    except pytesseract.TesseractError as exc:
        raise OcrFailed(
            f"tesseract could not read page {index + 1}: {' '.join(str(exc.message).split())}"
        ) from None
    return reading_of(data)


def reading_of(data: dict[str, list[Any]]) -> Reading:
    """A Reading from tesseract's TSV columns: the words with their boxes, the text line
    by line (a blank line between paragraphs), the mean confidence of the words, and
    upright unless most words of three letters or more are taller than wide."""
    words: list[Word] = []
    confidences: list[float] = []
    wide = tall = 0
    lines: list[str] = []
    current: tuple[int, int, int] | None = None
    paragraph: tuple[int, int] | None = None
    line: list[str] = []
    for i, level in enumerate(data.get("level", [])):
        text = str(data["text"][i] or "").strip()
        if int(level) != WORD_LEVEL or not text:
            continue
        key = (int(data["block_num"][i]), int(data["par_num"][i]), int(data["line_num"][i]))
        if key != current:
            if line:
                lines.append(" ".join(line))
            if paragraph is not None and key[:2] != paragraph:
                lines.append("")
            current, paragraph, line = key, key[:2], []
        line.append(text)
        x, y = int(data["left"][i]), int(data["top"][i])
        w, h = int(data["width"][i]), int(data["height"][i])
        words.append(Word(text, (x, y, x + w, y + h), y + h))
        if len(text) >= 3:  # "I", "a", "1.": as tall as wide either way
            wide, tall = (wide + 1, tall) if w >= h else (wide, tall + 1)
        conf = float(data["conf"][i])
        if conf >= 0:
            confidences.append(conf)
    if line:
        lines.append(" ".join(line))
    confidence = round(sum(confidences) / len(confidences)) if confidences else 0
    text = "\n".join(lines) + ("\n" if lines else "")
    return Reading(text, words, confidence, upright=wide >= tall)


def orientation(tessdata: str, image: Image.Image, opts: OcrOptions, deadline: float) -> int:
    """Degrees (counter-clockwise) to turn the image by so it reads upright; 0 to keep
    (also when tesseract finds too little text to tell)."""
    half = image.reduce(2)
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the file's OCR time is used up")
    try:
        found = pytesseract.image_to_osd(
            half,
            config=f"--tessdata-dir {shlex.quote(tessdata)}",
            output_type=pytesseract.Output.DICT,
            timeout=max(0.01, min(left, opts.page_timeout)),
        )
    except (RuntimeError, pytesseract.TesseractError):
        return 0  # "Too few characters", or out of time: the page stays as it is
    degrees = int(found.get("orientation", 0)) % 360
    if (
        degrees not in (90, 180, 270)
        or float(found.get("orientation_conf", 0)) < opts.rotate_threshold
    ):
        return 0
    return degrees
