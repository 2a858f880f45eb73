"""Every barcode on a page, read in tiers: most pages cost a half-size decode and a few
cheap passes; full resolution only for the crops of regions that need it.

Where the time goes (300 dpi A4, 2480 x 3508, on the 2-core machine the bench ran on):
decoding the page's JPEG at full size ~22 ms, at half size ~19 (libjpeg scales in the
DCT, but the entropy decoding is the same); zxing-cpp with every default option on the
full page (the paperless way) 190-740 ms, all four symbologies at full size with
rotation ~50 ms; at half size the rows for Code 39/128 ~2 ms, the 2D detectors with
rotation and the pyramid ~7 ms. zxing converts a Pillow image before reading it (3-5 ms
for a full page); it is handed a buffer instead.

Tier 1, every page, at half size (~150 dpi):

- **rows**, 1D symbologies, no options: upright and upside-down 1D codes from 4 px
  narrow bars (at 300 dpi), skewed by a few degrees (a row still crosses every bar);
- **turned rows** (the page turned by 90°), when the texture shows sideways bars;
- **matrix**, the 2D detectors with rotation (it is what reads an upside-down
  DataMatrix) and the pyramid (huge modules), when the texture shows squarish fields:
  QR codes from 3 px modules, DataMatrix from 4 px.

Tier 2, the regions ``candidates`` finds that no code read so far explains:

- **bars**: the crop at full resolution (the page's JPEG decoded once more, at full
  size), with rotation and the pyramid: 1D codes down to 2 px bars (0.17 mm), faint
  ones down to ~30 levels below the paper;
- **matrix**: the crop from the full-size picture if the page has one already, else the
  half-size crop enlarged twice (bicubic): DataMatrix and QR from 3 px modules (0.25 mm;
  GS1's smallest Data Matrix X-dimension is 0.255 mm). Words make such regions too; a
  crop costs a fraction of a millisecond.

Past ``MAX_CROPS`` regions the whole page is read at full resolution (bounded either way).
Not read: 2D codes with modules under 3 px (at the scanner's resolution limit), inverted
codes (light on dark: separator sheets, ASN and tag labels are printed dark on light).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

import zxingcpp
from PIL import Image

from ingestd.config.split import Symbology
from worker.split.candidates import Blocks, Region, Shape, survey
from worker.split.marks import Code
from worker.split.pageimages import PageImage

# zxing's symbology families: Code 39 includes full ASCII (extended) and its pharma
# variants, QR includes Micro QR and rMQR; results are mapped back by family.
FORMATS = {
    Symbology.code39: zxingcpp.BarcodeFormat.Code39,
    Symbology.code128: zxingcpp.BarcodeFormat.Code128,
    Symbology.qr: zxingcpp.BarcodeFormat.QRCode,
    Symbology.datamatrix: zxingcpp.BarcodeFormat.DataMatrix,
}
_BY_FAMILY = {fmt: sym for sym, fmt in FORMATS.items()}
LINEAR = frozenset({Symbology.code39, Symbology.code128})

MAX_CROPS = 40  # more regions than this: read the whole page at full resolution
# Around a region: a 1D code's quiet zone (10 modules) and the block grid's slack.
PAD_FRACTION = 0.25
PAD_MIN = 48  # pixels at full resolution


Box = tuple[int, int, int, int]  # left, top, right, bottom


@dataclass(frozen=True, slots=True)
class Found:
    """A code read on a page, with where (full-resolution pixels: left, top, right,
    bottom) so that later tiers skip it and codes keep reading order."""

    code: Code
    box: Box


def _formats(symbologies: Iterable[Symbology]) -> zxingcpp.BarcodeFormats | None:
    wanted = [FORMATS[s] for s in sorted(set(symbologies))]
    return zxingcpp.BarcodeFormats(wanted) if wanted else None


def _view(image: Image.Image) -> memoryview:
    """The pixels as a (height, width) buffer: zxing reads it in place, whereas it
    converts a Pillow image first (that costs more than the rows pass itself)."""
    return memoryview(image.tobytes()).cast("B", (image.height, image.width))


def _read(
    pixels: memoryview,
    formats: zxingcpp.BarcodeFormats,
    *,
    rotate: bool,
    downscale: bool = False,
    scale: int = 1,
    offset: tuple[int, int] = (0, 0),
    transposed: bool = False,
) -> list[Found]:
    """zxing on ``pixels``; boxes mapped back to the full-resolution page (``scale``,
    ``offset``, and ``transposed``: the pixels are the page turned by 90°)."""
    found = []
    results = zxingcpp.read_barcodes(
        pixels, formats=formats, try_rotate=rotate, try_invert=False, try_downscale=downscale
    )
    height = pixels.shape[0] if pixels.shape else 0
    for r in results:
        symbology = _BY_FAMILY.get(r.symbology)
        if symbology is None or not r.valid or not r.text:
            continue
        p = r.position
        corners = [p.top_left, p.top_right, p.bottom_left, p.bottom_right]
        xs, ys = [c.x for c in corners], [c.y for c in corners]
        if transposed:
            # ROTATE_90 maps page (x, y) to (y, W - 1 - x): back is x = W - 1 - y', y = x'.
            xs, ys = [height - 1 - v for v in ys], xs
        box = (
            min(xs) * scale + offset[0],
            min(ys) * scale + offset[1],
            (max(xs) + 1) * scale + offset[0],
            (max(ys) + 1) * scale + offset[1],
        )
        found.append(Found(Code(symbology, r.text), box))
    return found


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _padded(box: Box, size: tuple[int, int]) -> Box:
    left, top, right, bottom = box
    pad = max(PAD_MIN, int(PAD_FRACTION * max(right - left, bottom - top)))
    return (
        max(0, left - pad),
        max(0, top - pad),
        min(size[0], right + pad),
        min(size[1], bottom + pad),
    )


def _doubled(box: Box) -> Box:
    """A half-resolution box at full resolution."""
    return (2 * box[0], 2 * box[1], 2 * box[2], 2 * box[3])


def read_page(
    page: PageImage, blocks: Blocks, symbologies: Collection[Symbology]
) -> tuple[Code, ...]:
    """The codes on ``page`` of the given symbologies, each (symbology, text) once, in
    reading order; ``blocks`` are the block averages of its half-size picture."""
    every = _formats(symbologies)
    if every is None:
        return ()
    linear = _formats(s for s in symbologies if s in LINEAR)
    matrix = _formats(s for s in symbologies if s not in LINEAR)
    half = page.half
    seen = survey(blocks)
    found: list[Found] = []
    if linear is not None:
        found += _read(_view(half), linear, rotate=False, scale=2)
        if seen.sideways:
            turned = _view(half.transpose(Image.Transpose.ROTATE_90))
            found += _read(turned, linear, rotate=False, scale=2, transposed=True)
    if matrix is not None and seen.squares:
        found += _read(_view(half), matrix, rotate=True, downscale=True, scale=2)
    todo = [r for r in seen.regions if _wanted(r, linear, matrix)]
    todo = [r for r in todo if not _explained(_doubled(r.box), found)]
    if len(todo) > MAX_CROPS:
        found += _read(_view(page.full()), every, rotate=True, downscale=True)
        return _unique(found)
    # Bars first: a small 1D code needs the full-size picture, and once it is made the
    # matrix regions are read from it too instead of from an enlarged half.
    todo.sort(key=lambda r: r.shape is Shape.matrix)
    done: list[Box] = []
    for region in todo:
        box = _padded(_doubled(region.box), _size(page))
        if _explained(box, found) or any(_inside(box, d) for d in done):
            continue
        done.append(box)
        found += _read(
            _crop(page, box, region.shape), every, rotate=True, downscale=True, offset=box[:2]
        )
    return _unique(found)


def _size(page: PageImage) -> tuple[int, int]:
    """The full-size picture's size (without making it)."""
    return page.full().size if page.has_full else (2 * page.half.width, 2 * page.half.height)


