"""What a demo batch is made of (ingestd/demo/batches.py): the scanner's constants, the
printed codes, sides and looks a batch is composed from, and its ground truth (which pages
are separators, where each document starts and ends, its ASN and tags)."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import zxingcpp

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

CODE_FORMATS = {
    Symbology.code39: zxingcpp.BarcodeFormat.Code39,
    Symbology.code128: zxingcpp.BarcodeFormat.Code128,
    Symbology.qr: zxingcpp.BarcodeFormat.QRCode,
    Symbology.datamatrix: zxingcpp.BarcodeFormat.DataMatrix,
}
LINEAR_CODES = frozenset({Symbology.code39, Symbology.code128})

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
        blob = json.dumps([GENERATOR_VERSION, spec_json(self)], sort_keys=True)
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


def spec_json(spec: BatchSpec) -> dict[str, object]:
    """The spec as JSON values (enums by value, tuples as lists)."""
    return {f.name: plain(getattr(spec, f.name)) for f in dataclasses.fields(spec)}


def plain(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


# The default look: a clean sheet, straight, no faded ink.
PLAIN = Look()
