"""Reading batch pages (worker/split/scan.py): real zxing-cpp, pikepdf, pdfium and Pillow on
generated scans (ingestd/demo/batches.py): JPEG pages with noise, dust and skew, A6 where
the size does not matter (fast), A4 where it does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import img2pdf  # type: ignore[import-untyped]
import pikepdf
import pytest

from ingestd.config.split import SplitPolicy, Symbology
from ingestd.demo.batches import (
    A4,
    A6,
    TONER,
    WEAK_INK,
    Container,
    Kind,
    Look,
    PrintedCode,
    Side,
    born_digital_pdf,
    letter_lines,
    write_pdf,
    write_tiff,
)
from worker.split import pageimages
from worker.split.marks import Code, PageScan
from worker.split.pageimages import BatchUnreadable, Source
from worker.split.scan import page_count, scan_image, scan_pages

REPO = Path(__file__).resolve().parents[2]
ALL = tuple(Symbology)
LOOK = Look(size=A6)
# The policy's default: a side with less ink than this (percent) is blank.
BLANK = SplitPolicy().blank_threshold
C39, C128, QR, DM = Symbology.code39, Symbology.code128, Symbology.qr, Symbology.datamatrix


def code(
    symbology: Symbology,
    text: str,
    module: int = 4,
    *,
    at: tuple[float, float] = (0.5, 0.55),
    ink: int = TONER,
    turn: int = 0,
) -> PrintedCode:
    return PrintedCode(symbology, text, module, ink=ink, at=at, turn=turn)


def sheet(
    *codes: PrintedCode, lines: int = 0, skew: float = 0.0, upside_down: bool = False
) -> Side:
    text = letter_lines(7)[:lines] if lines else ()
    kind = Kind.separator if codes else Kind.letter
    return Side(kind, text, codes, skew=skew, upside_down=upside_down)


# One A6 batch of every case, scanned once for the tests below.
PAGES: dict[str, Side] = {
    "code39": sheet(code(C39, "PATCHT")),
    "code128": sheet(code(C128, "ASN00042", 3)),
    "qr": sheet(code(QR, "TAG:Rechnung")),
    "datamatrix": sheet(code(DM, "SEP-0042")),
    # Small: 2 px narrow bars (0.17 mm) and 3 px modules (0.25 mm) at 300 dpi.
    "small code39": sheet(code(C39, "PATCHT", 2)),
    "small code128": sheet(code(C128, "ASN00042", 2), lines=3),
    "small qr": sheet(code(QR, "TAG:Rechnung", 3)),
    "small datamatrix": sheet(code(DM, "SEP-0042", 3)),
    # Weak: light grey ink (80 and 44 levels below the paper).
    "weak code39": sheet(code(C39, "PATCHT", 3, ink=WEAK_INK)),
    "faint code39": sheet(code(C39, "PATCHT", 3, ink=200)),
    "faint small datamatrix": sheet(code(DM, "SEP-0042", 3, ink=200)),
    "weak small qr": sheet(code(QR, "TAG:Rechnung", 3, ink=WEAK_INK)),
    "skewed +3": sheet(code(C128, "ASN00042", 3), lines=4, skew=3.0),
    "skewed -3": sheet(code(DM, "SEP-0042", 3), lines=4, skew=-3.0),
    "upside down code39": sheet(code(C39, "PATCHT", 3), lines=4, upside_down=True, skew=1.5),
    "upside down datamatrix": sheet(code(DM, "SEP-0042", 3), upside_down=True),
    "upside down qr": sheet(code(QR, "TAG:Rechnung", 3), upside_down=True, skew=-2.0),
    "sideways code128": sheet(code(C128, "ASN00042", 3, turn=90, at=(0.5, 0.6))),
    "large code39": sheet(code(C39, "PATCHT", 8, at=(0.5, 0.5))),
    "large qr": sheet(code(QR, "PATCHT", 16, at=(0.5, 0.5))),
    "two codes": sheet(
        code(C128, "ASN00042", 3, at=(0.7, 0.12)),
        code(QR, "TAG:Rechnung", 4, at=(0.5, 0.8)),
        lines=5,
    ),
    "same code twice": sheet(code(QR, "ASN00007", at=(0.3, 0.3)), code(QR, "ASN00007")),
    "unrelated code": sheet(code(C128, "RE-2024-0042", 3, at=(0.6, 0.85)), lines=8),
    "duplex front blank": Side(Kind.blank, skew=1.0),
    "duplex back separator": sheet(code(C39, "PATCHT", 3), skew=-1.0),
    "blank": Side(Kind.blank, skew=2.0),
    "nearly blank": Side(Kind.blank, skew=-2.5, ghost=True),
    "one line": sheet(lines=1, skew=0.5),
    "letter": Side(Kind.letter, letter_lines(3), skew=-1.0),
}
NAMES = list(PAGES)


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scan") / "cases.pdf"
    return write_pdf(out, list(PAGES.values()), LOOK, seed=16)


@pytest.fixture(scope="module")
def scanned(batch: Path) -> dict[str, PageScan]:
    return {NAMES[s.index]: s for s in scan_pages(batch, ALL)}


def texts(scan: PageScan) -> list[str]:
    return [c.text for c in scan.codes]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("code39", Code(C39, "PATCHT")),
        ("code128", Code(C128, "ASN00042")),
        ("qr", Code(QR, "TAG:Rechnung")),
        ("datamatrix", Code(DM, "SEP-0042")),
    ],
)
def test_each_symbology_is_read_with_its_symbology(
    scanned: dict[str, PageScan], name: str, expected: Code
) -> None:
    """A Code 39, Code 128, QR and DataMatrix code is each read as what it is."""
    assert scanned[name].codes == (expected,)


@pytest.mark.parametrize(
    "name",
    [
        "small code39",
        "small code128",
        "small qr",
        "small datamatrix",
        "weak code39",
        "faint code39",
        "faint small datamatrix",
        "weak small qr",
    ],
)
def test_small_and_weak_codes_are_read(scanned: dict[str, PageScan], name: str) -> None:
    """2 px bars, 3 px modules and light grey ink: the codes the half-size passes cannot
    read are read at full resolution from their region's crop."""
    assert len(scanned[name].codes) == 1, name


