"""Scanned-looking test documents, generated on the fly (deterministic, no binary blobs).

Text lines are drawn with Pillow in a serif font (11-12 pt) onto white 300 dpi grayscale
pages, the way a scanner delivers a clean office letter: tesseract reads every word.
Used by the OCR tests and bench/ocr.py. Every writer creates the parent directories.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import img2pdf  # type: ignore[import-untyped]
import pikepdf
from PIL import Image, ImageDraw, ImageFont

DPI = 300
A4 = (2480, 3508)  # 210 x 297 mm at 300 dpi
A6 = (1240, 1748)  # 105 x 148 mm: a quarter of the pixels, for fast tests
FONT_PX = 48  # ~11.5 pt at 300 dpi, a letter's body text
LINE_PX = 80

# A serif face, as most letters are set: tesseract's orientation detection is sure of
# itself on serif text (confidence ~25-35 here) and hesitant on sans (~10-16, below
# ocrmypdf's rotation threshold of 14). DejaVu is fonts-dejavu-core (Debian's fontconfig
# usually pulls it in with tesseract); URW's Nimbus Roman always comes with ghostscript.
FONTS = (
    Path("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"),
    Path("/usr/share/fonts/opentype/urw-base35/NimbusRoman-Regular.otf"),
)

# A plausible German letter; letter_pages() numbers each page so no two are alike.
LETTER = [
    "Stadtwerke Musterstadt GmbH",
    "Rechnung Nummer 2024-{n:04d}",
    "Kundennummer 58{n:03d}",
    "Sehr geehrte Damen und Herren,",
    "wir berechnen Ihnen für den Zeitraum",
    "Januar bis März die folgenden Leistungen:",
    "Wasser, Abwasser und Straßenreinigung.",
    "Die Zählerstände wurden am Monatsende",
    "abgelesen und sind in der Anlage aufgeführt.",
    "Bitte überweisen Sie den Betrag innerhalb",
    "von vierzehn Tagen auf das unten genannte",
    "Konto. Bei Fragen erreichen Sie unseren",
    "Kundendienst werktags von acht bis achtzehn",
    "Uhr. Eine Lastschrift können Sie jederzeit",
    "schriftlich oder telefonisch beantragen.",
    "Mit freundlichen Grüßen",
    "Ihre Stadtwerke Musterstadt",
    "Seite {n}",
]


def font(size: int = FONT_PX) -> ImageFont.FreeTypeFont:
    for candidate in FONTS:
        if candidate.exists():
            return ImageFont.truetype(str(candidate), size)
    raise RuntimeError(
        "no TrueType font for test scans: install fonts-dejavu-core (apt-get install "
        "fonts-dejavu-core)"
    )


def letter_pages(count: int, first: int = 1) -> list[list[str]]:
    """``count`` pages of German letter text numbered from ``first`` (no two alike)."""
    return [[line.format(n=n) for line in LETTER] for n in range(first, first + count)]


def page_image(lines: Sequence[str], size: tuple[int, int] = A4, rotate: int = 0) -> Image.Image:
    """One grayscale page with ``lines``; ``rotate`` turns the content counter-clockwise
    by 0/90/180/270 degrees, as a sheet fed sideways or upside down comes out."""
    img = Image.new("L", size, 255)
    draw = ImageDraw.Draw(img)
    face = font()
    margin = size[0] // 16
    for i, line in enumerate(lines):
        draw.text((margin, margin + i * LINE_PX), line, fill=0, font=face)
    if rotate % 360:
        # expand=True: a 90° turn makes a landscape image, as a scanner would deliver it.
        img = img.rotate(rotate, expand=True, fillcolor=255)
    return img


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", dpi=(DPI, DPI))
    return buf.getvalue()


def image_pdf(
    path: Path,
    pages: Sequence[Sequence[str]],
    rotate: Mapping[int, int] | None = None,
    size: tuple[int, int] = A4,
) -> Path:
    """An image-only PDF (no text layer), one lossless 300 dpi image per page.

    ``rotate`` maps a 0-based page index to degrees (counter-clockwise) its content is
    turned by."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rotate = rotate or {}
    images = [_png(page_image(lines, size, rotate.get(i, 0))) for i, lines in enumerate(pages)]
    layout = img2pdf.get_fixed_dpi_layout_fun((DPI, DPI))
    path.write_bytes(img2pdf.convert(images, layout_fun=layout))
    return path


