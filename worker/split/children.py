"""Children of a batch as PDFs made from the batch's own page objects.

Pages are copied as objects (pikepdf): the scanned images inside are the batch's bytes,
never decoded and encoded again, so a child is exactly as sharp as what the scanner sent.
The output is deterministic: the same batch and plan give byte-identical children (same
SHA-256), which is what makes a split that crashed half-way end with the same children
once (the archive finds the identical file already there and the database the same
bytes already recorded).

A multi-page TIFF is first made into one PDF with img2pdf (lossless: Group 4 and JPEG
frames are embedded as they are, others losslessly with Flate), then split the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import img2pdf  # type: ignore[import-untyped]
import pikepdf

from worker.split.pageimages import BatchFormat, BatchUnreadable, batch_format
from worker.split.plan import Part


@contextmanager
def as_pdf(path: Path, workdir: Path) -> Iterator[Path]:
    """The batch as a PDF: itself, or a TIFF converted into ``workdir`` (removed after)."""
    if batch_format(path) is not BatchFormat.tiff:
        yield path
        return
    converted = workdir / "batch.pdf"
    with open(converted, "wb") as out:
        # nodate: no creation date, so converting twice gives the same bytes.
        img2pdf.convert(str(path), outputstream=out, nodate=True, engine=img2pdf.Engine.internal)
    try:
        yield converted
    finally:
        converted.unlink(missing_ok=True)


def write_children(pdf: Path, parts: Sequence[Part], out_dir: Path) -> list[Path]:
    """One PDF per part in ``out_dir`` (``part-0001.pdf`` ...). Not fsynced: they are
    work files; the archive copies each one and syncs its copy."""
    written: list[Path] = []
    for n, part in enumerate(parts, start=1):
        dest = out_dir / f"part-{n:04d}.pdf"
        # The batch is opened anew for each child: qpdf keeps what it has read of a source
        # open, so one source for every child grows to the whole batch in memory (280 MB
        # for a 246 MB batch, 38 MB this way; reopening costs ~30 ms a child).
        try:
            with pikepdf.open(pdf) as src, pikepdf.new() as child:
                child.pages.extend(src.pages[part.first : part.last + 1])
                # deterministic_id: the trailer /ID from the content, not from the clock.
                child.save(dest, deterministic_id=True, min_version=src.pdf_version)
        except (pikepdf.PdfError, pikepdf.PasswordError) as exc:
            # Pages that could be read (pdfium is lenient) but not copied: the batch stays
            # whole and archived; an operator decides (no retry makes qpdf read it).
            raise BatchUnreadable(f"cannot copy {part.label()} of the batch: {exc}") from None
        written.append(dest)
    return written