@pytest.mark.parametrize(
    "name",
    [
        "skewed +3",
        "skewed -3",
        "upside down code39",
        "upside down datamatrix",
        "upside down qr",
        "sideways code128",
    ],
)
def test_skewed_turned_and_upside_down_codes_are_read(
    scanned: dict[str, PageScan], name: str
) -> None:
    """Skew of ±3°, sheets fed upside down and codes printed sideways are read."""
    assert len(scanned[name].codes) == 1, name


def test_large_codes_are_read(scanned: dict[str, PageScan]) -> None:
    """A separator sheet's big code (8 px bars, 16 px QR modules) is read."""
    assert texts(scanned["large code39"]) == ["PATCHT"]
    assert texts(scanned["large qr"]) == ["PATCHT"]


def test_a_page_with_two_codes_reports_both_in_reading_order(scanned: dict[str, PageScan]) -> None:
    """Two codes on one page: both, the upper one first."""
    assert scanned["two codes"].codes == (Code(C128, "ASN00042"), Code(QR, "TAG:Rechnung"))


def test_the_same_code_twice_on_a_page_is_reported_once(scanned: dict[str, PageScan]) -> None:
    """Identical (symbology, text) on one page is one code."""
    assert scanned["same code twice"].codes == (Code(QR, "ASN00007"),)


def test_an_unrelated_code_is_reported_with_its_own_text(scanned: dict[str, PageScan]) -> None:
    """An invoice number in Code 128 on a letter is reported as it reads (planning, not
    reading, decides that it does not split)."""
    assert scanned["unrelated code"].codes == (Code(C128, "RE-2024-0042"),)


def test_a_code_on_the_back_side_is_reported_on_the_back_page(scanned: dict[str, PageScan]) -> None:
    """Duplex: the back side's separator belongs to its own page; the blank front reads
    blank."""
    assert scanned["duplex back separator"].codes == (Code(C39, "PATCHT"),)
    assert scanned["duplex front blank"].codes == ()
    assert scanned["duplex front blank"].ink < BLANK


def test_pages_without_codes_report_none(scanned: dict[str, PageScan]) -> None:
    """Blank sides, dust, show-through and letter text are never taken for a code."""
    for name in ("blank", "nearly blank", "one line", "letter", "duplex front blank"):
        assert scanned[name].codes == (), name


def test_blank_pages_measure_far_below_the_threshold_and_text_far_above(
    scanned: dict[str, PageScan],
) -> None:
    """Noise, dust and show-through stay under a quarter of the blank threshold (on A6,
    where a speck is four times the share of an A4 page's); a letter is far above it."""
    for name in ("blank", "nearly blank", "duplex front blank"):
        assert scanned[name].ink < BLANK / 4, (name, scanned[name].ink)
    assert scanned["one line"].ink > BLANK, scanned["one line"].ink
    assert scanned["letter"].ink > 10 * BLANK, scanned["letter"].ink


