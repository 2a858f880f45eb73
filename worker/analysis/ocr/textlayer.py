"""The searchable PDF: an invisible text layer laid over the original page.

The page itself is copied as it is (its content stream and images are never decoded or
re-encoded: the derived PDF shows exactly the scan); what is added is one more content
stream, drawn after the page's own (wrapped in q/Q so nothing the page leaves in the
graphics state moves the text), with every word in text render mode 3 (invisible) in a
glyphless font, scaled horizontally to the width tesseract measured. Selecting and
searching in a viewer then hits the words where they are on the scan. This is what
tesseract's own PDF renderer and ocrmypdf do; the font is tesseract's ``pdf.ttf`` (one
empty glyph for every character, code points passed through as CIDs and mapped back by
an identity ToUnicode CMap).

Coordinates: words come in pixels of the image OCR read (the page as displayed, turned
upright when orientation detection turned it: ``rotate`` is the page's /Rotate after
that), top-left origin; they are mapped to points on the displayed page and from there
into the page's user space through the /Rotate and the crop box origin.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pikepdf

FONT_NAME = "/IngestdOCR"
# The glyphless font's advance width: every character is half an em wide (/DW 500).
CHAR_WIDTH = 0.5
_TO_UNICODE = b"""/CIDInit /ProcSet findresource begin
12 dict begin
begincmap
/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def
/CMapName /Adobe-Identity-UCS def
/CMapType 2 def
1 begincodespacerange
<0000> <FFFF>
endcodespacerange
1 beginbfrange
<0000> <FFFF> <0000>
endbfrange
endcmap
CMapName currentdict /CMap defineresource pop
end
end
"""


@dataclass(frozen=True, slots=True)
class Word:
    text: str
    box: tuple[int, int, int, int]  # left, top, right, bottom in image pixels
    baseline: int  # y of the line's baseline under this word, image pixels


@dataclass(frozen=True, slots=True)
class PageWords:
    """What OCR found on one page and the geometry of the image it read."""

    words: Sequence[Word]
    width_px: int
    height_px: int
    rotate: int  # the page's /Rotate the words are upright in (0, 90, 180, 270)


def inherited(page: pikepdf.Page, key: str) -> pikepdf.Object | None:
    """``key`` of the page, or of the nearest page-tree node above it (PDF 7.7.3.4)."""
    node: pikepdf.Object | None = page.obj
    for _ in range(64):  # a page tree deeper than this is a loop
        if node is None or not isinstance(node, pikepdf.Dictionary):
            return None
        if key in node:
            return node[key]
        node = node.get("/Parent")
    return None


def page_rotation(page: pikepdf.Page) -> int:
    value = inherited(page, "/Rotate")
    try:
        return int(value) % 360 if value is not None else 0
    except (TypeError, ValueError):
        return 0


def glyphless_font(pdf: pikepdf.Pdf, font_file: Path | None) -> pikepdf.Object:
    """The Type 0 font (made once per output PDF, shared by its pages)."""
    descriptor = pikepdf.Dictionary(
        Type=pikepdf.Name.FontDescriptor,
        FontName=pikepdf.Name.GlyphLessFont,
        Flags=5,
        FontBBox=[0, 0, 500, 1000],
        ItalicAngle=0,
        Ascent=1000,
        Descent=0,
        CapHeight=1000,
        StemV=80,
    )
    if font_file is not None:
        data = font_file.read_bytes()
        descriptor.FontFile2 = pdf.make_stream(data, Length1=len(data))
    # Every CID (a UTF-16 code unit) drawn with glyph 1, the font's one empty glyph.
    gid_map = pdf.make_stream(zlib.compress(b"\x00\x01" * 65536), Filter=pikepdf.Name.FlateDecode)
    cid_font = pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Font,
            Subtype=pikepdf.Name.CIDFontType2,
            BaseFont=pikepdf.Name.GlyphLessFont,
            CIDSystemInfo=pikepdf.Dictionary(Registry="Adobe", Ordering="Identity", Supplement=0),
            FontDescriptor=pdf.make_indirect(descriptor),
            DW=int(CHAR_WIDTH * 1000),
            CIDToGIDMap=gid_map,
        )
    )
    return pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Font,
            Subtype=pikepdf.Name.Type0,
            BaseFont=pikepdf.Name.GlyphLessFont,
            Encoding=pikepdf.Name("/Identity-H"),
            DescendantFonts=[cid_font],
            ToUnicode=pdf.make_stream(_TO_UNICODE),
        )
    )


def _display_to_user(page: pikepdf.Page, rotate: int) -> tuple[float, ...]:
    """The matrix from points on the displayed page (origin bottom left) to user space."""
    obj = page.obj
    box = page.cropbox if "/CropBox" in obj else page.mediabox
    x0, y0 = min(float(box[0]), float(box[2])), min(float(box[1]), float(box[3]))
    x1, y1 = max(float(box[0]), float(box[2])), max(float(box[1]), float(box[3]))
    return {
        0: (1.0, 0.0, 0.0, 1.0, x0, y0),
        90: (0.0, 1.0, -1.0, 0.0, x1, y0),
        180: (-1.0, 0.0, 0.0, -1.0, x1, y1),
        270: (0.0, -1.0, 1.0, 0.0, x0, y1),
    }[rotate % 360]


def displayed_size(page: pikepdf.Page, rotate: int) -> tuple[float, float]:
    obj = page.obj
    box = page.cropbox if "/CropBox" in obj else page.mediabox
    w, h = abs(float(box[2]) - float(box[0])), abs(float(box[3]) - float(box[1]))
    return (h, w) if rotate % 180 else (w, h)


def _utf16_hex(text: str) -> bytes:
    return text.encode("utf-16-be").hex().upper().encode()


def content(page: pikepdf.Page, words: PageWords) -> bytes:
    """The text layer's content stream for ``page`` (font resource ``FONT_NAME``)."""
    width_pt, height_pt = displayed_size(page, words.rotate)
    sx, sy = width_pt / max(1, words.width_px), height_pt / max(1, words.height_px)
    a, b, c, d, e, f = _display_to_user(page, words.rotate)
    ops = [b"q %.6f %.6f %.6f %.6f %.4f %.4f cm BT 3 Tr" % (a, b, c, d, e, f)]
    for word in words.words:
        text = word.text.strip()
        if not text:
            continue
        left, top, right, bottom = word.box
        size = max(1.0, (bottom - top) * sy)
        width = max(1.0, (right - left) * sx)
        # A trailing space, so text extraction keeps the words apart.
        chars = len(text.encode("utf-16-be")) // 2
        scale = 100.0 * width / (chars * CHAR_WIDTH * size)
        x, y = left * sx, height_pt - word.baseline * sy
        ops.append(
            b"/%s %.2f Tf %.2f Tz 1 0 0 1 %.3f %.3f Tm <%s> Tj"
            % (FONT_NAME[1:].encode(), size, scale, x, y, _utf16_hex(text + " "))
        )
    ops.append(b"ET Q")
    return b"\n".join(ops)


def lay_over(pdf: pikepdf.Pdf, page: pikepdf.Page, words: PageWords, font: pikepdf.Object) -> None:
    """Add the invisible text of ``words`` to ``page`` and set its /Rotate."""
    rotate = words.rotate % 360
    if rotate:
        page.obj.Rotate = rotate
    elif "/Rotate" in page.obj:
        del page.obj.Rotate
    if not words.words:
        return
    # A copy on the page itself: resources inherited from the page tree stay the others'.
    found = inherited(page, "/Resources")
    entries = (
        {str(k): found[str(k)] for k in found} if isinstance(found, pikepdf.Dictionary) else {}
    )
    resources = page.obj.Resources = pikepdf.Dictionary(entries)
    fonts = resources.get("/Font")
    if not isinstance(fonts, pikepdf.Dictionary):
        fonts = resources.Font = pikepdf.Dictionary()
    fonts[FONT_NAME] = font
    # The page's own content inside q/Q: a page that leaves the CTM changed cannot move
    # the text layer. Its streams are kept as they are (never decoded).
    page.contents_add(pdf.make_stream(b"q\n"), prepend=True)
    page.contents_add(pdf.make_stream(b"\nQ\n" + content(page, words)), prepend=False)
