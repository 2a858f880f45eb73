"""bench/ocr.py's inputs and their scoring: noisy scans, mixed batches and born-digital
letters made with their text known, and the word recall of what a side read."""

from __future__ import annotations

import collections
import datetime
import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench._ocr_common import MONTHS, PUNCTUATION, SKEW
from ingestd.demo import batches, scans


# -- inputs --------------------------------------------------------------------------------
@dataclass
class Doc:
    """One generated file and what is on it."""

    path: Path
    truth: list[tuple[str, ...]]  # lines per page
    issued: datetime.date | None = None  # (c): the letter's date
    key: str = ""  # (c): a number only this document has, for `ingestd search`
    sha256: str = ""

    def __post_init__(self) -> None:
        self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()


@dataclass
class Sizes:
    """Pages per document of each workload."""

    clean: int
    noisy: int
    batch: list[int]
    born: int

    def of(self, wl: str) -> list[int]:
        return {"0": [self.clean], "a": [self.noisy], "b": self.batch, "c": [1] * self.born}[wl]


def noisy_pdf(path: Path, letter: int, pages: int) -> Doc:
    """Letter ``letter`` with ``pages`` pages as a scanner's JPEG PDF, seeded skew."""
    rng = random.Random(letter)
    sides = [
        batches.Side(
            batches.Kind.letter,
            lines=batches.letter_lines(letter, page),
            skew=round(rng.uniform(-SKEW, SKEW), 2),
        )
        for page in range(1, pages + 1)
    ]
    batches.write_pdf(path, sides, batches.Look(), seed=letter)
    return Doc(path, [side.lines for side in sides])


def text_letter(path: Path, letter: int) -> Doc:
    """A one-page text PDF of letter ``letter``, dated, with a customer number of its own."""
    issued = datetime.date(2024, 1 + letter % len(MONTHS), 1 + letter % 28)
    key = f"58{letter}"
    head, *rest = batches.letter_lines(letter, 1)
    lines = (
        head,
        f"Musterstadt, den {issued.day}. {MONTHS[issued.month - 1]} {issued.year}",
        f"Kundennummer {key}",
        *rest,
    )
    scans.text_pdf(path, [lines])
    return Doc(path, [lines], issued=issued, key=key)


def make_inputs(wl: str, rnd: int, sizes: Sizes, work: Path) -> list[Doc]:
    """Workload ``wl``'s files for round ``rnd``: new letter numbers each round, so no
    file repeats (ingestd would take it for a duplicate)."""
    out = work / "in" / f"{wl}-{rnd}"
    if wl == "0":
        n = sizes.clean
        pages = scans.letter_pages(n, first=1 + rnd * n)
        path = scans.image_pdf(out / "clean.pdf", pages)
        return [Doc(path, [tuple(p) for p in pages])]
    if wl == "a":
        return [noisy_pdf(out / "noisy.pdf", 10_000 + rnd, sizes.noisy)]
    if wl == "b":
        return [
            noisy_pdf(out / f"doc-{i:02d}.pdf", 20_000 + rnd * 100 + i, pages)
            for i, pages in enumerate(sizes.batch)
        ]
    return [
        text_letter(out / f"letter-{i:02d}.pdf", 30_000 + rnd * 100 + i) for i in range(sizes.born)
    ]


# -- scoring -------------------------------------------------------------------------------
def words(text: str) -> list[str]:
    return [w for raw in text.split() if (w := raw.strip(PUNCTUATION))]


@dataclass
class Recall:
    found: int = 0
    total: int = 0

    def add(self, truth: Iterable[str], text: str) -> None:
        want = collections.Counter(words(" ".join(truth)))
        got = collections.Counter(words(text))
        self.found += sum((want & got).values())
        self.total += sum(want.values())

    def add_doc(self, doc: Doc, texts: Sequence[str]) -> None:
        """A document's pages against their texts, by page; missing pages count as empty."""
        for i, truth in enumerate(doc.truth):
            self.add(truth, texts[i] if i < len(texts) else "")

    def percent(self) -> float:
        return 100.0 * self.found / self.total if self.total else 0.0


def split_pages(text: str, pages: int) -> list[str]:
    """A sidecar's text per page: pages end in form feeds (a last empty part dropped)."""
    parts = text.split("\f")
    if len(parts) > pages and not "".join(parts[pages:]).strip():
        parts = parts[:pages]
    return parts
