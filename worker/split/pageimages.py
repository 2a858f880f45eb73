"""Every page of a batch as a grayscale picture, one page at a time, at two sizes: half
(~150 dpi, what every page is read at) and full (~300 dpi, made only when asked for).

Scanners write a PDF page as one image drawn over the whole page; that image *is* the
page, so it is taken as it is instead of rendered: a JPEG (DCTDecode) is decoded by
Pillow straight from the PDF's bytes, and ``draft`` makes libjpeg decode it at half size
in the DCT itself (no full-size picture exists unless a page needs one; then the JPEG is
decoded again at full size), other encodings (CCITT, Flate, JBIG2, ...) by pikepdf. A
page that is anything else (text, vector drawings, several images, an image mask, an
unusual colour space) is rendered by pdfium at 300 dpi. A multi-page TIFF gives
its frames in order (Pillow ``seek``). Pixels are capped per page, so memory is bounded
by one page whatever the batch holds.
"""

from __future__ import annotations

import enum
import io
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pikepdf
import pypdfium2  # type: ignore[import-untyped]
from PIL import Image

from ingestd.errors import ExitCode, IngestdError

DPI = 300  # what the readers downstream are tuned for (module sizes in pixels)
# Above this a page is reduced (by halves) towards DPI: a 600 dpi scan costs 4x the
# pixels and reads no better.
MAX_DPI = 450
# A page larger than this many pixels (A3 at 300 dpi is 17.5 M) is reduced further.
MAX_PIXELS = 40_000_000
MIN_SIDE = 64  # a picture smaller than this is not halved

PDF_MAGIC = b"%PDF-"
TIFF_MAGIC = (b"II*\x00", b"MM\x00*")

# Content operators that only set state: a page drawing one image with only these is
# a scanned page. Anything that paints (text, paths, shadings, inline images) is not.
_STATE_OPERATORS = frozenset({"q", "Q", "cm", "gs", "w", "J", "j", "M", "d", "ri", "i"})
_GRAY_OR_RGB = frozenset({"/DeviceGray", "/DeviceRGB", "/CalGray", "/CalRGB"})


class BatchUnreadable(IngestdError):
    """The batch cannot be read as pages (damaged, encrypted, not a PDF or TIFF): it stays
    archived and needs attention, with this message as the reason."""

    exit_code = ExitCode.refused
    attention = True


class BatchFormat(enum.StrEnum):
    pdf = "pdf"
    tiff = "tiff"


class Source(enum.StrEnum):
    """Where a page's picture came from (the bench reports the mix)."""

    jpeg = "jpeg"  # the page's embedded JPEG, decoded by Pillow
    image = "image"  # the page's embedded image in another encoding, via pikepdf
    render = "render"  # rendered by pdfium (not a single-image page)
    tiff = "tiff"  # a TIFF frame


class PageImage:
    """One page's picture: ``half`` at once, ``full()`` (mode "L", near DPI) on demand."""

    def __init__(
        self,
        index: int,
        source: Source,
        half: Image.Image,
        full: Image.Image | None = None,
        load_full: Callable[[], Image.Image] | None = None,
    ) -> None:
        self.index = index  # 0-based
        self.source = source
        self.half = half
        self._full = full
        self._load_full = load_full

    @classmethod
    def of(cls, index: int, source: Source, full: Image.Image) -> PageImage:
        """A page decoded at full size already: its half is one ``reduce``."""
        half = full.reduce(2) if min(full.size) >= MIN_SIDE else full
        return cls(index, source, half, full=full)

    @property
    def has_full(self) -> bool:
        """Whether the full-size picture is made already (asking for it costs nothing)."""
        return self._full is not None

    def full(self) -> Image.Image:
        if self._full is None:
            if self._load_full is None:
                raise RuntimeError("a page image without its full size")
            self._full = self._load_full()
        return self._full


def batch_format(path: Path) -> BatchFormat:
    """PDF or TIFF by the first bytes (a PDF may have junk before its header)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024)
    except OSError as exc:
        raise BatchUnreadable(f"cannot read the batch: {exc.strerror or exc}") from None
    if head[:4] in TIFF_MAGIC:
        return BatchFormat.tiff
    if PDF_MAGIC in head:
        return BatchFormat.pdf
    raise BatchUnreadable("the batch is neither a PDF nor a TIFF (by its first bytes)")


def page_count(path: Path) -> int:
    """The number of pages (PDF) or frames (TIFF) of the batch."""
    if batch_format(path) is BatchFormat.tiff:
        with _open_tiff(path) as tif:
            return int(getattr(tif, "n_frames", 1))
    with _open_pdf(path) as pdf:
        return len(pdf.pages)


def page_images(path: Path) -> Iterator[PageImage]:
    """Each page's picture in order; the previous one is dropped before the next is made."""
    if batch_format(path) is BatchFormat.tiff:
        yield from _tiff_frames(path)
    else:
        yield from _pdf_pages(path)


