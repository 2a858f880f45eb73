"""OCR of one archived file: a searchable PDF, the text of every page, a thumbnail.

Every input becomes a PDF first (images through img2pdf, losslessly: JPEG data is passed
through, multi-frame TIFFs become one page per frame) and goes through the ``ocrmypdf``
command line, not its Python API: a separate process group can be killed at the
deadline with everything it started (tesseract, ghostscript), and a crash in a C library
stays out of the job child. Tesseract runs single-threaded (``OMP_THREAD_LIMIT=1``):
ocrmypdf already runs one page per core, and tesseract's own threads on top of that make
a 2-core machine slower, not faster (DESIGN.md, measurements).

Text per page comes from ocrmypdf's sidecar for the pages it OCRed; pages it skipped
(they have text already) and every page in "redo" mode (the sidecar lacks their visible
text) are read from the searchable PDF with pdfium, which also renders the thumbnail of
page 1 at thumbnail size: ~0.1 s, no second rasterisation of the document.

The source is only ever read (it is a 0440 WORM file). Everything is made in a private
temp directory inside ``out_dir`` (ocrmypdf's own temp files too, via TMPDIR), fsynced and
renamed into place, so a re-run replaces the outputs atomically and a killed run leaves
only a temp directory that the next run removes.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pikepdf
import pypdfium2  # type: ignore[import-untyped]
from PIL import Image, ImageSequence

from ingestd.errors import ExitCode, IngestdError
from worker import programs

SEARCHABLE_PDF = "searchable.pdf"
THUMBNAIL = "thumbnail.png"
TMP_PREFIX = ".ocr-tmp-"
PDF = "application/pdf"
IMAGE_TYPES = frozenset({"image/tiff", "image/jpeg", "image/png"})
TESSERACT_TIMEOUT = 30.0  # seconds for `tesseract --list-langs` / `--version`
# ocrmypdf's own rule: a claimed resolution at or below 96 dpi is a program's default,
# not a scanner's; such images (and those without any) get OcrOptions.image_dpi.
CREDIBLE_DPI = 96.0
STALE_GRACE = 60.0  # seconds past a run's timeout after which its temp dir is debris
ERROR_TAIL_LINES = 12

# ocrmypdf.ExitCode, spelled out: the ocrmypdf package is not imported into the job child.
EXIT_BAD_ARGS = 1
EXIT_INPUT_FILE = 2
EXIT_MISSING_DEPENDENCY = 3
EXIT_INVALID_OUTPUT_PDF = 4
EXIT_FILE_ACCESS_ERROR = 5
EXIT_ALREADY_DONE_OCR = 6
EXIT_CHILD_PROCESS_ERROR = 7
EXIT_ENCRYPTED_PDF = 8
EXIT_INVALID_CONFIG = 9
EXIT_PDFA_CONVERSION_FAILED = 10
EXIT_OTHER_ERROR = 15
EXIT_CTRL_C = 130

_LANG_NAME = re.compile(r"[A-Za-z0-9_]+(?:/[A-Za-z0-9_]+)?")
_SKIPPED = re.compile(r"\[OCR skipped on page\(s\) (\d+)(?:-(\d+))?\]")
_ENCRYPTED = "the PDF is encrypted (password-protected); ingestd cannot OCR it"


# -- errors ------------------------------------------------------------------------------
class OcrError(IngestdError):
    """Base of the OCR errors below; ``message`` is meant for a sysadmin."""

    exit_code = ExitCode.external_program


class OcrInputError(OcrError):
    """Permanent: this file cannot be OCRed (encrypted, damaged, truncated, unsupported)."""

    exit_code = ExitCode.refused


class OcrConfigError(OcrError):
    """The installation lacks something (a language pack, ocrmypdf, tesseract, ghostscript)
    or the options are wrong: every file would fail until an admin fixes it."""

    exit_code = ExitCode.config_invalid


class OcrLimitExceeded(OcrInputError):
    """Permanent: this file needs more than a configured limit allows (pages, pixels per
    page, memory). Retrying would take the same resources again: the document needs
    attention, and the message names the limit."""


class OcrFailed(OcrError):
    """Anything else; worth a retry. The message ends with the tail of ocrmypdf's stderr."""


class OcrTimeout(OcrError):
    """OCR ran past ``OcrOptions.timeout``; ocrmypdf and its children were killed."""


