"""The text of every page and the thumbnail, from what ocrmypdf wrote: its sidecar for the
pages it OCRed, pdfium for the others (and for every page in "redo" mode, whose sidecar
lacks their visible text); pdfium renders page 1 at thumbnail size too."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pypdfium2  # type: ignore[import-untyped]

from worker.analysis.ocr.errors import OcrFailed
from worker.analysis.ocr.options import OcrOptions

_SKIPPED = re.compile(r"\[OCR skipped on page\(s\) (\d+)(?:-(\d+))?\]")


def clean(text: str) -> str:
    """Page text as plain lines: no CR, no trailing blanks, none of NUL/FF (TEXT columns
    refuse NUL, form feeds separate pages in document_content.content)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "").replace("\f", "")
    # pdfium may hand out lone surrogates from broken fonts: PostgreSQL takes only UTF-8.
    text = text.encode("utf-8", "replace").decode("utf-8")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip()


def _sidecar_pages(text: str) -> list[str | None]:
    """The sidecar per page; None for a page ocrmypdf skipped (runs of skipped pages
    share one placeholder: "[OCR skipped on page(s) 2-4]")."""
    pages: list[str | None] = []
    for chunk in text.split("\f"):
        m = _SKIPPED.fullmatch(chunk.strip())
        if m:
            first, last = int(m[1]), int(m[2] or m[1])
            pages += [None] * (last - first + 1)
        else:
            pages.append(chunk)
    return pages


def ocred_pages(sidecar: Path, count: int, mode: str) -> int:
    """How many of ``count`` pages ocrmypdf OCRed (its sidecar's placeholders name the
    skipped ones; "redo" and "force" OCR every page)."""
    if mode != "skip" or not sidecar.is_file():
        return count
    parsed = _sidecar_pages(sidecar.read_text(encoding="utf-8", errors="replace"))
    return sum(1 for page in parsed if page is not None) if len(parsed) == count else count


@contextlib.contextmanager
def _pdfium(path: Path) -> Iterator[Any]:
    try:
        doc = pypdfium2.PdfDocument(str(path))
    except pypdfium2.PdfiumError as exc:
        raise OcrFailed(f"ocrmypdf wrote a PDF pdfium cannot open: {exc}") from None
    try:
        yield doc
    finally:
        doc.close()


def page_text(doc: Any, index: int) -> str:
    """The text layer of page ``index`` of an open pdfium document."""
    page = doc[index]
    try:
        textpage = page.get_textpage()
        try:
            return str(textpage.get_text_range())
        finally:
            textpage.close()
    finally:
        page.close()


def pages_and_thumbnail(out_pdf: Path, sidecar: Path, opts: OcrOptions, thumb: Path) -> list[str]:
    with _pdfium(out_pdf) as doc:
        count = len(doc)
        ocr: list[str | None] = [None] * count
        # "redo" leaves a page's visible text out of the sidecar: read the PDF instead.
        if opts.mode != "redo" and sidecar.is_file():
            parsed = _sidecar_pages(sidecar.read_text(encoding="utf-8", errors="replace"))
            if len(parsed) == count:  # else (never seen): every page from the PDF
                ocr = parsed
        pages = [
            clean(text if text is not None else page_text(doc, i)) for i, text in enumerate(ocr)
        ]
        if count:
            _render_thumbnail(doc, opts.thumbnail_width, thumb)
    if not count:
        raise OcrFailed("ocrmypdf wrote a PDF without pages")
    return pages


def render_thumbnail(pdf: Path, width: int, dest: Path) -> int:
    """Page 1 of ``pdf`` as a PNG ``width`` pixels wide; the PDF's page count."""
    with _pdfium(pdf) as doc:
        count = len(doc)
        if count:
            _render_thumbnail(doc, width, dest)
    return count


def _render_thumbnail(doc: Any, width: int, dest: Path) -> None:
    page = doc[0]
    try:
        # get_width() is the displayed width (/Rotate applied), as render() draws it.
        bitmap = page.render(scale=width / page.get_width())
        img = bitmap.to_pil()
    finally:
        page.close()
    if img.width != width:  # rounding: the width is a promise, the height follows
        img = img.resize((width, max(1, round(img.height * width / img.width))))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    with open(dest, "wb") as f:
        f.write(buf.getvalue())
