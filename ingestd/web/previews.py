"""Page previews for the console's document page: page N of the searchable PDF analysis
made (or, before analysis made one, of a PDF original), as a PNG PREVIEW_WIDTH pixels
wide, drawn on first request and kept beside the document's other derived data.

Invariants enforced here:
- the PDF is drawn in a child process (``python -m ingestd.web.render_page``) with a time
  limit and an address-space limit: a PDF that crashes pdfium, loops or asks for a huge
  bitmap costs that child, never the console that serves everyone;
- only a path inside ``paths.derived`` is read or written (archive/derived.py: a stored
  path that would leave it is no preview), and the page number is checked against the
  stored page count;
- a kept preview is named after the PDF it was drawn from (size and mtime), so a
  document analysed again never shows the old pages; the previews live in the
  document's derived directory, so whatever removes that (a purge, a tenant's removal)
  removes them too. Where that directory is read-only to the console (a derived tree
  outside its unit's writable paths), each preview is drawn again: slower, still right.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ingestd import log
from ingestd.archive import derived
from ingestd.archive.store import ArchiveStore

PREVIEW_WIDTH = 800  # px: a page readable on a laptop's screen, ~100-200 KB as PNG
RENDER_SECONDS = 60  # one page, however hostile
RENDER_MEMORY = 1 << 30  # the child's address space, bytes
PREVIEWS = "previews"  # the sub-directory of a document's derived directory


class NoPreview(Exception):
    """No preview of this page (no PDF, out of range, drawing failed); the reason."""


def page_png(derived_root: Path, searchable_pdf: str | None, page: int, page_count: int) -> bytes:
    """The PNG of ``page`` (1-based) of the document whose searchable PDF is stored at
    ``searchable_pdf`` (relative to ``derived_root``). Raises NoPreview."""
    pdf = derived.inside(derived_root, searchable_pdf)
    if pdf is None or not 1 <= page <= page_count:
        raise NoPreview("no such page")
    try:
        st = pdf.stat()
    except OSError as exc:
        raise NoPreview(f"searchable PDF: {exc.strerror}") from None
    kept = pdf.parent / PREVIEWS / f"{page}-{PREVIEW_WIDTH}-{st.st_size}-{st.st_mtime_ns}.png"
    with contextlib.suppress(OSError):
        return kept.read_bytes()
    return _render(pdf, page, kept)


def original_png(
    derived_root: Path, store: ArchiveStore, archive_path: str, page: int, pages: int
) -> bytes:
    """The PNG of ``page`` of a PDF original analysis has not made a searchable PDF of
    (not yet, or it failed: a document in attention), at most ``pages`` pages. Kept in the
    document's derived directory (``<derived>/<archive path without extension>/``, where
    analysis writes); the original never changes, so its previews never go stale.
    Raises NoPreview."""
    try:
        rel = derived.folder(derived_root, archive_path).relative_to(derived_root)
    except ValueError:
        raise NoPreview("no such document folder") from None
    folder = derived.inside(derived_root, str(rel))
    if folder is None or not 1 <= page <= pages:
        raise NoPreview("no such page")
    kept = folder / PREVIEWS / f"original-{page}-{PREVIEW_WIDTH}.png"
    with contextlib.suppress(OSError):
        return kept.read_bytes()
    with contextlib.suppress(OSError):  # as analysis makes it; read-only: drawn each time
        folder.mkdir(mode=0o750, parents=True, exist_ok=True)
    try:
        with store.reading(archive_path) as pdf:
            return _render(pdf, page, kept)
    except OSError as exc:
        raise NoPreview(f"the original: {exc.strerror}") from None


def _render(pdf: Path, page: int, kept: Path) -> bytes:
    with tempfile.TemporaryDirectory(prefix="ingestd-preview-") as tmp:
        out = Path(tmp) / "page.png"
        command = [
            sys.executable,
            "-m",
            "ingestd.web.render_page",
            str(pdf),
            str(page),
            str(PREVIEW_WIDTH),
            str(out),
            str(RENDER_MEMORY),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=RENDER_SECONDS, check=False
            )
        except subprocess.TimeoutExpired:
            log.get_logger().warning("web.preview_failed", pdf=str(pdf), page=page,
                                     reason=f"took over {RENDER_SECONDS} s")  # fmt: skip
            raise NoPreview("drawing the page took too long") from None
        if done.returncode != 0 or not out.is_file():
            reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            log.get_logger().warning("web.preview_failed", pdf=str(pdf), page=page,
                                     reason=reason[:300])  # fmt: skip
            raise NoPreview("the page could not be drawn")
        data = out.read_bytes()
    _keep(kept, data)
    return data


def _keep(kept: Path, data: bytes) -> None:
    """Write the preview beside the derived data (atomically); a read-only tree is fine."""
    try:
        kept.parent.mkdir(mode=0o750, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".preview-", dir=kept.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, kept)
    except OSError as exc:
        log.get_logger().debug("web.preview_not_kept", path=str(kept), error=exc.strerror)