# -- API -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class OcrOptions:
    languages: tuple[str, ...] = ("deu", "eng")
    # PDF pages that already have text: skip them (their text is still extracted), redo
    # (replace an old OCR layer) or force (rasterise and OCR everything).
    mode: Literal["skip", "redo", "force"] = "skip"
    rotate_pages: bool = True  # tesseract's orientation detection; needs tesseract-ocr-osd
    # Orientation confidence a page needs before it is turned (ocrmypdf's default 14).
    # Sparse pages in sans-serif fonts often score lower; lower values also turn pages
    # tesseract is unsure of, wrongly now and then.
    rotate_threshold: float = 14.0
    jobs: int = 0  # ocrmypdf --jobs; 0: its default (all cores)
    timeout: float = 1800.0  # seconds for the whole file
    thumbnail_width: int = 400  # px, PNG of page 1
    image_dpi: int = 300  # for images without (credible) resolution metadata
    # Limits (None: none). Pages of one file; pixels of one page as OCR rasterises it
    # (PDF pages at image_dpi, images as they are); address space of each process of
    # the OCR run.
    max_pages: int | None = None
    max_page_pixels: int | None = None
    memory_limit: int | None = None


@dataclass(frozen=True)
class OcrResult:
    pages: list[str]  # text per page, in order
    page_count: int
    searchable_pdf: str  # file name inside out_dir
    thumbnail: str  # file name inside out_dir
    engine: str  # e.g. "ocrmypdf 17.13.0, tesseract 5.3.0"


def available_languages() -> set[str]:
    """The language packs tesseract has (``tesseract --list-langs``), cached per process."""
    return set(_tesseract_info()[0])


def analyze_file(src: Path, mime_type: str, out_dir: Path, opts: OcrOptions) -> OcrResult:
    """OCR ``src`` (never written to) into ``out_dir``/searchable.pdf and thumbnail.png."""
    deadline = time.monotonic() + opts.timeout
    _check_options(opts)
    engine = _check_installation(opts)
    if mime_type != PDF and mime_type not in IMAGE_TYPES:
        raise OcrInputError(
            f"ingestd cannot OCR files of type {mime_type!r} (only PDF, TIFF, JPEG and PNG)"
        )
    src, out_dir = Path(src), Path(out_dir)
    _check_source(src)
    if out_dir.resolve() == src.resolve().parent:
        raise OcrConfigError(
            f"OCR output directory {out_dir} is the source's directory; "
            "nothing may be written next to an archived file"
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _remove_stale_temp_dirs(out_dir, opts.timeout + STALE_GRACE)
        work = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=out_dir))
    except OSError as exc:
        raise OcrFailed(f"cannot write into the OCR output directory {out_dir}: {exc}") from None
    try:
        if mime_type == PDF:
            _check_pdf(src, opts)
            pdf_in = src
        else:
            _check_image(src, opts)
            pdf_in = _image_to_pdf(src, work / "input.pdf", opts.image_dpi)
        out_pdf, sidecar = work / SEARCHABLE_PDF, work / "sidecar.txt"
        _run_ocrmypdf(pdf_in, out_pdf, sidecar, work, opts, deadline, mime_type)
        thumb = work / THUMBNAIL
        pages = _pages_and_thumbnail(out_pdf, sidecar, opts, thumb)
        _publish(out_pdf, out_dir / SEARCHABLE_PDF)
        _publish(thumb, out_dir / THUMBNAIL)
        _fsync_dir(out_dir)
    except OSError as exc:  # disk full, permissions, the directory removed under us
        raise OcrFailed(f"OCR output in {out_dir}: {exc}") from None
    except pypdfium2.PdfiumError as exc:
        raise OcrFailed(f"pdfium cannot read the PDF ocrmypdf wrote: {exc}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return OcrResult(
        pages=pages,
        page_count=len(pages),
        searchable_pdf=SEARCHABLE_PDF,
        thumbnail=THUMBNAIL,
        engine=engine,
    )


# -- installation and options -----------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _tesseract_info() -> tuple[frozenset[str], str]:
    """(languages, version) of the tesseract on PATH."""
    try:
        langs = programs.run(["tesseract", "--list-langs"], timeout=TESSERACT_TIMEOUT)
        version = programs.run(["tesseract", "--version"], timeout=TESSERACT_TIMEOUT)
    except programs.ProgramNotFound:
        raise OcrConfigError("tesseract is not installed (apt-get install tesseract-ocr)") from None
    except programs.ProgramTimeout as exc:
        raise OcrConfigError(f"tesseract does not answer: {exc.message}") from None
    if not langs.ok:
        raise OcrConfigError(
            f"`tesseract --list-langs` failed (exit {langs.returncode}): {_tail(langs.stderr)}"
        )
    # The first line is a heading ('List of available languages in "..." (3):').
    names = frozenset(line.strip() for line in langs.stdout.splitlines()[1:] if line.strip())
    # tesseract 4 printed its version on stderr, 5 on stdout: "tesseract 5.3.0".
    first = (version.stdout.strip() or version.stderr.strip()).splitlines()[:1]
    return names, (first[0].split()[-1] if first else "unknown")


