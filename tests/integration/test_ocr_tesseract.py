"""The OCR tests of test_ocr.py, unchanged, against the in-process tesseract engine.

test_ocr.py calls ``analyze_file`` with the library's default engine (the ocrmypdf
command line); here every ``OcrOptions`` made without an engine gets
``engine="tesseract"``, the worker's default (analysis.engine), so the same behaviours
hold for both: text per page, searchable PDF, thumbnail, rotation, modes, input and
config errors, missing language packs, the timeout and what it leaves behind. Only the
engine-name assertion has a twin of its own below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration import test_ocr as base
from tests.integration.test_ocr import (  # noqa: F401  (collected by pytest from here)
    src_dir,
    test_available_languages_lists_installed_packs,
    test_born_digital_pdf_keeps_its_text_in_skip_mode,
    test_encrypted_pdf_is_an_input_error,
    test_missing_language_pack_is_a_config_error,
    test_missing_osd_pack_is_a_config_error_when_rotating,
    test_multipage_tiff_one_page_per_frame,
    test_not_a_pdf_is_an_input_error,
    test_output_next_to_the_source_is_refused,
    test_png_with_alpha_channel_is_flattened,
    test_redo_and_force_modes_give_every_page_text,
    test_rerun_replaces_outputs_and_removes_debris,
    test_rotate_threshold_decides_which_pages_are_turned,
    test_rotated_pages_are_read_upright,
    test_single_images,
    test_timeout_kills_ocrmypdf_and_leaves_nothing,
    test_truncated_pdf_is_an_input_error,
    test_truncated_pdf_that_qpdf_can_rebuild_is_still_refused,
    test_unreadable_image_is_an_input_error,
    test_unsupported_type_is_an_input_error,
)
from worker.analysis.ocr import OcrOptions


@pytest.fixture(autouse=True)
def tesseract_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """OcrOptions() means OcrOptions(engine="tesseract") in this module."""
    made = OcrOptions.__init__

    def init(self: OcrOptions, *args: Any, engine: str = "tesseract", **kwargs: Any) -> None:
        made(self, *args, engine=engine, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(OcrOptions, "__init__", init)


def test_tesseract_engine_pages_text_searchable_pdf_and_thumbnail(
    src_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The twin of the first test_ocr test: the same outputs, named by the engine that
    made them (tesseract in this process, through tesserocr)."""
    src = base.archived(base.scans.image_pdf(src_dir / "scan.pdf", base.PAGES, size=base.scans.A6))
    res = base.run(src, base.PDF, tmp_path / "out")
    assert res.page_count == 3
    for page, lines in zip(res.pages, base.PAGES, strict=True):
        assert {w for line in lines for w in line.split()} <= base.words(page)
    assert res.engine.startswith("tesseract 5.") and "tesserocr" in res.engine
    assert base.pdf_text(tmp_path / "out" / base.SEARCHABLE_PDF)[0].split()[:2] == [
        "Rechnung",
        "für",
    ]


@pytest.mark.parametrize("rotate", [0, 90, 180, 270])
def test_text_layer_lies_on_the_printed_words_whatever_the_page_rotation(
    src_dir: Path,  # noqa: F811
    tmp_path: Path,
    rotate: int,
) -> None:
    """A page stored sideways or upside down with /Rotate making it upright: the
    invisible word a viewer finds covers that word's ink on the page as displayed."""
    import ctypes

    import pikepdf
    import pypdfium2
    import pypdfium2.raw as pdfium_c

    lines = ["Stadtwerke Musterstadt", "Rechnung Kundennummer 4711", "Wasser und Abwasser"]
    src = base.scans.image_pdf(
        src_dir / "turned.pdf", [lines], rotate={0: rotate}, size=base.scans.A6
    )
    with pikepdf.open(src, allow_overwriting_input=True) as pdf:
        if rotate:
            pdf.pages[0].obj.Rotate = rotate
        pdf.save(src)
    res = base.run(base.archived(src), base.PDF, tmp_path / "out")
    assert "Kundennummer" in res.pages[0]
    out = pypdfium2.PdfDocument(str(tmp_path / "out" / base.SEARCHABLE_PDF))
    shown = pypdfium2.PdfDocument(str(src))
    try:
        found = out[0].get_textpage().search("Kundennummer").get_next()
        assert found is not None
        left, bottom, right, top = out[0].get_textpage().get_charbox(found[0])  # the "K"
        page = shown[0]
        image = page.render(scale=1, grayscale=True).to_pil()

        def device(x: float, y: float) -> tuple[int, int]:
            dx, dy = ctypes.c_int(), ctypes.c_int()
            pdfium_c.FPDF_PageToDevice(page.raw, 0, 0, image.width, image.height, 0, x, y, dx, dy)
            return dx.value, dy.value

        (x0, y0), (x1, y1) = device(left, bottom), device(right, top)
        box = (min(x0, x1), min(y0, y1), max(x0, x1) + 1, max(y0, y1) + 1)
        ink = [v for v in image.crop(box).tobytes() if v < 128]
        assert len(ink) > 10, (rotate, box)
    finally:
        out.close()
        shown.close()
