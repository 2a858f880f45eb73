"""What one engine's reading of one page gives: its text, its words with their boxes, the
mean word confidence and whether the layout found the lines upright. Both page readers
(warm tesserocr engines, tesseract's command line) return it."""

from __future__ import annotations

from dataclasses import dataclass

from worker.analysis.ocr.textlayer import Word


@dataclass(frozen=True, slots=True)
class Reading:
    text: str
    words: list[Word]
    confidence: int  # mean word confidence, 0..100 (0: no words)
    upright: bool  # tesseract's layout analysis found the text lines upright