def test_ink_is_calibrated_on_a4(tmp_path: Path) -> None:
    """On A4 a blank sheet measures < 0.02 %, one line of 11 pt text > 0.1 %, a letter
    > 1 %: the calibration behind the recommended blank_threshold of 0.1."""
    sides = [
        Side(Kind.blank, skew=2.5, ghost=True),
        Side(Kind.letter, letter_lines(4)[3:4], skew=-1.5),
        Side(Kind.letter, letter_lines(4), skew=1.0),
    ]
    blank, line, letter = scan_pages(write_pdf(tmp_path / "a4.pdf", sides, Look(size=A4)), ALL)
    assert blank.ink < 0.02
    assert line.ink > 0.1
    assert letter.ink > 1.0


def test_only_the_requested_symbologies_are_reported(batch: Path) -> None:
    """Symbologies the policy does not name are not read."""
    only_39 = {NAMES[s.index]: s for s in scan_pages(batch, [C39])}
    assert texts(only_39["code39"]) == ["PATCHT"]
    assert only_39["qr"].codes == ()
    assert only_39["two codes"].codes == ()


def test_scanned_pages_are_taken_from_the_pdf_not_rendered(batch: Path) -> None:
    """A scanner's PDF page is its JPEG, decoded by Pillow: pdfium never renders it."""
    sources = {p.source for p in pageimages.page_images(batch)}
    assert sources == {Source.jpeg}


def test_a_page_with_inherited_resources_is_still_its_scan_image(tmp_path: Path) -> None:
    """Resources on the page tree instead of the page (PDF allows it): still the JPEG."""
    path = write_pdf(tmp_path / "one.pdf", [sheet(code(C39, "PATCHT", 3))], LOOK)
    moved = tmp_path / "inherited.pdf"
    with pikepdf.open(path) as pdf:
        pdf.Root.Pages.Resources = pdf.pages[0].obj.Resources
        del pdf.pages[0].obj["/Resources"]
        pdf.save(moved)
    assert [p.source for p in pageimages.page_images(moved)] == [Source.jpeg]
    assert [texts(s) for s in scan_pages(moved, ALL)] == [["PATCHT"]]


def test_a_page_is_decoded_at_full_size_only_when_a_region_needs_it(batch: Path) -> None:
    """The tiering: a blank page and a big code are read at half size alone; a small
    code's region makes the full-size picture for its crop."""
    made = {}
    for page in pageimages.page_images(batch):
        scan_image(page, ALL)
        made[NAMES[page.index]] = page.has_full
    assert not made["blank"]
    assert not made["large code39"]
    assert made["small code39"]


def test_scan_pages_is_lazy(batch: Path) -> None:
    """Pages are read one by one as the caller asks: the first comes before the rest."""
    pages = scan_pages(batch, ALL)
    first = next(pages)
    assert first.index == 0 and texts(first) == ["PATCHT"]


def _three() -> list[Side]:
    return [
        sheet(code(C39, "PATCHT", 3)),
        Side(Kind.letter, letter_lines(5)[:8], (code(DM, "TAG:Rechnung", 4, at=(0.7, 0.85)),)),
        Side(Kind.blank, skew=1.5),
    ]


@pytest.mark.parametrize("container", [Container.tiff_jpeg, Container.tiff_g4])
def test_tiff_batches_are_read_frame_by_frame(tmp_path: Path, container: Container) -> None:
    """A multi-page TIFF (JPEG or Group 4 frames): every frame in order, codes and ink."""
    path = write_tiff(tmp_path / "batch.tif", _three(), LOOK, container=container)
    assert page_count(path) == 3
    first, second, third = scan_pages(path, ALL)
    assert [first.index, second.index, third.index] == [0, 1, 2]
    assert first.codes == (Code(C39, "PATCHT"),)
    assert second.codes == (Code(DM, "TAG:Rechnung"),)
    assert third.codes == () and third.ink < BLANK < second.ink


