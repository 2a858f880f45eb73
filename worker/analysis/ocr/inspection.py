"""A look at the input before OCR: a readable regular file; a PDF neither encrypted,
damaged nor truncated; pages and pixels within the configured limits (from headers and
page boxes: nothing is rasterised)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import pikepdf
from PIL import Image, ImageSequence

from worker.analysis.ocr.errors import ENCRYPTED, OcrInputError, OcrLimitExceeded
from worker.analysis.ocr.options import OcrOptions


def check_source(src: Path) -> None:
    try:
        st = os.stat(src)
    except FileNotFoundError:
        raise OcrInputError(f"{src} does not exist") from None
    except OSError as exc:
        raise OcrInputError(f"{src} is unreadable: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise OcrInputError(f"{src} is not a regular file")
    if st.st_size == 0:
        raise OcrInputError(f"{src} is empty")
    if not os.access(src, os.R_OK):
        raise OcrInputError(f"{src} is not readable by this process (uid {os.getuid()})")


def _ends_with_eof_marker(src: Path) -> bool:
    with open(src, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - 1024))
        return b"%%EOF" in f.read()


def check_pdf(src: Path, opts: OcrOptions) -> None:
    """Refuse encrypted, unreadable and truncated PDFs, and PDFs over the page or pixel
    limits, before ocrmypdf spends ~1 s starting (or gigabytes rasterising)."""
    try:
        with pikepdf.open(src) as pdf:
            encrypted = pdf.is_encrypted  # owner-password-only PDFs: ocrmypdf refuses those too
            repaired = bool(pdf.get_warnings())
            pages = len(pdf.pages)
            _check_page_count(pages, opts)
            if opts.max_page_pixels is not None and not encrypted:
                for number, page in enumerate(pdf.pages, 1):
                    _check_pdf_page(number, page, opts)
    except pikepdf.PasswordError:
        raise OcrInputError(ENCRYPTED) from None
    except pikepdf.PdfError as exc:
        truncated = not _ends_with_eof_marker(src)
        raise OcrInputError(
            "the PDF is truncated (no end-of-file marker: an interrupted transfer?)"
            if truncated
            else f"the PDF is damaged and cannot be read: {exc}"
        ) from None
    if encrypted:
        raise OcrInputError(ENCRYPTED)
    # qpdf rebuilds a broken cross-reference table; a file cut short rebuilds into a PDF
    # missing its last pages or images, which must not pass for the whole document.
    if repaired and not _ends_with_eof_marker(src):
        raise OcrInputError(
            "the PDF is truncated (no end-of-file marker, cross-reference "
            "table missing: an interrupted transfer?)"
        )
    if pages == 0:
        raise OcrInputError("the PDF has no pages")


def _check_page_count(pages: int, opts: OcrOptions) -> None:
    if opts.max_pages is not None and pages > opts.max_pages:
        raise OcrLimitExceeded(
            f"the file has {pages} pages, more than analysis.max_pages ({opts.max_pages}) allows"
        )


def _megapixels(pixels: float) -> str:
    return f"{pixels / 1e6:,.0f} megapixels"


def _check_pdf_page(number: int, page: pikepdf.Page, opts: OcrOptions) -> None:
    """A page whose raster at ``image_dpi`` is over ``max_page_pixels`` (a 200 x 200 inch
    page is 3,600 megapixels at 300 dpi: about 11 GB for ghostscript to render)."""
    assert opts.max_page_pixels is not None
    try:
        box = page.cropbox if "/CropBox" in page.obj else page.mediabox
        width, height = abs(float(box[2]) - float(box[0])), abs(float(box[3]) - float(box[1]))
        scale = float(page.obj.get("/UserUnit", 1))  # PDF 1.6: points may be larger
    except (pikepdf.PdfError, ValueError, TypeError, IndexError):
        return  # ocrmypdf reports a page it cannot read
    inches = (width * scale / 72, height * scale / 72)
    pixels = inches[0] * inches[1] * opts.image_dpi**2
    if pixels > opts.max_page_pixels:
        raise OcrLimitExceeded(
            f"page {number} is {inches[0]:,.1f} x {inches[1]:,.1f} inches, "
            f"{_megapixels(pixels)} at {opts.image_dpi} dpi, more than "
            f"analysis.max_page_megapixels ({_megapixels(opts.max_page_pixels)}) allows"
        )
    # An image bomb: a page of normal size holding an image tens of thousands of pixels
    # square (a few kilobytes of Flate or JBIG2 that decode to gigabytes). Any renderer
    # decodes the whole image to draw the page, whatever the page's own size.
    try:
        images = list(page_images(page).values())
    except (pikepdf.PdfError, ValueError, TypeError, KeyError):
        return
    for image in images:
        try:
            w, h = int(image.get("/Width", 0)), int(image.get("/Height", 0))
        except (TypeError, ValueError):
            continue
        if w * h > opts.max_page_pixels:
            raise OcrLimitExceeded(
                f"page {number} holds an image of {w:,} x {h:,} pixels "
                f"({_megapixels(w * h)}), more than analysis.max_page_megapixels "
                f"({_megapixels(opts.max_page_pixels)}) allows"
            )


def page_images(page: pikepdf.Page) -> Mapping[str, pikepdf.Object]:
    """The image XObjects in the page's own resources (pikepdf 10: get_images)."""
    getter = getattr(page, "get_images", None)
    if getter is not None:
        return cast(Mapping[str, pikepdf.Object], getter(recursive=False))
    return cast(Mapping[str, pikepdf.Object], page.images)


def check_image(src: Path, opts: OcrOptions) -> None:
    """Frames (pages) and pixels of an image, from its header: nothing is decoded."""
    try:
        with Image.open(src) as im:
            frames = getattr(im, "n_frames", 1)
            _check_page_count(frames, opts)
            if opts.max_page_pixels is None:
                return
            for number, frame in enumerate(ImageSequence.Iterator(im), 1):
                pixels = frame.size[0] * frame.size[1]
                if pixels > opts.max_page_pixels:
                    raise OcrLimitExceeded(
                        f"page {number} is {frame.size[0]} x {frame.size[1]} pixels "
                        f"({_megapixels(pixels)}), more than analysis.max_page_megapixels "
                        f"({_megapixels(opts.max_page_pixels)}) allows"
                    )
    except OcrLimitExceeded:
        raise
    except Image.DecompressionBombError as exc:
        # Pillow's own guard (its header says so much before anything is decoded).
        found = re.search(r"\((\d+) pixels\)", str(exc))
        size = _megapixels(int(found[1])) if found else "more pixels than Pillow decodes"
        limit = _megapixels(opts.max_page_pixels) if opts.max_page_pixels else "no limit"
        raise OcrLimitExceeded(
            f"the image has {size}, too many to decode safely "
            f"(analysis.max_page_megapixels: {limit})"
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise OcrInputError(f"the image cannot be read: {exc}") from None