def multipage_tiff(path: Path, pages: Sequence[Sequence[str]], size: tuple[int, int] = A4) -> Path:
    """A multi-frame TIFF (as network scanners write them), one frame per page, 300 dpi."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = [page_image(lines, size) for lines in pages]
    frames[0].save(
        path,
        "TIFF",
        save_all=True,
        append_images=frames[1:],
        dpi=(DPI, DPI),
        compression="tiff_deflate",
    )
    return path


def single_image(
    path: Path, lines: Sequence[str], fmt: str, size: tuple[int, int] = A4, dpi: int | None = DPI
) -> Path:
    """One page as a JPEG or PNG; ``dpi=None`` writes no resolution metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    img = page_image(lines, size)
    if fmt == "JPEG":
        # Without dpi, Pillow writes JFIF density 1:1 "aspect ratio only": no resolution.
        extra = {"quality": 90, **({"dpi": (dpi, dpi)} if dpi else {})}
    else:
        extra = {"dpi": (dpi, dpi)} if dpi else {}
    img.save(path, fmt, **extra)
    return path


def encrypted_pdf(path: Path, lines: Sequence[str] = ("Geheim",)) -> Path:
    """An image-only PDF that needs a user password to open (AES-256)."""
    plain = path.with_name(path.name + ".plain.pdf")
    image_pdf(plain, [lines], size=A6)
    try:
        with pikepdf.open(plain) as pdf:
            pdf.save(path, encryption=pikepdf.Encryption(user="geheim", owner="besitzer"))
    finally:
        plain.unlink()
    return path


def truncated_pdf(path: Path, pages: Sequence[Sequence[str]] = (("Abgeschnitten",),)) -> Path:
    """A valid image-only PDF cut in half, as an interrupted upload leaves it."""
    image_pdf(path, pages, size=A6)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _pdf_string(text: str) -> bytes:
    # WinAnsiEncoding is cp1252 for every German letter; escape what PDF strings reserve.
    raw = text.encode("cp1252")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def text_pdf(path: Path, pages: Sequence[Sequence[str]]) -> Path:
    """A born-digital PDF: every page has a real text layer (Helvetica, WinAnsi), no images."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf = pikepdf.new()
    font_ref = pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Font,
            Subtype=pikepdf.Name.Type1,
            BaseFont=pikepdf.Name.Helvetica,
            Encoding=pikepdf.Name.WinAnsiEncoding,
        )
    )
    for lines in pages:
        ops = [b"BT /F1 18 Tf 72 760 Td 24 TL"]
        ops += [_pdf_string(line) + b" Tj T*" for line in lines]
        ops.append(b"ET")
        page = pikepdf.Page(
            pikepdf.Dictionary(
                Type=pikepdf.Name.Page,
                MediaBox=[0, 0, 595, 842],
                Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font_ref)),
                Contents=pdf.make_stream(b"\n".join(ops)),
            )
        )
        pdf.pages.append(page)
    pdf.save(path, deterministic_id=True)
    return path


def concat_pdfs(path: Path, parts: Sequence[Path]) -> Path:
    """The pages of ``parts`` in order, as one PDF (e.g. born-digital pages, then scans)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = pikepdf.new()
    sources = [pikepdf.open(part) for part in parts]
    try:
        for src in sources:
            out.pages.extend(src.pages)
        out.save(path, deterministic_id=True)
    finally:
        for src in sources:
            src.close()
    return path
