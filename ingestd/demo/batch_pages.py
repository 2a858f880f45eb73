"""A demo batch's pages as a scanner makes them (ingestd/demo/batches.py): barcodes drawn
on paper, dust, skew and noise (``Scanner``), and the files written from them: a PDF of
JPEG pages as scanner firmware writes it, a born-digital PDF, a multi-page TIFF."""

from __future__ import annotations

import dataclasses
import io
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import pikepdf
import zxingcpp
from PIL import Image, ImageChops, ImageDraw

from ingestd.demo import scans
from ingestd.demo.batch_spec import (
    BACKGROUND,
    CODE_FORMATS,
    DPI,
    LINEAR_CODES,
    PAPER,
    PLAIN,
    TONER,
    WEAK_INK,
    Container,
    Look,
    PrintedCode,
    Side,
)


# -- drawing -------------------------------------------------------------------------------
def code_image(code: PrintedCode) -> Image.Image:
    """The code's bars or modules as an "L" image (0 ink, 255 paper), quiet zones
    included, before it is printed on a page."""
    made = zxingcpp.create_barcode(code.text, CODE_FORMATS[code.symbology])
    bitmap = made.to_image(scale=code.module, add_quiet_zones=True)
    # zxingcpp.Image is a buffer (h x w bytes); its stub does not declare __buffer__.
    view = memoryview(bitmap)  # type: ignore[arg-type]
    h, w = view.shape or (0, 0)
    img = Image.frombuffer("L", (w, h), bytes(view), "raw", "L", 0, 1)
    if code.symbology in LINEAR_CODES:
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


def write_pdf(path: Path, sides: Sequence[Side], look: Look = PLAIN, seed: int = 0) -> Path:
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
            if code.symbology in LINEAR_CODES and code.height:
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
    look: Look = PLAIN,
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
