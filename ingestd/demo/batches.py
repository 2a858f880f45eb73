"""Batch scans for the split tests, bench/split.py and the demo: deterministic, realistic.

A batch is what a feeder makes of a stack: 300 dpi pages (A4, or A6 for fast tests),
grayscale or RGB, JPEG q85 in a PDF (the JPEG bytes embedded as they are, like scanner
firmware writes them) or a multi-page TIFF (JPEG or Group 4 frames). Every side looks
scanned: off-white paper, toner that is not quite black, sensor noise, a few dust specks,
a skew of up to ±3° with the scanner's grey background in the corners, sheets fed upside
down. Sides are letters (text tesseract reads, from ``scans``), separator sheets (a
barcode, large or small, possibly in weak grey ink, on the front or the back of a duplex
sheet whose other side is blank or nearly blank), blank sides, and letters that carry a
code: an ASN sticker, a tag code or an unrelated barcode (an invoice number in Code 128)
that must never split.

``batch()`` returns the file with its ground truth (which pages belong to separator
sheets, where each document starts and ends, its ASN and tags), so tests and the bench
score what the split found; ``cached_batch()`` keeps big batches under a directory keyed
by every parameter. The same spec always gives the same bytes.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import io
import json
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pikepdf
import zxingcpp
from PIL import Image, ImageChops, ImageDraw

from ingestd.config.split import DEFAULT_SEPARATOR, Symbology
from ingestd.demo import scans

DPI = scans.DPI
A4 = scans.A4
A6 = scans.A6
# Bump when the pictures change: cached batches of an older generator are not reused.
GENERATOR_VERSION = 2

PAPER = 244  # off-white paper as a scanner sees it
TONER = 28  # black toner is never 0
WEAK_INK = 165  # faded toner or a light inkjet print: ~80 levels below the paper
BACKGROUND = 196  # the scanner's grey lid, showing in the corners of a skewed sheet
NOISE = 4  # sensor noise: uniform in ±NOISE levels
JPEG_QUALITY = 85

_FORMATS = {
    Symbology.code39: zxingcpp.BarcodeFormat.Code39,
    Symbology.code128: zxingcpp.BarcodeFormat.Code128,
    Symbology.qr: zxingcpp.BarcodeFormat.QRCode,
    Symbology.datamatrix: zxingcpp.BarcodeFormat.DataMatrix,
}
_LINEAR = frozenset({Symbology.code39, Symbology.code128})

# Letters from different senders, so each child gets a title of its own from its text.
# ``{n}`` numbers the letter; the body is the one scans.LETTER tesseract reads well.
SENDERS = (
    ("Stadtwerke Musterstadt GmbH", "Rechnung Nummer 2024-{n:04d}"),
    ("Amtsgericht Musterstadt", "Aktenzeichen 4 C {n}/24"),
    ("Allgemeine Versicherung AG", "Beitragsrechnung {n:05d}"),
    ("Finanzamt Musterstadt", "Steuernummer 21/815/{n:05d}"),
    ("Hausverwaltung Lindenhof", "Nebenkostenabrechnung {n}"),
)


class Container(enum.StrEnum):
    pdf = "pdf"  # JPEG pages in a PDF
    tiff_jpeg = "tiff-jpeg"  # a multi-page TIFF of JPEG frames
    tiff_g4 = "tiff-g4"  # a multi-page bitonal TIFF (CCITT Group 4)


class Kind(enum.StrEnum):
    letter = "letter"  # a page of a letter
    separator = "separator"  # the side of a separator sheet that carries its code
    blank = "blank"  # an empty side (a letter's back, a separator sheet's other side)


@dataclass(frozen=True, slots=True)
class PrintedCode:
    """One barcode as printed: ``module`` is the narrow bar (1D) or module (2D) in pixels
    at 300 dpi, ``height`` a 1D code's bar height (0: 40 % of its width), ``at`` its
    centre as fractions of the page, ``turn`` 90 prints it sideways."""

    symbology: Symbology
    text: str
    module: int = 3
    height: int = 0
    ink: int = TONER
    at: tuple[float, float] = (0.5, 0.5)
    turn: int = 0


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a sheet as the scanner saw it."""

    kind: Kind
    lines: tuple[str, ...] = ()
    codes: tuple[PrintedCode, ...] = ()
    skew: float = 0.0  # degrees, counter-clockwise
    upside_down: bool = False
    # Nearly blank: show-through of the other side and dust, far below real content.
    ghost: bool = False


