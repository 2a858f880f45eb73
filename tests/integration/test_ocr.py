"""worker/analysis/ocr/ and worker/programs.py with the real ocrmypdf, tesseract and pdfium.

Pages are small (A6 at 300 dpi) with a few lines of large text: each OCR run takes a
second or two and tesseract reads every word. The source file is made read-only (0440)
in a directory of its own, like an archived WORM file, and checked byte for byte after.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pypdfium2
import pytest
from PIL import Image

from tests.fixtures import scans
from worker import programs
from worker.analysis.ocr import (
    SEARCHABLE_PDF,
    THUMBNAIL,
    OcrConfigError,
    OcrInputError,
    OcrOptions,
    OcrResult,
    OcrTimeout,
    analyze_file,
    available_languages,
)
from worker.analysis.ocr.installation import tesseract_info

PDF = "application/pdf"
PAGES = [
    ["Rechnung für Wasser", "Straßenreinigung", "im März"],
    ["Zweite Seite", "Grüße aus Köln"],
    ["Dritte Seite", "Übung macht Meister"],
]
# Twelve lines of letter text per page: enough for tesseract's orientation detection.
LETTER = [page[:12] for page in scans.letter_pages(4)]


def archived(path: Path) -> Path:
    """Make ``path`` look like a WORM archive file: 0440, alone in its directory."""
    path.chmod(0o440)
    return path


def fingerprint(path: Path) -> tuple[str, int, list[str]]:
    """SHA-256, mtime (ns) and the names in its directory."""
    return (
        hashlib.sha256(path.read_bytes()).hexdigest(),
        path.stat().st_mtime_ns,
        sorted(os.listdir(path.parent)),
    )


def pdf_text(path: Path) -> list[str]:
    doc = pypdfium2.PdfDocument(str(path))
    try:
        return [doc[i].get_textpage().get_text_range() for i in range(len(doc))]
    finally:
        doc.close()


def words(text: str) -> set[str]:
    return set(text.replace(",", " ").replace(".", " ").split())


def run(src: Path, mime: str, out: Path, **opts: object) -> OcrResult:
    return analyze_file(src, mime, out, OcrOptions(**opts))  # type: ignore[arg-type]


def processes_mentioning(marker: str) -> list[str]:
    """Command lines of live processes that contain ``marker`` (a test's temp path)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def sleepers(seconds: str) -> list[int]:
    """Pids of live ``sleep <seconds>`` processes (a duration no other test uses)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and os.path.basename(argv[0]) == b"sleep" and argv[1] == seconds.encode():
            found.append(int(pid))
    return found


@pytest.fixture
def src_dir(tmp_path: Path) -> Path:
    d = tmp_path / "archive"
    d.mkdir()
    return d


# -- PDFs ----------------------------------------------------------------------------------
def test_image_pdf_pages_text_searchable_pdf_and_thumbnail(src_dir: Path, tmp_path: Path) -> None:
    """A 3-page image-only PDF: each page's words on that page, a searchable PDF, a PNG
    thumbnail of the configured width, the source untouched and nothing left behind."""
    src = archived(scans.image_pdf(src_dir / "scan.pdf", PAGES, size=scans.A6))
    before = fingerprint(src)
    out = tmp_path / "derived" / "doc1"
    res = run(src, PDF, out, thumbnail_width=240)
    assert res.page_count == 3 and len(res.pages) == 3
    assert {"Rechnung", "Wasser", "Straßenreinigung", "März"} <= words(res.pages[0])
    assert {"Zweite", "Grüße", "Köln"} <= words(res.pages[1])
    assert {"Dritte", "Übung", "Meister"} <= words(res.pages[2])
    assert "Köln" not in res.pages[0] and "Rechnung" not in res.pages[2]
    assert (res.searchable_pdf, res.thumbnail) == (SEARCHABLE_PDF, THUMBNAIL)
    assert res.engine.startswith("ocrmypdf 17.") and ", tesseract 5." in res.engine
    assert sorted(os.listdir(out)) == [SEARCHABLE_PDF, THUMBNAIL]  # no temp files
    layer = pdf_text(out / SEARCHABLE_PDF)
    assert len(layer) == 3 and "Straßenreinigung" in layer[0] and "Köln" in layer[1]
    with Image.open(out / THUMBNAIL) as thumb:
        assert thumb.format == "PNG" and thumb.width == 240
        assert thumb.height == pytest.approx(240 * 1748 / 1240, abs=2)  # A6 portrait
    assert fingerprint(src) == before


def test_rerun_replaces_outputs_and_removes_debris(src_dir: Path, tmp_path: Path) -> None:
    """A second run into the same directory replaces both files (new inodes) and removes
    the temp dir a killed run left (its pid is gone)."""
    src = archived(scans.image_pdf(src_dir / "scan.pdf", PAGES[:1], size=scans.A6))
    out = tmp_path / "out"
    run(src, PDF, out)
    inodes = [(out / name).stat().st_ino for name in (SEARCHABLE_PDF, THUMBNAIL)]
    debris = out / ".ocr-tmp-999999999-x1y2"  # above any pid_max: that run is dead
    (debris / "ocrmypdf.io.abc").mkdir(parents=True)
    (debris / "ocrmypdf.io.abc" / "000001_ocr.png").write_bytes(b"x" * 1000)
    res = run(src, PDF, out, thumbnail_width=100)
    assert "Wasser" in res.pages[0]
    assert sorted(os.listdir(out)) == [SEARCHABLE_PDF, THUMBNAIL]
    assert [(out / n).stat().st_ino for n in (SEARCHABLE_PDF, THUMBNAIL)] != inodes
    with Image.open(out / THUMBNAIL) as thumb:
        assert thumb.width == 100


def test_rotated_pages_are_read_upright(src_dir: Path, tmp_path: Path) -> None:
    """Pages fed sideways (90°, 270°) or upside down (180°) are turned and their words read."""
    src = archived(
        scans.image_pdf(
            src_dir / "rotated.pdf", LETTER, rotate={1: 90, 2: 180, 3: 270}, size=scans.A6
        )
    )
    res = run(src, PDF, tmp_path / "out")
    for n, text in enumerate(res.pages, 1):
        assert {"Stadtwerke", "Musterstadt", "Rechnung", "Straßenreinigung"} <= words(text), n
        assert f"2024-{n:04d}" in text, n
    # The searchable PDF shows them upright too: landscape page 2 came back as portrait.
    doc = pypdfium2.PdfDocument(str(tmp_path / "out" / SEARCHABLE_PDF))
    try:
        assert all(doc[i].get_width() < doc[i].get_height() for i in range(4))
    finally:
        doc.close()


def test_rotate_threshold_decides_which_pages_are_turned(src_dir: Path, tmp_path: Path) -> None:
    """An upside-down page is turned at the default threshold and left as it is when the
    threshold is above any confidence tesseract reports (the option reaches ocrmypdf)."""
    src = archived(
        scans.image_pdf(src_dir / "upside.pdf", LETTER[:1], rotate={0: 180}, size=scans.A6)
    )
    upright = run(src, PDF, tmp_path / "a")
    assert "Musterstadt" in words(upright.pages[0])
    kept = run(src, PDF, tmp_path / "b", rotate_threshold=1000.0)
    assert "Musterstadt" not in words(kept.pages[0])


def test_born_digital_pdf_keeps_its_text_in_skip_mode(src_dir: Path, tmp_path: Path) -> None:
    """Mode skip: pages with a text layer keep exactly that text (skipped runs of pages
    included), image pages between them are OCRed, all in page order."""
    born = scans.text_pdf(
        tmp_path / "born.pdf", [["Vorhandener Text äöü ß", "Zweite Zeile"], ["Noch eine Textseite"]]
    )
    scan = scans.image_pdf(tmp_path / "scan.pdf", PAGES[1:2], size=scans.A6)
    tail = scans.text_pdf(tmp_path / "tail.pdf", [["Letzte Seite mit Text"]])
    src = archived(scans.concat_pdfs(src_dir / "mixed.pdf", [born, scan, tail]))
    res = run(src, PDF, tmp_path / "out")
    assert res.page_count == 4
    assert res.pages[0] == "Vorhandener Text äöü ß\nZweite Zeile"
    assert res.pages[1] == "Noch eine Textseite"
    assert {"Zweite", "Grüße", "Köln"} <= words(res.pages[2])
    assert res.pages[3] == "Letzte Seite mit Text"
    assert not any("OCR skipped" in page for page in res.pages)


@pytest.mark.parametrize("mode", ["redo", "force"])
def test_redo_and_force_modes_give_every_page_text(
    src_dir: Path, tmp_path: Path, mode: str
) -> None:
    """Modes redo (text read back from the PDF) and force (all pages OCRed): a text page
    and a scanned page both come back with their words."""
    born = scans.text_pdf(tmp_path / "born.pdf", [["Vorhandener Text", "Zweite Zeile"]])
    scan = scans.image_pdf(tmp_path / "scan.pdf", PAGES[1:2], size=scans.A6)
    src = archived(scans.concat_pdfs(src_dir / "mixed.pdf", [born, scan]))
    res = run(src, PDF, tmp_path / "out", mode=mode)
    assert res.page_count == 2
    assert {"Vorhandener", "Text", "Zweite", "Zeile"} <= words(res.pages[0])
    assert {"Zweite", "Grüße", "Köln"} <= words(res.pages[1])


def test_encrypted_pdf_is_an_input_error(src_dir: Path, tmp_path: Path) -> None:
    """A password-protected PDF: OcrInputError saying so; no output, no temp files."""
    src = archived(scans.encrypted_pdf(src_dir / "secret.pdf"))
    with pytest.raises(OcrInputError, match=r"encrypted \(password-protected\)"):
        run(src, PDF, tmp_path / "out")
    assert os.listdir(tmp_path / "out") == []


def test_truncated_pdf_is_an_input_error(src_dir: Path, tmp_path: Path) -> None:
    """A PDF cut in half (interrupted upload): OcrInputError naming truncation."""
    src = archived(scans.truncated_pdf(src_dir / "half.pdf"))
    with pytest.raises(OcrInputError, match="truncated"):
        run(src, PDF, tmp_path / "out")


def test_truncated_pdf_that_qpdf_can_rebuild_is_still_refused(
    src_dir: Path, tmp_path: Path
) -> None:
    """A cut-off PDF whose page tree survived (qpdf rebuilds it) is refused as truncated,
    not OCRed into a document with pages missing."""
    whole = scans.text_pdf(tmp_path / "whole.pdf", [["Seite eins"] * 20, ["Seite zwei"] * 20])
    data = whole.read_bytes()
    src = src_dir / "cut.pdf"
    src.write_bytes(data[: int(len(data) * 0.8)])
    with pytest.raises(OcrInputError, match="truncated"):
        run(archived(src), PDF, tmp_path / "out")


def test_not_a_pdf_is_an_input_error(src_dir: Path, tmp_path: Path) -> None:
    """Garbage labelled application/pdf: OcrInputError, not a retryable failure."""
    src = src_dir / "fake.pdf"
    src.write_bytes(b"this is not a PDF at all\n" * 100)
    with pytest.raises(OcrInputError, match="PDF"):
        run(archived(src), PDF, tmp_path / "out")


# -- images --------------------------------------------------------------------------------
def test_multipage_tiff_one_page_per_frame(src_dir: Path, tmp_path: Path) -> None:
    """A 3-frame TIFF becomes a 3-page searchable PDF with each frame's words."""
    src = archived(scans.multipage_tiff(src_dir / "scan.tiff", PAGES, size=scans.A6))
    before = fingerprint(src)
    res = run(src, "image/tiff", tmp_path / "out")
    assert res.page_count == 3
    assert "Wasser" in res.pages[0] and "Köln" in res.pages[1] and "Meister" in res.pages[2]
    assert len(pdf_text(tmp_path / "out" / SEARCHABLE_PDF)) == 3
    assert fingerprint(src) == before


@pytest.mark.parametrize(
    ("fmt", "mime", "dpi"),
    [("JPEG", "image/jpeg", None), ("JPEG", "image/jpeg", 300), ("PNG", "image/png", 300)],
)
def test_single_images(src_dir: Path, tmp_path: Path, fmt: str, mime: str, dpi: int | None) -> None:
    """A JPEG (with or without resolution metadata) or PNG: one page, its words, a
    searchable PDF at the scan's size and a thumbnail."""
    src = archived(
        scans.single_image(src_dir / f"scan.{fmt.lower()}", PAGES[1], fmt, size=scans.A6, dpi=dpi)
    )
    res = run(src, mime, tmp_path / "out")
    assert res.page_count == 1 and {"Zweite", "Grüße", "Köln"} <= words(res.pages[0])
    doc = pypdfium2.PdfDocument(str(tmp_path / "out" / SEARCHABLE_PDF))
    try:
        # image_dpi (300) applies without metadata: A6 is 298 x 420 pt.
        assert doc[0].get_width() == pytest.approx(1240 / 300 * 72, abs=1)
    finally:
        doc.close()
    assert (tmp_path / "out" / THUMBNAIL).is_file()


def test_png_with_alpha_channel_is_flattened(src_dir: Path, tmp_path: Path) -> None:
    """An RGBA PNG (img2pdf refuses alpha) is flattened onto white and OCRed."""
    img = scans.page_image(PAGES[0], scans.A6).convert("RGBA")
    src = src_dir / "alpha.png"
    img.save(src, "PNG", dpi=(300, 300))
    res = run(archived(src), "image/png", tmp_path / "out")
    assert {"Rechnung", "Wasser"} <= words(res.pages[0])


def test_unreadable_image_is_an_input_error(src_dir: Path, tmp_path: Path) -> None:
    """Bytes that are no image, labelled image/png: OcrInputError."""
    src = src_dir / "broken.png"
    src.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    with pytest.raises(OcrInputError, match="image"):
        run(archived(src), "image/png", tmp_path / "out")


def test_unsupported_type_is_an_input_error(src_dir: Path, tmp_path: Path) -> None:
    """A MIME type ingestd does not OCR: OcrInputError naming it."""
    src = archived(scans.text_pdf(src_dir / "doc.pdf", [["x"]]))
    with pytest.raises(OcrInputError, match="image/gif"):
        run(src, "image/gif", tmp_path / "out")


# -- configuration -----------------------------------------------------------------------
def test_missing_language_pack_is_a_config_error(src_dir: Path, tmp_path: Path) -> None:
    """languages=("xyz",): OcrConfigError naming the apt package, before any OCR runs."""
    src = archived(scans.image_pdf(src_dir / "scan.pdf", PAGES[:1], size=scans.A6))
    with pytest.raises(OcrConfigError, match="tesseract-ocr-xyz"):
        run(src, PDF, tmp_path / "out", languages=("xyz",))


def test_missing_osd_pack_is_a_config_error_when_rotating(
    src_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without tesseract-ocr-osd, rotate_pages=True is an OcrConfigError naming that package
    (tesseract pointed at a tessdata dir holding only deu and eng)."""
    heading = programs.run(["tesseract", "--list-langs"], timeout=30).stdout.splitlines()[0]
    installed = Path(heading.split('"')[1])  # List of available languages in "DIR" (3):
    tessdata = tmp_path / "tessdata"
    tessdata.mkdir()
    for lang in ("deu", "eng"):
        (tessdata / f"{lang}.traineddata").symlink_to(installed / f"{lang}.traineddata")
    monkeypatch.setenv("TESSDATA_PREFIX", str(tessdata))
    tesseract_info.cache_clear()
    try:
        src = archived(scans.image_pdf(src_dir / "scan.pdf", PAGES[:1], size=scans.A6))
        with pytest.raises(OcrConfigError, match="tesseract-ocr-osd"):
            run(src, PDF, tmp_path / "out", rotate_pages=True)
        assert available_languages() == {"deu", "eng"}
    finally:
        monkeypatch.undo()
        tesseract_info.cache_clear()


def test_available_languages_lists_installed_packs() -> None:
    """available_languages() has deu, eng and osd (the packs the Makefile installs)."""
    assert {"deu", "eng", "osd"} <= available_languages()


def test_output_next_to_the_source_is_refused(src_dir: Path) -> None:
    """out_dir == the source's directory: OcrConfigError, nothing written there."""
    src = archived(scans.image_pdf(src_dir / "scan.pdf", PAGES[:1], size=scans.A6))
    with pytest.raises(OcrConfigError, match="source's directory"):
        run(src, PDF, src_dir)
    assert os.listdir(src_dir) == ["scan.pdf"]


# -- timeouts and processes ----------------------------------------------------------------
def test_timeout_kills_ocrmypdf_and_leaves_nothing(src_dir: Path, tmp_path: Path) -> None:
    """A run past OcrOptions.timeout: OcrTimeout, no process of it left, no temp files."""
    # Four full A4 letter pages: ~6 s of OCR here, far past the limit on any machine.
    src = archived(scans.image_pdf(src_dir / "scan.pdf", scans.letter_pages(4)))
    out = tmp_path / "out"
    with pytest.raises(OcrTimeout, match=r"1\.5 s"):
        run(src, PDF, out, timeout=1.5)
    assert processes_mentioning(str(tmp_path)) == []
    assert os.listdir(out) == []


def test_program_timeout_kills_the_whole_process_group() -> None:
    """programs.run: at the deadline the program and its background children die."""
    with pytest.raises(programs.ProgramTimeout, match=r"within 0\.5 s"):
        programs.run(
            ["sh", "-c", "sleep 987.25 & sleep 987.25 & wait"], timeout=0.5, kill_grace=0.5
        )
    assert sleepers("987.25") == []


def test_program_result_keeps_a_bounded_tail(tmp_path: Path) -> None:
    """programs.run returns the exit code and only the last tail_bytes of each stream."""
    res = programs.run(
        [
            sys.executable,
            "-c",
            "import sys; print('x' * 100000); print('end', file=sys.stderr); sys.exit(3)",
        ],
        timeout=30,
        tail_bytes=1000,
        env={"EXTRA": "1"},
    )
    assert res.returncode == 3 and not res.ok
    assert res.stdout.startswith("[...]") and len(res.stdout) <= 1006
    assert res.stderr == "end\n"


def test_program_env_overrides_and_missing_program() -> None:
    """env adds and removes variables; a missing executable is ProgramNotFound."""
    res = programs.run(
        ["sh", "-c", 'echo "$A/${HOME:-unset}"'], timeout=10, env={"A": "1", "HOME": None}
    )
    assert res.stdout == "1/unset\n"
    with pytest.raises(programs.ProgramNotFound, match="no-such-program"):
        programs.run(["no-such-program-ingestd"], timeout=10)


def test_program_dies_with_its_caller() -> None:
    """A SIGKILLed caller (the worker's timeout kill of a job child) takes the program
    with it, though the program runs in a session of its own."""
    code = "from worker import programs; programs.run(['sleep', '876.5'], timeout=60)"
    caller = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 20
        while not sleepers("876.5"):
            assert time.monotonic() < deadline, "the program never started"
            time.sleep(0.05)
    finally:
        caller.kill()
        caller.wait()
    deadline = time.monotonic() + 30  # bounds the test only; the kernel kills it at once
    while sleepers("876.5"):
        assert time.monotonic() < deadline, "the program outlived its caller"
        time.sleep(0.05)
