"""Where on a page a barcode may be: a cheap texture test on the half-resolution image.

The page is cut into blocks of ``BLOCK`` x ``BLOCK`` half-resolution pixels (16 x 16 at
300 dpi, 1.4 mm). Per block Pillow's C code averages three things: the share of ink,
the brightness change between horizontal neighbours and between vertical neighbours.
Python then only walks runs of marked blocks (a few hundred on a page of text), never
pixels. Three kinds of region come out:

- *bars*: blocks whose change runs one way, at least ``BARS_RATIO`` times the other (a
  1D code's bars are long straight lines: across them brightness changes at every edge,
  along them hardly at all, skewed by a few degrees too). Text has such blocks only
  here and there, a code has a field of them, so a small code next to text still
  stands out. Upright and sideways bars are two kinds (``Shape``);
- *matrix*: connected blocks with change both ways, roughly square and of a code's size
  (QR, DataMatrix). Text makes such regions too (short words, numbers): the test is
  meant to say "maybe", zxing on the region's crop says what it is.

Long thin regions are rules or edges, never a code, and are dropped; nothing in the band
along the page's edges counts (a skewed sheet's edge runs there, no printer puts a code
there). The survey also says whether the page has any field of sideways bars or any
squarish field at all, whatever its size: without them the half-size passes for
sideways 1D codes and for 2D codes have nothing to find and are skipped.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image, ImageChops

from worker.split.ink import MARGIN_X, MARGIN_Y

BLOCK = 8  # half-resolution pixels per block side
MIN_CHANGE = 5  # mean brightness change per pixel: sensor noise and JPEG stay near 1-2
# One direction's changes at least this many times the other's: bars. Codes measure
# 7-25, text 1-3.
BARS_RATIO = 3
# A matrix code is at most this many blocks a side (~640 px at 300 dpi, more than any
# separator, ASN or tag code); larger squarish regions are pictures or paragraphs.
MATRIX_MAX_BLOCKS = 40
# Bars are at most this many times longer than the code is wide (a sheet's edge is a
# single line, hundreds of blocks long and one or two wide).
BARS_MAX_ELONGATION = 4
# A small code's field of bar blocks has at least this many (its quiet zone keeps it
# apart from text); text has single bar blocks here and there. Large codes, whose wide
# bars leave blocks without change, are read by the whole-page passes anyway.
BARS_MIN_BLOCKS = 6
# Bars are at least this many blocks long (48 px, 4 mm at 300 dpi; specifications ask
# for 5-6 mm): a line of text makes bands of bar blocks one or two blocks high.
BARS_MIN_LENGTH = 3

_RUN = re.compile(rb"[^\x00]+")


class Shape(enum.StrEnum):
    bars = "bars"  # vertical bars: a 1D code upright or upside down
    bars_sideways = "bars-sideways"  # horizontal bars: a 1D code turned by 90°
    matrix = "matrix"


@dataclass(frozen=True, slots=True)
class Region:
    """A place that may hold a code, in the half-resolution image's pixels."""

    box: tuple[int, int, int, int]  # left, top, right, bottom
    shape: Shape


@dataclass(frozen=True, slots=True)
class Survey:
    """What the texture test saw on a page."""

    regions: tuple[Region, ...]  # largest first
    # Some field of horizontal bars, of any size: a sideways 1D code may be there.
    sideways: bool
    # Some squarish field of change both ways, of any size: a 2D code may be there.
    squares: bool


@dataclass(frozen=True, slots=True)
class Blocks:
    """Per-block averages of a half-resolution page ("L" images, one pixel a block)."""

    ink: Image.Image  # share of ink pixels, 0-255
    change_x: Image.Image  # mean |I(x+1, y) - I(x, y)|
    change_y: Image.Image  # mean |I(x, y+1) - I(x, y)|


@dataclass(slots=True)
class _Component:
    left: int
    top: int
    right: int  # exclusive, in blocks
    bottom: int
    cells: int = 0
    change_x: int = 0
    change_y: int = 0


def blocks(image: Image.Image, ink: Image.Image) -> Blocks:
    """The block averages of ``image`` ("L", half resolution) and of its ink mask."""
    w, h = image.size
    inner = (0, 0, w - 1, h - 1)
    # Both differences on the same (w-1) x (h-1) grid.
    dx = ImageChops.difference(image.crop((1, 0, w, h - 1)), image.crop(inner))
    dy = ImageChops.difference(image.crop((0, 1, w - 1, h)), image.crop(inner))
    return Blocks(ink.crop(inner).reduce(BLOCK), dx.reduce(BLOCK), dy.reduce(BLOCK))


def _at_least(level: int) -> list[int]:
    return [255 if v >= level else 0 for v in range(256)]


def _times(factor: int) -> list[int]:
    return [min(255, v * factor) for v in range(256)]