# -- PDF -----------------------------------------------------------------------------------
def _open_pdf(path: Path) -> pikepdf.Pdf:
    try:
        return pikepdf.open(path)
    except pikepdf.PasswordError:
        raise BatchUnreadable("the batch PDF is encrypted (password-protected)") from None
    except (pikepdf.PdfError, OSError, ValueError) as exc:
        raise BatchUnreadable(f"the batch PDF cannot be opened: {exc}") from None


def _pdf_pages(path: Path) -> Iterator[PageImage]:
    with ExitStack() as stack:
        pdf = stack.enter_context(_open_pdf(path))
        renderer: _Renderer | None = None
        for index, page in enumerate(pdf.pages):
            image = _embedded(index, page)
            if image is not None:
                yield image
                continue
            if renderer is None:
                renderer = stack.enter_context(_Renderer(path))
            yield PageImage.of(index, Source.render, renderer.render(index))


def _embedded(index: int, page: pikepdf.Page) -> PageImage | None:
    """The page's one image, decoded, when drawing that image is all the page does."""
    found = _single_image(page)
    if found is None:
        return None
    xobject, mirrored = found
    if xobject.get("/ImageMask", False):
        return None  # a stencil painted in some colour: pdfium knows which
    dpi = _page_dpi(page, xobject)
    try:
        if _plain_jpeg(xobject):
            return _jpeg_page(index, xobject.read_raw_bytes(), dpi, mirrored)
        image = _gray(pikepdf.PdfImage(xobject).as_pil_image(), dpi)
    except Exception:
        # Anything pikepdf or Pillow cannot decode (JBIG2 without jbig2dec, an odd colour
        # space, a damaged stream) is pdfium's to render, which says so if it cannot.
        return None
    return PageImage.of(index, Source.image, _unmirrored(image, mirrored))


def _unmirrored(image: Image.Image, mirrored: bool) -> Image.Image:
    # A flipped placement mirrors the codes, and mirrored 2D codes do not decode.
    return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if mirrored else image


def _single_image(page: pikepdf.Page) -> tuple[pikepdf.Stream, bool] | None:
    resources = _inherited(page.obj, "/Resources")
    if not isinstance(resources, pikepdf.Dictionary) or "/Font" in resources:
        return None
    xobjects = resources.get("/XObject")
    if not isinstance(xobjects, pikepdf.Dictionary) or len(xobjects.keys()) != 1:
        return None
    try:
        instructions = pikepdf.parse_content_stream(page)
    except pikepdf.PdfError:
        return None
    drawn: pikepdf.Stream | None = None
    ctm = (1.0, 0.0, 0.0, 1.0)
    stack: list[tuple[float, float, float, float]] = []
    mirrored = False
    for inst in instructions:
        if not isinstance(inst, pikepdf.ContentStreamInstruction):
            return None  # an inline image
        op = str(inst.operator)
        if op == "Do":
            if drawn is not None or len(inst.operands) != 1:
                return None
            target = xobjects.get(str(inst.operands[0]))
            if not isinstance(target, pikepdf.Stream) or target.get("/Subtype") != "/Image":
                return None
            drawn = target
            mirrored = ctm[0] * ctm[3] - ctm[1] * ctm[2] < 0
        elif op == "q":
            stack.append(ctm)
        elif op == "Q":
            ctm = stack.pop() if stack else (1.0, 0.0, 0.0, 1.0)
        elif op == "cm":
            if len(inst.operands) != 6:
                return None
            a, b, c, d = (float(v) for v in inst.operands[:4])
            # Only the linear part matters (is the image flipped?); new = m x ctm.
            ctm = (
                a * ctm[0] + b * ctm[2],
                a * ctm[1] + b * ctm[3],
                c * ctm[0] + d * ctm[2],
                c * ctm[1] + d * ctm[3],
            )
        elif op not in _STATE_OPERATORS:
            return None
    if drawn is None:
        return None
    return drawn, mirrored


def _inherited(page: pikepdf.Object, key: str) -> object:
    """A page's attribute, or the nearest page tree node's that has it (PDF 7.7.3.4)."""
    node: pikepdf.Object | None = page
    for _ in range(32):  # a page tree deeper than this is a loop
        if not isinstance(node, pikepdf.Dictionary):
            return None
        if key in node:
            return node.get(key)
        node = node.get("/Parent")
    return None


def _page_dpi(page: pikepdf.Page, xobject: pikepdf.Stream) -> float:
    """The image's resolution as drawn over the page (scanners fill the page); by the
    longer sides, so that a page turned by /Rotate or a landscape scan agree."""
    try:
        box = [float(v) for v in page.mediabox]
        longer_in = max(abs(box[2] - box[0]), abs(box[3] - box[1])) / 72
        longer_px = max(int(xobject.get("/Width", 0)), int(xobject.get("/Height", 0)))
        return longer_px / longer_in if longer_in > 0 else DPI
    except (TypeError, ValueError, IndexError):
        return DPI


def _reduction(dpi: float, pixels: int) -> int:
    """By how much (1, 2, 4, 8) to reduce a picture: towards DPI, under MAX_PIXELS."""
    factor = 1
    while factor < 8 and (dpi / factor > MAX_DPI or pixels / factor**2 > MAX_PIXELS):
        factor *= 2
    return factor