def apt_package(language: str) -> str:
    """Debian's package for a tesseract language pack: chi_sim -> tesseract-ocr-chi-sim."""
    return "tesseract-ocr-" + language.lower().replace("_", "-").replace("/", "-")


def _check_options(opts: OcrOptions) -> None:
    problems = []
    if not opts.languages:
        problems.append("no OCR language given")
    problems += [
        f"invalid tesseract language name {lang!r}"
        for lang in opts.languages
        if not _LANG_NAME.fullmatch(lang)
    ]
    if opts.mode not in ("skip", "redo", "force"):
        problems.append(f"OCR mode {opts.mode!r} is not one of skip, redo, force")
    if opts.jobs < 0 or opts.timeout <= 0 or opts.thumbnail_width < 1 or opts.image_dpi < 1:
        problems.append("OCR jobs must be >= 0; timeout, thumbnail_width and image_dpi > 0")
    if problems:
        raise OcrConfigError("; ".join(problems))


def _check_installation(opts: OcrOptions) -> str:
    """Raise OcrConfigError for a missing program or language pack; the engine string."""
    if importlib.util.find_spec("ocrmypdf") is None:
        raise OcrConfigError("ocrmypdf is not installed in ingestd's Python environment")
    langs, tess_version = _tesseract_info()
    wanted = [*opts.languages, *(["osd"] if opts.rotate_pages else [])]
    if any(lang not in langs for lang in wanted):
        _tesseract_info.cache_clear()  # installed since we looked? ask again before failing
        langs = _tesseract_info()[0]
    missing = [lang for lang in wanted if lang not in langs]
    if missing:
        what = ", ".join(f"{lang!r} (apt-get install {apt_package(lang)})" for lang in missing)
        why = " (osd: needed to rotate pages)" if "osd" in missing else ""
        raise OcrConfigError(
            f"tesseract language pack missing: {what}{why}; "
            f"installed: {', '.join(sorted(langs)) or 'none'}"
        )
    return f"ocrmypdf {_ocrmypdf_version()}, tesseract {tess_version}"


@functools.lru_cache(maxsize=1)
def _ocrmypdf_version() -> str:
    import importlib.metadata  # here: 30 ms off the job child's start-up

    return importlib.metadata.version("ocrmypdf")


# -- input -------------------------------------------------------------------------------
def _check_source(src: Path) -> None:
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


def _check_pdf(src: Path, opts: OcrOptions) -> None:
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
        raise OcrInputError(_ENCRYPTED) from None
    except pikepdf.PdfError as exc:
        truncated = not _ends_with_eof_marker(src)
        raise OcrInputError(
            "the PDF is truncated (no end-of-file marker: an interrupted transfer?)"
            if truncated
            else f"the PDF is damaged and cannot be read: {exc}"
        ) from None
    if encrypted:
        raise OcrInputError(_ENCRYPTED)
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


def _check_image(src: Path, opts: OcrOptions) -> None:
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
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise OcrInputError(f"the image cannot be read: {exc}") from None


def _image_to_pdf(src: Path, dest: Path, image_dpi: int) -> Path:
    """One PDF page per image frame, the image data passed through where PDF allows."""
    import img2pdf  # type: ignore[import-untyped]  # here: 70 ms a PDF-only child skips

    try:
        with Image.open(src) as im:
            dpi = im.info.get("dpi")
            frames = getattr(im, "n_frames", 1)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise OcrInputError(f"the image cannot be read: {exc}") from None
    credible = isinstance(dpi, tuple) and bool(dpi) and min(map(float, dpi)) > CREDIBLE_DPI
    layout = (
        img2pdf.default_layout_fun
        if credible
        else img2pdf.get_fixed_dpi_layout_fun((image_dpi, image_dpi))
    )
    kwargs = {"layout_fun": layout, "rotation": img2pdf.Rotation.ifvalid}
    if frames < 1:
        raise OcrInputError("the image has no frames")
    try:
        data = img2pdf.convert(str(src), **kwargs)
    except img2pdf.ImageOpenError as exc:
        raise OcrInputError(f"the image cannot be read: {exc}") from None
    except Exception:  # alpha channels, 16 bits, odd colour spaces: flatten, then again
        try:
            data = img2pdf.convert(_flattened_frames(src, dest.parent), **kwargs)
        except OcrInputError:
            raise
        except Exception as exc:
            raise OcrInputError(f"the image cannot be converted to PDF: {exc}") from None
    with open(dest, "wb") as f:
        f.write(data)
    return dest