def _crop(page: PageImage, box: Box, shape: Shape) -> memoryview:
    """The region at full resolution: from the full-size picture for bars (fine bars do
    not survive halving) and whenever it is made already; otherwise, for a matrix
    region, the half-size crop enlarged twice (bicubic), which reads DataMatrix and QR
    codes from 3 px modules (0.25 mm) and costs no full-size decode."""
    if shape is not Shape.matrix or page.has_full:
        full = page.full()
        return _view(full.crop(_clipped(box, full.size)))
    half_box = (box[0] // 2, box[1] // 2, (box[2] + 1) // 2, (box[3] + 1) // 2)
    small = page.half.crop(_clipped(half_box, page.half.size))
    return _view(small.resize((2 * small.width, 2 * small.height), Image.Resampling.BICUBIC))


def _clipped(box: Box, size: tuple[int, int]) -> Box:
    return (max(0, box[0]), max(0, box[1]), min(size[0], box[2]), min(size[1], box[3]))


def _wanted(region: Region, linear: object, matrix: object) -> bool:
    """Regions of a kind no requested symbology can be are not read."""
    if region.shape is Shape.matrix:
        return matrix is not None
    return linear is not None


def _inside(box: Box, outer: Box) -> bool:
    return outer[0] <= box[0] and outer[1] <= box[1] and box[2] <= outer[2] and box[3] <= outer[3]


def _explained(box: Box, found: list[Found]) -> bool:
    return any(_overlaps(box, f.box) for f in found)


def _unique(found: list[Found]) -> tuple[Code, ...]:
    # Reading order: by top edge, then left; the first of equal codes stays.
    seen: set[Code] = set()
    codes = []
    for f in sorted(found, key=lambda f: (f.box[1], f.box[0])):
        if f.code not in seen:
            seen.add(f.code)
            codes.append(f.code)
    return tuple(codes)


__all__ = ["FORMATS", "LINEAR", "read_page"]