@dataclass(frozen=True, slots=True)
class Look:
    """How the scanner renders and stores pages."""

    size: tuple[int, int] = A4
    rgb: bool = False
    noise: int = NOISE
    quality: int = JPEG_QUALITY


@dataclass(frozen=True, slots=True)
class DocumentTruth:
    """One document of a batch: content pages ``first``..``last`` (0-based, inclusive;
    separator sheets excluded), its ASN and tags as the codes on it say."""

    first: int
    last: int
    title: str
    asn: int | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PageTruth:
    kind: Kind
    codes: tuple[tuple[Symbology, str], ...] = ()
    separator: bool = False  # a side of a separator sheet (either side, in duplex)


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """What to generate. ``pages`` is a target: the batch ends on the first sheet
    boundary at or after it. In ``duplex`` every sheet is two pages (front, back)."""

    pages: int = 300
    seed: int = 16
    size: tuple[int, int] = A4
    rgb: bool = False
    container: Container = Container.pdf
    duplex: bool = True
    separator: str = DEFAULT_SEPARATOR
    separator_symbology: Symbology = Symbology.code39
    max_sheets_per_document: int = 4
    weak_separators: bool = True  # some separators in weak grey ink
    small_separators: bool = True  # some separators printed small
    back_separators: bool = True  # in duplex, some separators on the back side
    upside_down: bool = True  # some separator sheets fed upside down
    skew: float = 3.0  # at most this many degrees either way
    unrelated_code: bool = True  # one document carries a Code 128 invoice number
    asn_prefix: str = "ASN"
    asn_every: int = 3  # every n-th document carries an ASN sticker (0: none)
    tag_every: int = 4  # every n-th document carries a "TAG:<name>" code (0: none)
    noise: int = NOISE

    def key(self) -> str:
        """A file name stem that changes with every parameter and the generator."""
        blob = json.dumps([GENERATOR_VERSION, _spec_json(self)], sort_keys=True)
        digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
        return f"batch-{self.pages}p-{self.container}-{digest}"