def _flattened_frames(src: Path, work: Path) -> list[str]:
    """Each frame as a lossless 8-bit gray or RGB PNG on white (what PDF images can be)."""
    paths = []
    try:
        with Image.open(src) as im:
            for i, frame in enumerate(ImageSequence.Iterator(im)):
                rgba = frame.convert("RGBA")
                flat = Image.new("RGB", rgba.size, (255, 255, 255))
                flat.paste(rgba, mask=rgba.getchannel("A"))
                if frame.mode in ("1", "L", "LA", "I", "I;16", "F"):
                    flat = flat.convert("L")
                path = work / f"frame-{i:05d}.png"
                flat.save(path, "PNG", dpi=frame.info.get("dpi", im.info.get("dpi", (0, 0))))
                paths.append(str(path))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise OcrInputError(f"the image cannot be decoded: {exc}") from None
    return paths


# -- ocrmypdf ------------------------------------------------------------------------------
def _run_ocrmypdf(
    pdf_in: Path,
    out_pdf: Path,
    sidecar: Path,
    work: Path,
    opts: OcrOptions,
    deadline: float,
    mime_type: str,
) -> None:
    argv = [
        sys.executable,
        "-m",
        "ocrmypdf",
        "--language",
        "+".join(opts.languages),
        "--mode",
        opts.mode,
        # A plain PDF: no PDF/A conversion (time, and it may re-encode images); no
        # optimisation pass: the derived copy keeps the scan's images as they are.
        "--output-type",
        "pdf",
        "--optimize",
        "0",
        "--sidecar",
        str(sidecar),
        # The signed original stays in the archive; the derived copy only needs its text.
        "--invalidate-digital-signatures",
        # A page that renders with a soft error (a missing font) still gets its text.
        "--continue-on-soft-render-error",
    ]
    if opts.rotate_pages:
        argv += ["--rotate-pages", "--rotate-pages-threshold", f"{opts.rotate_threshold:g}"]
    if opts.jobs:
        argv += ["--jobs", str(opts.jobs)]
    argv += ["--", str(pdf_in), str(out_pdf)]
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise OcrTimeout(f"OCR timeout of {opts.timeout:g} s used up before ocrmypdf started")
    # TMPDIR: ocrmypdf's temp files go where a killed run's debris is found and removed.
    # PYTHONWARNINGS: deprecation chatter would crowd the real error out of stderr's tail.
    env = {"OMP_THREAD_LIMIT": "1", "TMPDIR": str(work), "PYTHONWARNINGS": "ignore"}
    try:
        res = programs.run(
            argv, timeout=remaining, env=env, cwd=work, memory_limit=opts.memory_limit
        )
    except programs.ProgramTimeout:
        raise OcrTimeout(
            f"OCR did not finish within {opts.timeout:g} s "
            "(OcrOptions.timeout); ocrmypdf and its children were killed"
        ) from None
    except programs.ProgramNotFound as exc:
        raise OcrConfigError(f"cannot start ocrmypdf: {exc.message}") from None
    if res.returncode != 0:
        raise _error_for(res, mime_type, opts.memory_limit)
    if not out_pdf.is_file():
        raise OcrFailed(f"ocrmypdf exited 0 but wrote no PDF{_stderr_note(res)}")


def _tail(text: str, lines: int = ERROR_TAIL_LINES) -> str:
    kept = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def _stderr_note(res: programs.ProgramResult) -> str:
    tail = _tail(res.stderr)
    return f"; ocrmypdf said:\n{tail}" if tail else ""


