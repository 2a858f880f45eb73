"""How much of a page is ink: the paper's tone, the ink mask, and the percentage.

A pixel is ink when it is clearly darker than the page's own paper (``INK_DELTA``
levels): sensor noise and JPEG ringing on a blank sheet stay well within that, faint
show-through too, while toner, pencil-grey and faded prints are far beyond it. The
paper's tone is the page's 70th percentile (most of any page is paper), so recycled
grey paper or a dim scanner still reads as blank. A margin is left out on each side: a
skewed sheet shows the scanner's lid there and its edge casts a shadow (at 3° of skew the
sheet's edge wanders up to 3.7 % of the width in from the sides, 1.9 % of the height
from top and bottom). No more than that: a letterhead 10 mm below the top is content.
"""

from __future__ import annotations

from PIL import Image

INK_DELTA = 28  # levels below the paper's tone that count as ink
MARGIN_X = 0.04  # of the width, left and right
MARGIN_Y = 0.025  # of the height, top and bottom
PAPER_PERCENTILE = 0.70
# A "paper" darker than this is a dark page (a photo, a black sheet), not dim paper:
# measured against white instead, it is all ink rather than blank.
DARKEST_PAPER = 160


def paper_level(image: Image.Image) -> int:
    """The tone of the page's paper ("L" image): its 70th percentile, at least
    ``DARKEST_PAPER``."""
    hist = image.histogram()
    wanted = image.width * image.height * PAPER_PERCENTILE
    seen = 0
    for level, count in enumerate(hist[:256]):
        seen += count
        if seen >= wanted:
            return max(level, DARKEST_PAPER)
    return 255


def ink_mask(image: Image.Image, paper: int) -> Image.Image:
    """255 where ``image`` ("L") is ink, 0 where it is paper."""
    limit = paper - INK_DELTA
    return image.point([255 if v < limit else 0 for v in range(256)])


def ink_percent(shares: Image.Image) -> float:
    """Percent of the page inside the margins that is ink, from ``shares``: the ink
    mask averaged over blocks (each pixel the share of ink of a block, 0-255); the
    mean of the averages is the share of the whole."""
    w, h = shares.size
    dx, dy = round(w * MARGIN_X), round(h * MARGIN_Y)
    inner = shares.crop((dx, dy, w - dx, h - dy))
    area = inner.width * inner.height
    if not area:
        return 0.0
    return 100.0 * sum(inner.tobytes()) / (255 * area)


__all__ = ["INK_DELTA", "MARGIN_X", "MARGIN_Y", "ink_mask", "ink_percent", "paper_level"]