@dataclass(frozen=True, slots=True)
class Batch:
    path: Path
    spec: BatchSpec
    pages: tuple[PageTruth, ...]
    documents: tuple[DocumentTruth, ...]

    @property
    def separator_pages(self) -> tuple[int, ...]:
        """Pages (0-based) of separator sheets, both sides in duplex."""
        return tuple(i for i, p in enumerate(self.pages) if p.separator)

    @property
    def separator_sheets(self) -> int:
        per = 2 if self.spec.duplex else 1
        return len({i // per for i in self.separator_pages})


# -- drawing -------------------------------------------------------------------------------
def code_image(code: PrintedCode) -> Image.Image:
    """The code's bars or modules as an "L" image (0 ink, 255 paper), quiet zones
    included, before it is printed on a page."""
    made = zxingcpp.create_barcode(code.text, _FORMATS[code.symbology])
    bitmap = made.to_image(scale=code.module, add_quiet_zones=True)
    # zxingcpp.Image is a buffer (h x w bytes); its stub does not declare __buffer__.
    view = memoryview(bitmap)  # type: ignore[arg-type]
    h, w = view.shape or (0, 0)
    img = Image.frombuffer("L", (w, h), bytes(view), "raw", "L", 0, 1)
    if code.symbology in _LINEAR:
        height = code.height or max(int(w * 0.4), 20 * code.module)
        img = img.resize((w, height), Image.Resampling.NEAREST)
    if code.turn % 360:
        img = img.rotate(code.turn, expand=True, fillcolor=255)
    return img


def _print_code(page: Image.Image, code: PrintedCode) -> None:
    img = code_image(code)
    # Centred on ``at``, but kept on the sheet (inside a printer's 4 mm margin).
    margin = DPI * 4 // 25
    x = int(code.at[0] * page.width - img.width / 2)
    y = int(code.at[1] * page.height - img.height / 2)
    x = max(margin, min(x, page.width - margin - img.width))
    y = max(margin, min(y, page.height - margin - img.height))
    # Printed with its quiet zone: a code's clear space is part of its label.
    page.paste(img.point(lambda v: code.ink if v < 128 else PAPER), (x, y))


def _ghost(page: Image.Image, rng: random.Random) -> None:
    """Show-through of a printed back side: a few lines a handful of levels darker."""
    draw = ImageDraw.Draw(page)
    margin = page.width // 16
    for i in range(rng.randint(3, 8)):
        y = margin + i * scans.LINE_PX * 2
        draw.rectangle(
            (margin, y, margin + rng.randint(page.width // 4, page.width // 2), y + 30),
            fill=PAPER - 6,
        )


def _specks(page: Image.Image, rng: random.Random) -> None:
    """Dust on the glass: a few small dark dots anywhere."""
    draw = ImageDraw.Draw(page)
    for _ in range(rng.randint(0, 12)):
        x, y = rng.randrange(page.width), rng.randrange(page.height)
        r = rng.randint(1, 3)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=rng.randint(60, 180))


class Scanner:
    """Renders sides the way one scanner does; the noise field is made once (random
    bytes are the slow part) and shifted per page, so pages still differ."""

    def __init__(self, look: Look, seed: int) -> None:
        self.look = look
        self.rng = random.Random(seed)  # noqa: S311 (test data: reproducible, not secret)
        w, h = look.size
        span = 2 * look.noise + 1
        lut = [v * span // 256 for v in range(256)]
        self._noise = Image.frombytes("L", (w, h), self.rng.randbytes(w * h)).point(lut)
        # Paper and toner instead of pure white and black: the page's tone curve.
        self._tone = [TONER + v * (PAPER - TONER) // 255 for v in range(256)]

    def render(self, side: Side) -> Image.Image:
        """The side as the scanner delivers it ("L", or "RGB" with a paper tint)."""
        rng = self.rng
        page = scans.page_image(side.lines, self.look.size) if side.lines else None
        if page is None:
            page = Image.new("L", self.look.size, 255)
        page = page.point(self._tone)
        if side.ghost:
            _ghost(page, rng)
        # Dust before the codes: a speck on a small code's finder makes it unreadable to
        # any reader, which would test the dust, not the reader.
        _specks(page, rng)
        for code in side.codes:
            _print_code(page, code)
        if side.upside_down:
            page = page.transpose(Image.Transpose.ROTATE_180)
        if side.skew:
            page = page.rotate(side.skew, resample=Image.Resampling.BILINEAR, fillcolor=BACKGROUND)
        if self.look.noise:
            noise = ImageChops.offset(
                self._noise, rng.randrange(page.width), rng.randrange(page.height)
            )
            page = ImageChops.add(page, noise, 1.0, -self.look.noise)
        if self.look.rgb:
            # A slightly warm paper: the channels differ, as a colour scan's do.
            r = page
            g = page.point(lambda v: max(0, v - 2))
            b = page.point(lambda v: max(0, v - 7))
            return Image.merge("RGB", (r, g, b))
        return page

    def jpeg(self, side: Side) -> bytes:
        buf = io.BytesIO()
        self.render(side).save(buf, "JPEG", quality=self.look.quality, dpi=(DPI, DPI))
        return buf.getvalue()


# -- writing -------------------------------------------------------------------------------
class _PdfWriter:
    """A PDF of JPEG pages written as it goes, so memory holds one page, not the batch.

    Object numbers are fixed up front (1 catalog, 2 pages, then 3 per page: page, content,
    image), so the page tree can be written first and every page streamed after it."""

    def __init__(self, out: BinaryIO, count: int) -> None:
        self.out = out
        self.count = count
        self.offsets: list[int] = []
        self.pos = 0
        self._write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
        self._object(1, b"<< /Type /Catalog /Pages 2 0 R >>")
        kids = b" ".join(b"%d 0 R" % (3 + 3 * i) for i in range(count))
        self._object(2, b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % count)

    def _write(self, data: bytes) -> None:
        self.out.write(data)
        self.pos += len(data)

    def _object(self, num: int, body: bytes, stream: bytes | None = None) -> None:
        self.offsets.append(self.pos)
        self._write(b"%d 0 obj\n" % num + body)
        if stream is not None:
            self._write(b"\nstream\n" + stream + b"\nendstream")
        self._write(b"\nendobj\n")

    def page(self, index: int, jpeg: bytes, width: int, height: int, rgb: bool) -> None:
        num = 3 + 3 * index
        w_pt, h_pt = width * 72 / DPI, height * 72 / DPI
        self._object(
            num,
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %.4f %.4f] /Contents %d 0 R "
            b"/Resources << /XObject << /Im0 %d 0 R >> >> >>" % (w_pt, h_pt, num + 1, num + 2),
        )
        content = b"q %.4f 0 0 %.4f 0 0 cm /Im0 Do Q" % (w_pt, h_pt)
        self._object(num + 1, b"<< /Length %d >>" % len(content), content)
        space = b"/DeviceRGB" if rgb else b"/DeviceGray"
        self._object(
            num + 2,
            b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace %s "
            b"/BitsPerComponent 8 /Filter /DCTDecode /Length %d >>"
            % (width, height, space, len(jpeg)),
            jpeg,
        )

    def close(self) -> None:
        xref = self.pos
        total = len(self.offsets) + 1
        self._write(b"xref\n0 %d\n0000000000 65535 f \n" % total)
        self._write(b"".join(b"%010d 00000 n \n" % o for o in self.offsets))
        self._write(
            b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (total, xref)
        )


def write_pdf(path: Path, sides: Sequence[Side], look: Look = Look(), seed: int = 0) -> Path:
    """A scanner's PDF: one JPEG image per page, embedded as encoded, 300 dpi."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scanner = Scanner(look, seed)
    tmp = path.with_name(path.name + ".part")
    with tmp.open("wb") as out:
        pdf = _PdfWriter(out, len(sides))
        for i, side in enumerate(sides):
            pdf.page(i, scanner.jpeg(side), *look.size, rgb=look.rgb)
        pdf.close()
    tmp.replace(path)
    return path


def born_digital_pdf(path: Path, pages: Sequence[Sequence[PrintedCode]], title: str = "") -> Path:
    """A born-digital PDF (no images): each page a line of Helvetica text and its codes
    drawn as vector rectangles, as an office program prints a cover sheet to PDF."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf = pikepdf.new()
    font = pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1, BaseFont=pikepdf.Name.Helvetica
        )
    )
    width, height = 595, 842  # A4 in points
    for codes in pages:
        ops = [b"BT /F1 14 Tf 72 780 Td (%s) Tj ET" % (title or "Trennblatt").encode("latin-1")]
        ops.append(b"0 g")
        for code in codes:
            bars = code_image(dataclasses.replace(code, module=1, turn=0, height=0))
            unit = code.module * 72 / DPI  # one module in points
            if code.symbology in _LINEAR and code.height:
                bars = bars.resize((bars.width, max(1, code.height // code.module)))
            x0 = code.at[0] * width - bars.width * unit / 2
            y0 = (1 - code.at[1]) * height + bars.height * unit / 2
            data = bars.tobytes()
            for row in range(bars.height):
                line = data[row * bars.width : (row + 1) * bars.width]
                col = 0
                while col < bars.width:
                    if line[col] < 128:
                        end = col
                        while end < bars.width and line[end] < 128:
                            end += 1
                        ops.append(
                            b"%.3f %.3f %.3f %.3f re f"
                            % (x0 + col * unit, y0 - (row + 1) * unit, (end - col) * unit, unit)
                        )
                        col = end
                    else:
                        col += 1
        page = pikepdf.Page(
            pikepdf.Dictionary(
                Type=pikepdf.Name.Page,
                MediaBox=[0, 0, width, height],
                Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font)),
                Contents=pdf.make_stream(b"\n".join(ops)),
            )
        )
        pdf.pages.append(page)
    pdf.save(path, deterministic_id=True)
    return path


def _bitonal(img: Image.Image) -> Image.Image:
    # A bitonal scanner's threshold sits between weak ink and paper: weak codes survive.
    return img.convert("L").point(lambda v: 255 if v > (WEAK_INK + PAPER) // 2 else 0, "1")


def write_tiff(
    path: Path,
    sides: Sequence[Side],
    look: Look = Look(),
    seed: int = 0,
    container: Container = Container.tiff_jpeg,
) -> Path:
    """A multi-page TIFF, JPEG frames (``tiff-jpeg``) or bitonal Group 4 (``tiff-g4``),
    written frame by frame (one page in memory)."""
    if container is Container.pdf:
        raise ValueError("write_tiff writes TIFF containers")
    path.parent.mkdir(parents=True, exist_ok=True)
    scanner = Scanner(look, seed)
    tmp = path.with_name(path.name + ".part")

    def frames() -> Iterator[Image.Image]:
        for side in sides[1:]:
            img = scanner.render(side)
            yield _bitonal(img) if container is Container.tiff_g4 else img

    first = scanner.render(sides[0])
    if container is Container.tiff_g4:
        first = _bitonal(first)
        options: dict[str, object] = {"compression": "group4"}
    else:
        options = {"compression": "jpeg", "quality": look.quality}
    # append_images takes an iterator: Pillow encodes each frame as it comes.
    first.save(tmp, "TIFF", save_all=True, append_images=frames(), dpi=(DPI, DPI), **options)
    tmp.replace(path)
    return path


# -- composing a batch ---------------------------------------------------------------------
def letter_lines(n: int, page: int = 1) -> tuple[str, ...]:
    """Letter ``n``'s text; its first page opens with the sender and subject, further
    pages continue the body (a title comes from the first page)."""
    sender, subject = SENDERS[n % len(SENDERS)]
    body = [line.format(n=n) for line in scans.LETTER[3:-1]]
    if page == 1:
        return (sender, subject.format(n=n), *body, f"Seite {page}")
    return (f"{sender} - {subject.format(n=n)}", *body, f"Seite {page}")


@dataclass(slots=True)
class _Composer:
    spec: BatchSpec
    rng: random.Random
    sides: list[Side] = field(default_factory=list)
    truth: list[PageTruth] = field(default_factory=list)
    documents: list[DocumentTruth] = field(default_factory=list)
    separators_made: int = 0

    def skew(self) -> float:
        return round(self.rng.uniform(-self.spec.skew, self.spec.skew), 2)

    def add(self, side: Side, separator: bool = False) -> None:
        codes = tuple((c.symbology, c.text) for c in side.codes)
        self.sides.append(side)
        self.truth.append(PageTruth(side.kind, codes, separator))

    def separator_sheet(self) -> None:
        spec, rng = self.spec, self.rng
        k = self.separators_made
        self.separators_made += 1
        # Cycle the hard cases so every batch of some size has each of them.
        small = spec.small_separators and k % 2 == 1
        weak = spec.weak_separators and k % 3 == 2
        on_back = spec.duplex and spec.back_separators and k % 4 in (1, 2)
        flipped = spec.upside_down and k % 5 == 3
        linear = spec.separator_symbology in _LINEAR
        if small:
            module = 3 if linear else 4
            at = (rng.uniform(0.25, 0.75), rng.uniform(0.15, 0.3))
        else:
            module = 8 if linear else 16
            at = (0.5, rng.uniform(0.35, 0.5))
        code = PrintedCode(
            spec.separator_symbology,
            spec.separator,
            module=module,
            ink=WEAK_INK if weak else TONER,
            at=at,
        )
        marked = Side(
            Kind.separator,
            lines=("Trennblatt",) if not small else (),
            codes=(code,),
            skew=self.skew(),
            upside_down=flipped,
        )
        if not spec.duplex:
            self.add(marked, separator=True)
            return
        other = Side(Kind.blank, skew=self.skew(), upside_down=flipped, ghost=k % 2 == 0)
        front, back = (other, marked) if on_back else (marked, other)
        self.add(front, separator=True)
        self.add(back, separator=True)

    def document(self, n: int) -> None:
        spec, rng = self.spec, self.rng
        first = len(self.sides)
        sheets = rng.randint(1, spec.max_sheets_per_document)
        asn = 1000 + n if spec.asn_every and n % spec.asn_every == 1 else None
        tag = "Rechnung" if spec.tag_every and n % spec.tag_every == 2 else None
        unrelated = spec.unrelated_code and n == 1
        page = 1
        for s in range(sheets):
            codes: list[PrintedCode] = []
            if s == 0 and asn is not None:
                # An ASN sticker in the top right corner, QR or Code 128 by turns.
                sym = Symbology.qr if n % 2 else Symbology.code128
                codes.append(
                    PrintedCode(sym, f"{spec.asn_prefix}{asn:05d}", module=4, at=(0.8, 0.06))
                )
            if s == 0 and tag is not None:
                codes.append(PrintedCode(Symbology.datamatrix, f"TAG:{tag}", 5, at=(0.85, 0.9)))
            if s == 0 and unrelated:
                # The sender's invoice number as a barcode: content, never a separator.
                codes.append(
                    PrintedCode(Symbology.code128, f"RE-2024-{n:04d}", 3, 90, at=(0.7, 0.6))
                )
            self.add(Side(Kind.letter, letter_lines(n, page), tuple(codes), skew=self.skew()))
            page += 1
            if spec.duplex:
                if rng.random() < 0.5:
                    self.add(Side(Kind.letter, letter_lines(n, page), skew=self.skew()))
                    page += 1
                else:
                    self.add(Side(Kind.blank, skew=self.skew(), ghost=rng.random() < 0.5))
        self.documents.append(
            DocumentTruth(
                first=first,
                last=len(self.sides) - 1,
                title=letter_lines(n)[0],
                asn=asn,
                tags=(tag,) if tag else (),
            )
        )


def compose(spec: BatchSpec) -> tuple[list[Side], list[PageTruth], list[DocumentTruth]]:
    """The sides of the batch ``spec`` describes, page by page, and their truth."""
    c = _Composer(spec, random.Random(spec.seed))  # noqa: S311 (reproducible test data)
    n = 1
    c.document(n)
    while len(c.sides) < spec.pages:
        c.separator_sheet()
        n += 1
        c.document(n)
    return c.sides, c.truth, c.documents


def batch(path: Path, spec: BatchSpec) -> Batch:
    """Write the batch ``spec`` describes to ``path``; its truth with it."""
    sides, truth, documents = compose(spec)
    look = Look(size=spec.size, rgb=spec.rgb, noise=spec.noise)
    if spec.container is Container.pdf:
        write_pdf(path, sides, look, seed=spec.seed)
    else:
        write_tiff(path, sides, look, seed=spec.seed, container=spec.container)
    return Batch(path, spec, tuple(truth), tuple(documents))


def cached_batch(cache_dir: Path, spec: BatchSpec) -> Batch:
    """``batch()`` kept under ``cache_dir`` (``<key>.pdf``/``.tif`` and its truth): a
    300-page batch takes about a minute to make."""
    suffix = ".pdf" if spec.container is Container.pdf else ".tif"
    path = cache_dir / (spec.key() + suffix)
    truth_path = path.with_suffix(".json")
    if path.exists() and truth_path.exists():
        return _from_json(path, spec, json.loads(truth_path.read_text()))
    made = batch(path, spec)
    tmp = truth_path.with_name(truth_path.name + f".{os.getpid()}")
    tmp.write_text(json.dumps(_to_json(made), indent=1))
    tmp.replace(truth_path)
    return made


# -- the truth as JSON ---------------------------------------------------------------------
def _spec_json(spec: BatchSpec) -> dict[str, object]:
    return {f.name: _plain(getattr(spec, f.name)) for f in dataclasses.fields(spec)}


def _plain(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def _to_json(made: Batch) -> dict[str, object]:
    return {
        "pages": [
            {"kind": p.kind.value, "codes": [[s.value, t] for s, t in p.codes], "sep": p.separator}
            for p in made.pages
        ],
        "documents": [
            {"first": d.first, "last": d.last, "title": d.title, "asn": d.asn, "tags": d.tags}
            for d in made.documents
        ],
    }


def _from_json(path: Path, spec: BatchSpec, data: dict[str, list[dict[str, object]]]) -> Batch:
    def codes(raw: object) -> tuple[tuple[Symbology, str], ...]:
        assert isinstance(raw, list)
        return tuple((Symbology(s), str(t)) for s, t in raw)

    def tags(raw: object) -> tuple[str, ...]:
        return tuple(str(t) for t in raw) if isinstance(raw, Iterable) else ()

    pages = tuple(
        PageTruth(Kind(str(p["kind"])), codes(p["codes"]), bool(p["sep"])) for p in data["pages"]
    )
    docs = tuple(
        DocumentTruth(
            first=int(str(d["first"])),
            last=int(str(d["last"])),
            title=str(d["title"]),
            asn=None if d["asn"] is None else int(str(d["asn"])),
            tags=tags(d["tags"]),
        )
        for d in data["documents"]
    )
    return Batch(path, spec, pages, docs)


__all__ = [
    "A4",
    "A6",
    "BACKGROUND",
    "DPI",
    "PAPER",
    "TONER",
    "WEAK_INK",
    "Batch",
    "BatchSpec",
    "Container",
    "DocumentTruth",
    "Kind",
    "Look",
    "PageTruth",
    "PrintedCode",
    "Scanner",
    "Side",
    "batch",
    "born_digital_pdf",
    "cached_batch",
    "code_image",
    "compose",
    "letter_lines",
    "write_pdf",
    "write_tiff",
]
