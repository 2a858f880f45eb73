"""OCR with ``analysis.engine = "tesseract-cli"``: tesseract's command line through
pytesseract, page by page, for hosts without the tesserocr wheel. The behaviours that
depend on the page reader are test_ocr.py's, run again with this engine (text per page,
rotated pages turned upright, the text layer on the printed words, language packs, the
timeout); the rest (inputs, modes, publishing) is the engine-independent code the
in-process engine's twin (test_ocr_tesseract.py) covers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration import test_ocr as base
from tests.integration.test_ocr import (  # noqa: F401  (collected by pytest from here)
    src_dir,
    test_missing_language_pack_is_a_config_error,
    test_missing_osd_pack_is_a_config_error_when_rotating,
    test_multipage_tiff_one_page_per_frame,
    test_rotated_pages_are_read_upright,
    test_timeout_kills_ocrmypdf_and_leaves_nothing,
)
from tests.integration.test_ocr_tesseract import (  # noqa: F401
    test_text_layer_lies_on_the_printed_words_whatever_the_page_rotation,
)
from worker.analysis.ocr import OcrOptions, warm
from worker.analysis.ocr.command_line import reading_of


@pytest.fixture(autouse=True)
def command_line_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """OcrOptions() means OcrOptions(engine="tesseract-cli") in this module, and the
    tesserocr module cannot be imported: the engine must not need it."""
    made = OcrOptions.__init__

    def init(self: OcrOptions, *args: Any, engine: str = "tesseract-cli", **kwargs: Any) -> None:
        made(self, *args, engine=engine, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(OcrOptions, "__init__", init)
    monkeypatch.setitem(sys.modules, "tesserocr", None)  # import tesserocr -> ImportError


def test_pages_text_searchable_pdf_and_thumbnail_without_tesserocr(
    src_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The first test_ocr test with this engine: the words of every page, a searchable
    PDF whose text layer reads in order, named by the engine that made it; no warm
    engine was loaded (tesserocr cannot even be imported here)."""
    before = warm.loads()
    src = base.archived(base.scans.image_pdf(src_dir / "scan.pdf", base.PAGES, size=base.scans.A6))
    res = base.run(src, base.PDF, tmp_path / "out")
    assert res.page_count == 3 and res.ocr_pages == 3
    for page, lines in zip(res.pages, base.PAGES, strict=True):
        assert {w for line in lines for w in line.split()} <= base.words(page)
    assert res.engine.startswith("tesseract ") and res.engine.endswith("(command line)")
    assert warm.loads() == before
    assert base.pdf_text(tmp_path / "out" / base.SEARCHABLE_PDF)[0].split()[:2] == [
        "Rechnung",
        "für",
    ]


def test_tsv_columns_become_lines_paragraphs_words_and_a_mean_confidence() -> None:
    """tesseract's TSV as pytesseract hands it over: words in reading order with their
    boxes, a line break per line, a blank line between paragraphs; the page, block and
    line rows (level < 5), empty words and their confidence of -1 count for nothing."""
    rows = [
        # level, block, par, line, left, top, width, height, conf, text
        (1, 0, 0, 0, 0, 0, 800, 600, -1, ""),
        (4, 1, 1, 1, 10, 10, 300, 20, -1, ""),
        (5, 1, 1, 1, 10, 10, 100, 20, 90, "Rechnung"),
        (5, 1, 1, 1, 120, 10, 60, 20, 80, "für"),
        (5, 1, 1, 2, 10, 40, 80, 20, 70, "Wasser"),
        (5, 1, 1, 2, 95, 40, 5, 20, -1, " "),
        (5, 1, 2, 1, 10, 90, 120, 20, 60, "Köln"),
    ]
    columns = ("level", "block_num", "par_num", "line_num", "left", "top", "width", "height")
    data: dict[str, list[Any]] = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
    data["conf"] = [r[8] for r in rows]
    data["text"] = [r[9] for r in rows]
    reading = reading_of(data)
    assert reading.text == "Rechnung für\nWasser\n\nKöln\n"
    assert [w.text for w in reading.words] == ["Rechnung", "für", "Wasser", "Köln"]
    assert reading.words[0].box == (10, 10, 110, 30) and reading.words[0].baseline == 30
    assert reading.confidence == 75 and reading.upright
    assert reading_of({}).text == "" and reading_of({}).confidence == 0
    # The same words read off a sideways page: tall boxes, so not upright.
    data["width"], data["height"] = data["height"], data["width"]
    assert not reading_of(data).upright