def _error_for(
    res: programs.ProgramResult, mime_type: str, memory_limit: int | None = None
) -> OcrError:
    """ocrmypdf's exit code as one of our errors (ocrmypdf.ExitCode)."""
    code, note = res.returncode, _stderr_note(res)
    what = "PDF" if mime_type == PDF else "image"
    if _out_of_memory(res):
        limit = f" ({memory_limit / 2**30:.1f} GiB)" if memory_limit else ""
        return OcrLimitExceeded(
            f"OCR ran out of memory under analysis.memory_limit{limit}: "
            f"the {what} needs more than the limit allows{note}"
        )
    if code == EXIT_ENCRYPTED_PDF:
        return OcrInputError(_ENCRYPTED)
    if code == EXIT_INPUT_FILE:
        return OcrInputError(f"ocrmypdf cannot read the {what} (damaged or unsupported){note}")
    if code == EXIT_MISSING_DEPENDENCY:
        return OcrConfigError(
            f"a program ocrmypdf needs is missing (tesseract, ghostscript or a language pack){note}"
        )
    if code in (EXIT_INVALID_CONFIG, EXIT_BAD_ARGS):
        return OcrConfigError(f"ocrmypdf refused its configuration (exit {code}){note}")
    if code == EXIT_FILE_ACCESS_ERROR:
        return OcrFailed(
            f"ocrmypdf could not read or write a file (exit 5: permissions, disk full?){note}"
        )
    if code == EXIT_CHILD_PROCESS_ERROR:
        return OcrFailed(
            f"a program under ocrmypdf (tesseract or ghostscript) failed (exit 7){note}"
        )
    names = {
        EXIT_INVALID_OUTPUT_PDF: "its output PDF did not validate",
        EXIT_ALREADY_DONE_OCR: "it found text it was told not to expect",
        EXIT_PDFA_CONVERSION_FAILED: "PDF/A conversion failed",
        EXIT_OTHER_ERROR: "internal error",
        EXIT_CTRL_C: "interrupted",
    }
    why = f"killed by signal {-code}" if code < 0 else names.get(code, "unexpected exit status")
    return OcrFailed(f"ocrmypdf failed: {why} (exit {code}){note}")


# What a process says when an allocation failed (Python, C++, ghostscript, tesseract,
# leptonica), or the kernel's OOM kill.
_OOM = re.compile(
    r"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory|"
    r"VMerror|Out of memory|memory allocation failed|pixCreate.*failed",
    re.IGNORECASE,
)


def _out_of_memory(res: programs.ProgramResult) -> bool:
    return res.returncode == -9 or bool(_OOM.search(res.stderr))


# -- results -------------------------------------------------------------------------------
def _clean(text: str) -> str:
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


def _page_text(doc: Any, index: int) -> str:
    page = doc[index]
    try:
        textpage = page.get_textpage()
        try:
            return str(textpage.get_text_range())
        finally:
            textpage.close()
    finally:
        page.close()


def _pages_and_thumbnail(out_pdf: Path, sidecar: Path, opts: OcrOptions, thumb: Path) -> list[str]:
    with _pdfium(out_pdf) as doc:
        count = len(doc)
        ocr: list[str | None] = [None] * count
        # "redo" leaves a page's visible text out of the sidecar: read the PDF instead.
        if opts.mode != "redo" and sidecar.is_file():
            parsed = _sidecar_pages(sidecar.read_text(encoding="utf-8", errors="replace"))
            if len(parsed) == count:  # else (never seen): every page from the PDF
                ocr = parsed
        pages = [
            _clean(text if text is not None else _page_text(doc, i)) for i, text in enumerate(ocr)
        ]
        if count:
            _render_thumbnail(doc, opts.thumbnail_width, thumb)
    if not count:
        raise OcrFailed("ocrmypdf wrote a PDF without pages")
    return pages


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


# -- files -------------------------------------------------------------------------------
def _publish(tmp: Path, dest: Path) -> None:
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)  # data on disk before the name points at it
    finally:
        os.close(fd)
    os.replace(tmp, dest)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _remove_stale_temp_dirs(out_dir: Path, max_age: float) -> None:
    """Temp dirs of killed runs (worker timeout, SIGKILL, power loss): their process is gone,
    or they are older than any live run may be. Names carry the run's pid."""
    now = time.time()
    with os.scandir(out_dir) as entries:
        for entry in entries:
            if not entry.name.startswith(TMP_PREFIX):
                continue
            pid = entry.name[len(TMP_PREFIX) :].split("-", 1)[0]
            with contextlib.suppress(OSError):
                too_old = now - entry.stat(follow_symlinks=False).st_mtime > max_age
                if too_old or not pid.isdigit() or not _pid_alive(int(pid)):
                    shutil.rmtree(entry.path, ignore_errors=True)
