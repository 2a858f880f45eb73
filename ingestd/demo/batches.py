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

import json
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ingestd.config.split import Symbology
from ingestd.demo import scans
from ingestd.demo.batch_pages import Scanner, born_digital_pdf, code_image, write_pdf, write_tiff
from ingestd.demo.batch_spec import (
    A4,
    A6,
    BACKGROUND,
    DPI,
    LINEAR_CODES,
    PAPER,
    SENDERS,
    TONER,
    WEAK_INK,
    Batch,
    BatchSpec,
    Container,
    DocumentTruth,
    Kind,
    Look,
    PageTruth,
    PrintedCode,
    Side,
)

# What tests, benches and the demo take from here (the parts live in batch_spec.py and
# batch_pages.py).
__all__ = [
    "A4",
    "A6",
    "TONER",
    "WEAK_INK",
    "Batch",
    "BatchSpec",
    "Container",
    "Kind",
    "Look",
    "PrintedCode",
    "Side",
    "batch",
    "born_digital_pdf",
    "cached_batch",
    "compose",
    "letter_lines",
    "write_pdf",
    "write_tiff",
]


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
        linear = spec.separator_symbology in LINEAR_CODES
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