def _plain_jpeg(xobject: pikepdf.Stream) -> bool:
    """A JPEG in gray or RGB, drawn as encoded: Pillow decodes it as the page shows it."""
    filters = xobject.get("/Filter")
    names = [str(f) for f in filters] if isinstance(filters, pikepdf.Array) else [str(filters)]
    space = xobject.get("/ColorSpace")
    plain_space = str(space) in _GRAY_OR_RGB or _icc_components(space) in (1, 3)
    return names == ["/DCTDecode"] and plain_space and "/Decode" not in xobject


def _icc_components(space: object) -> int:
    if isinstance(space, pikepdf.Array) and len(space) == 2 and space[0] == "/ICCBased":
        stream = space[1]
        if isinstance(stream, pikepdf.Stream):
            return int(stream.get("/N", 0))
    return 0


def _jpeg_page(index: int, data: bytes, dpi: float, mirrored: bool) -> PageImage:
    probe = Image.open(io.BytesIO(data))
    if probe.format != "JPEG" or probe.mode not in ("L", "RGB", "YCbCr"):
        raise ValueError(f"not a grayscale or RGB JPEG ({probe.format} {probe.mode})")
    width, height = probe.size
    factor = _reduction(dpi, width * height)
    if factor >= 8 or min(width, height) // factor < 2 * MIN_SIDE:
        full = _unmirrored(_jpeg(data, width // factor, height // factor), mirrored)
        return PageImage.of(index, Source.jpeg, full)

    def load_full() -> Image.Image:
        return _unmirrored(_jpeg(data, width // factor, height // factor), mirrored)

    half = _unmirrored(_jpeg(data, width // (2 * factor), height // (2 * factor)), mirrored)
    return PageImage(index, Source.jpeg, half, load_full=load_full)


def _jpeg(data: bytes, width: int, height: int) -> Image.Image:
    """``data`` decoded to gray at least ``width`` x ``height``: ``draft`` makes libjpeg
    skip the colour conversion and scale by 1/2, 1/4 or 1/8 in the DCT itself."""
    image = Image.open(io.BytesIO(data))
    image.draft("L", (width, height))
    image.load()
    return image if image.mode == "L" else image.convert("L")


def _gray(image: Image.Image, dpi: float) -> Image.Image:
    factor = _reduction(dpi, image.width * image.height)
    if image.mode != "L":
        image = image.convert("L")
    return image.reduce(factor) if factor > 1 else image


class _Renderer:
    """pdfium, opened once a page needs rendering (most scanned batches never do)."""

    def __init__(self, path: Path) -> None:
        try:
            self.doc = pypdfium2.PdfDocument(str(path))
        except pypdfium2.PdfiumError as exc:
            raise BatchUnreadable(f"the batch PDF cannot be rendered: {exc}") from None

    def __enter__(self) -> _Renderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.doc.close()

    def render(self, index: int) -> Image.Image:
        page = self.doc[index]
        try:
            width, height = page.get_size()  # points
            scale = DPI / 72
            pixels = width * height * scale * scale
            if pixels > MAX_PIXELS:
                scale *= (MAX_PIXELS / pixels) ** 0.5
            bitmap = page.render(scale=scale, grayscale=True)
            try:
                image: Image.Image = bitmap.to_pil()
                # to_pil shares pdfium's buffer: copy before the bitmap goes.
                image = image.convert("L") if image.mode != "L" else image.copy()
            finally:
                bitmap.close()
        except pypdfium2.PdfiumError as exc:
            raise BatchUnreadable(
                f"page {index + 1} of the batch cannot be rendered: {exc}"
            ) from None
        finally:
            page.close()
        return image


# -- TIFF ----------------------------------------------------------------------------------
def _open_tiff(path: Path) -> Image.Image:
    try:
        return Image.open(path)
    except (OSError, Image.DecompressionBombError, SyntaxError, ValueError) as exc:
        raise BatchUnreadable(f"the batch TIFF cannot be opened: {exc}") from None


def _tiff_frames(path: Path) -> Iterator[PageImage]:
    with _open_tiff(path) as tif:
        frames = int(getattr(tif, "n_frames", 1))
        for index in range(frames):
            try:
                tif.seek(index)
                dpi = _tiff_dpi(tif)
                tif.load()
                # convert() makes a new image: the frame buffer is reused by the next seek.
                image = _gray(tif, dpi)
                if image is tif:
                    image = tif.copy()
            except (OSError, Image.DecompressionBombError, SyntaxError, ValueError) as exc:
                raise BatchUnreadable(f"frame {index + 1} of the batch TIFF: {exc}") from None
            yield PageImage.of(index, Source.tiff, image)


def _tiff_dpi(tif: Image.Image) -> float:
    dpi = tif.info.get("dpi")
    try:
        return float(dpi[0]) if dpi else DPI
    except (TypeError, ValueError, IndexError):
        return DPI


__all__ = [
    "DPI",
    "BatchFormat",
    "BatchUnreadable",
    "PageImage",
    "Source",
    "batch_format",
    "page_count",
    "page_images",
]