def survey(b: Blocks) -> Survey:
    """The regions of the page that may hold a code, and what may be anywhere."""
    gw, gh = b.ink.size
    if gw < 2 or gh < 2:
        return Survey((), sideways=False, squares=False)
    x, y = b.change_x, b.change_y
    xb, yb = x.tobytes(), y.tobytes()
    changing_x, changing_y = x.point(_at_least(MIN_CHANGE)), y.point(_at_least(MIN_CHANGE))
    # x >= RATIO * y  <=>  x - RATIO * y >= 0 (subtract clips at 0: test > 0 with y > 0).
    mostly_x = ImageChops.subtract(x, y.point(_times(BARS_RATIO))).point(_at_least(1))
    mostly_y = ImageChops.subtract(y, x.point(_times(BARS_RATIO))).point(_at_least(1))
    bars = ImageChops.darker(changing_x, mostly_x)
    sideways = ImageChops.darker(changing_y, mostly_y)
    structured = ImageChops.darker(
        b.ink.point(_at_least(1)), ImageChops.lighter(changing_x, changing_y)
    )
    found: list[tuple[int, Region]] = []
    any_sideways = any_squares = False
    in_margin = _margins(gw, gh)
    for mask, shape in ((bars, Shape.bars), (sideways, Shape.bars_sideways)):
        for c in _components(mask, xb, yb):
            if in_margin(c):
                continue
            if _bars_like(c, sideways=shape is Shape.bars_sideways):
                found.append(_region(c, shape))
            if shape is Shape.bars_sideways and c.cells >= BARS_MIN_BLOCKS:
                # The wide bars of a large code leave fragments that fail the shape
                # test; they still say "read this page's columns".
                any_sideways = True
    for c in _components(structured, xb, yb):
        if not in_margin(c) and _squarish(c) and _both_ways(c):
            any_squares = True
            if _matrix_like(c):
                found.append(_region(c, Shape.matrix))
    found.sort(key=lambda f: -f[0])
    return Survey(tuple(r for _, r in found), sideways=any_sideways, squares=any_squares)


def _margins(gw: int, gh: int) -> Callable[[_Component], bool]:
    """Whether a region lies in the band along the page's edges where a skewed sheet's
    edge runs (up to 3.7 % of the width in from the sides, 1.9 % of the height from top
    and bottom at 3°), and no printer puts a code."""
    mx, my = math.ceil(gw * MARGIN_X), math.ceil(gh * MARGIN_Y)

    def inside(c: _Component) -> bool:
        return c.right <= mx or c.left >= gw - mx or c.bottom <= my or c.top >= gh - my

    return inside


def _region(c: _Component, shape: Shape) -> tuple[int, Region]:
    box = (c.left * BLOCK, c.top * BLOCK, c.right * BLOCK, c.bottom * BLOCK)
    return (c.right - c.left) * (c.bottom - c.top), Region(box, shape)


def _bars_like(c: _Component, sideways: bool) -> bool:
    across, along = c.right - c.left, c.bottom - c.top
    if sideways:
        across, along = along, across
    if c.cells < BARS_MIN_BLOCKS or across < 2 or along < BARS_MIN_LENGTH:
        return False
    # A code's field is dense; bar blocks strewn across a paragraph are not.
    return along <= BARS_MAX_ELONGATION * across and 2 * c.cells >= across * along


def _squarish(c: _Component) -> bool:
    # Square up to skew and the block grid's slack (a 2 x 2 code may cover 3 x 2).
    wide, tall = c.right - c.left, c.bottom - c.top
    return min(wide, tall) >= 2 and max(wide, tall) <= 1.5 * min(wide, tall) + 1


def _both_ways(c: _Component) -> bool:
    # Bars are found apart; a field of change both ways is what a matrix code is.
    return c.change_x < BARS_RATIO * c.change_y and c.change_y < BARS_RATIO * c.change_x


def _matrix_like(c: _Component) -> bool:
    """A region to read: of a small code's size (larger ones the half-size pass reads)."""
    return max(c.right - c.left, c.bottom - c.top) <= MATRIX_MAX_BLOCKS


def _components(mask: Image.Image, dx: bytes, dy: bytes) -> list[_Component]:
    """8-connected regions of the non-zero blocks of ``mask``, found by runs per row;
    with the sums of ``dx`` and ``dy`` (block bytes, same grid) over each."""
    gw, gh = mask.size
    # One zero column after each row: one regex pass finds every run, none crosses rows.
    padded = Image.new("L", (gw + 1, gh))
    padded.paste(mask, (0, 0))
    data = padded.tobytes()
    stride = gw + 1
    rows: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    parent: list[int] = []
    above_lo = above_hi = 0  # the runs of the row above: ids above_lo..above_hi-1
    row_lo, row = 0, -2

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    k = 0
    for m in _RUN.finditer(data):
        first, last = m.span()
        r = first // stride
        start, end = first - r * stride, last - r * stride
        rid = len(starts)
        if r != row:
            above_lo, above_hi = (row_lo, rid) if r == row + 1 else (rid, rid)
            row, row_lo, k = r, rid, above_lo
        rows.append(r)
        starts.append(start)
        ends.append(end)
        parent.append(rid)
        # The runs above are sorted; one ending left of this run ends left of the next.
        while k < above_hi and ends[k] < start:
            k += 1
        j = k
        while j < above_hi and starts[j] <= end:  # touching, diagonals included
            a, b = find(rid), find(j)
            if a != b:
                parent[a] = b
            j += 1
    comps: dict[int, _Component] = {}
    for rid in range(len(starts)):
        r, start, end = rows[rid], starts[rid], ends[rid]
        root = find(rid)
        c = comps.get(root)
        if c is None:
            c = comps[root] = _Component(start, r, end, r + 1)
        elif start < c.left:
            c.left = start
        if end > c.right:
            c.right = end
        c.bottom = r + 1  # runs come row by row
        c.cells += end - start
        offset = r * gw
        c.change_x += sum(dx[offset + start : offset + end])
        c.change_y += sum(dy[offset + start : offset + end])
    return list(comps.values())


__all__ = ["BLOCK", "Blocks", "Region", "Shape", "Survey", "blocks", "survey"]