def test_a_pdf_of_group4_images_is_read_through_pikepdf(tmp_path: Path) -> None:
    """CCITT (not JPEG) page images are decoded by pikepdf, still not rendered."""
    tif = write_tiff(tmp_path / "g4.tif", _three(), LOOK, container=Container.tiff_g4)
    pdf = tmp_path / "g4.pdf"
    pdf.write_bytes(img2pdf.convert(str(tif)))
    with pikepdf.open(pdf) as doc:
        (image,) = doc.pages[0].get_images().values()
        assert "/CCITTFaxDecode" in str(image.get("/Filter"))
    assert {p.source for p in pageimages.page_images(pdf)} == {Source.image}
    first, second, third = scan_pages(pdf, ALL)
    assert texts(first) == ["PATCHT"] and texts(second) == ["TAG:Rechnung"]
    assert third.ink < BLANK


def test_born_digital_pages_are_rendered(tmp_path: Path) -> None:
    """A page of vector drawing and text (no scan image) is rendered by pdfium and read."""
    path = born_digital_pdf(
        tmp_path / "office.pdf",
        [
            [PrintedCode(C39, "PATCHT", 3, at=(0.5, 0.4))],
            [PrintedCode(QR, "ASN00042", 4, at=(0.3, 0.3)), PrintedCode(DM, "TAG:x", 3)],
        ],
    )
    assert {p.source for p in pageimages.page_images(path)} == {Source.render}
    first, second = scan_pages(path, ALL)
    assert first.codes == (Code(C39, "PATCHT"),)
    assert sorted(texts(second)) == ["ASN00042", "TAG:x"]


def test_page_count_counts_pdf_pages_and_tiff_frames(batch: Path, tmp_path: Path) -> None:
    """page_count agrees with what scan_pages yields, for PDF and TIFF."""
    assert page_count(batch) == len(PAGES)
    tif = write_tiff(tmp_path / "t.tif", _three(), LOOK)
    assert page_count(tif) == 3


def test_a_file_that_is_no_batch_is_unreadable(tmp_path: Path) -> None:
    """Neither PDF nor TIFF by its first bytes: BatchUnreadable, which needs attention."""
    junk = tmp_path / "x.png"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    with pytest.raises(BatchUnreadable) as info:
        list(scan_pages(junk, ALL))
    assert info.value.attention and not info.value.transient


def test_an_encrypted_batch_is_unreadable(batch: Path, tmp_path: Path) -> None:
    """A password-protected PDF: BatchUnreadable naming the encryption."""
    locked = tmp_path / "locked.pdf"
    with pikepdf.open(batch) as pdf:
        pdf.save(locked, encryption=pikepdf.Encryption(user="geheim", owner="x"))
    with pytest.raises(BatchUnreadable, match="encrypted"):
        page_count(locked)


# Scans a generated A4 batch in a fresh interpreter and prints its peak RSS (KiB).
_PEAK = """
import json, resource, sys
from pathlib import Path
from ingestd.config.split import Symbology
from worker.split.scan import scan_pages
n = sum(1 for _ in scan_pages(Path(sys.argv[1]), list(Symbology)))
print(json.dumps([n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))
"""


def _peak(path: Path) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=True,
    )
    pages, kib = json.loads(out.stdout)
    return int(pages), int(kib)


def test_memory_does_not_grow_with_the_page_count(tmp_path: Path) -> None:
    """Peak memory for 30 A4 pages is that of 5: one page's pictures at a time (each page
    here makes its 8.7 MB full-size picture; keeping them would add ~270 MB)."""
    clean = Look(size=A4, noise=0)
    pages = [
        sheet(code(C39, f"P{i:03d}", 3, at=(0.3, 0.2)), code(QR, f"Q{i}", 3)) for i in range(30)
    ]
    few, many = tmp_path / "few.pdf", tmp_path / "many.pdf"
    write_pdf(few, pages[:5], clean)
    write_pdf(many, pages, clean)
    n_few, peak_few = _peak(few)
    n_many, peak_many = _peak(many)
    assert (n_few, n_many) == (5, 30)
    assert peak_many - peak_few < 40 * 1024, (peak_few, peak_many)


def test_codes_keep_their_text_exactly(tmp_path: Path) -> None:
    """Text as encoded (case, digits, punctuation), for separators, ASNs and tags."""
    values = ["SEP-0001", "ASN00042", "TAG:Steuer 2024", "Ab+c/9%"]
    sides = [sheet(code(QR, v, 4)) for v in values[:3]] + [sheet(code(C128, values[3], 3))]
    got = [texts(s) for s in scan_pages(write_pdf(tmp_path / "t.pdf", sides, LOOK), ALL)]
    assert got == [[v] for v in values]
