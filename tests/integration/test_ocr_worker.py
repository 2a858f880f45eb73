"""The tesseract engine through real `ingestd worker` processes: warm engines reused job
after job, two one-page scans on both cores at once, born-digital files without OCR,
hostile pages ending in attention while the worker serves the next job."""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from PIL import Image

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from tests.conftest import Env, run_cli
from tests.fixtures.queue import WorkerProc
from tests.fixtures.scans import image_pdf, text_pdf
from worker.analysis.ocr.inspection import page_images

WORKER = {"poll_interval": 0.1, "lease_seconds": 30, "retry_base": 0.05, "max_retries": 3}
ANALYSIS = {"thumbnail_width": 200, "engine": "tesseract"}
LETTER = [
    "Stadtwerke Musterstadt GmbH",
    "Musterstadt, den 14.03.2026",
    "Rechnung Nr. 2026-0042",
    "Wasser, Abwasser und Straßenreinigung",
]


def ingest(env: Env, db: Database, path: Path) -> int:
    res = make_intake(env.config, db).ingest(IntakeItem(path=path, tenant="acme"))
    assert res.outcome is Outcome.ingested and res.document_id is not None
    return res.document_id


def drain(env: Env, name: str = "w-ocr") -> WorkerProc:
    """`ingestd worker --drain` as the unit runs it (its job children, its lanes)."""
    w = WorkerProc(env.config_path, env.root / f"{name}.log", "--worker-id", name, "--drain")
    assert w.wait(timeout=600) == 0, w.log_path.read_text()[-3000:]
    return w


def doc(db: Database, doc_id: int) -> dict[str, Any]:
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT d.processing_status, d.attention_reason, d.issued_date, d.archive_path,"
            " c.pages, c.page_count, c.searchable_pdf, c.engine FROM documents d"
            " LEFT JOIN document_content c ON c.document_id = d.id WHERE d.id = %(id)s",
            {"id": doc_id},
        )
    return dict(rows[0])


def engine_loads(w: WorkerProc, languages: str = "deu+eng") -> list[dict[str, Any]]:
    return [e for e in w.events("ocr.engine_loaded") if e["languages"] == languages]


def sha(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def page(n: int) -> list[str]:
    return [*LETTER, f"Kundennummer {4711 + n}"]


def test_warm_engine_loads_its_models_once_per_child_across_jobs(
    make_env: Any, db: Database, tenant: str
) -> None:
    """Four scans through one lane: the child's engine loads deu+eng once, and every
    later page of every later job reuses it (a load per page was the old cost)."""
    env: Env = make_env(worker={**WORKER, "concurrency": 1}, analysis=ANALYSIS)
    ids = [
        ingest(env, db, image_pdf(env.root / "in" / f"scan{i}.pdf", [page(i)])) for i in range(3)
    ]
    ids.append(ingest(env, db, image_pdf(env.root / "in" / "two.pdf", [page(7), page(8)])))
    w = drain(env)
    for i in ids:
        assert doc(db, i)["processing_status"] == "done", doc(db, i)
    assert "Kundennummer 4719" in doc(db, ids[3])["pages"][1]
    ocr_lanes = [e for e in w.events("worker.ready") if not e["serves"]["short"]]
    assert len(ocr_lanes) == 1  # one OCR lane, one job child for all four (plus the short lane)
    assert w.events("worker.child_started") == []
    loads = engine_loads(w)
    assert len(loads) == 1, loads
    assert {e["document_id"] for e in w.events("job.done")} >= set(ids)


def test_two_one_page_scans_queued_together_use_both_cores(
    make_env: Any, db: Database, tenant: str
) -> None:
    """worker.concurrency 2, two one-page scans queued together: their pages are read at
    the same time, in two job children, each holding its own page slot."""
    env: Env = make_env(
        worker={**WORKER, "concurrency": 2}, analysis=ANALYSIS, log={"level": "debug"}
    )
    lines = [f"Position {k}: Wasser und Abwasser im Quartal" for k in range(20)]
    scans = [image_pdf(env.root / "in" / f"s{i}.pdf", [[*page(i), *lines]]) for i in range(2)]
    ids = [ingest(env, db, scan) for scan in scans]
    w = drain(env)
    assert [doc(db, i)["processing_status"] for i in ids] == ["done", "done"]
    reads = w.events("ocr.page_read")
    assert len(reads) == 2, reads
    first, second = sorted(reads, key=lambda e: e["began"])
    assert second["began"] < first["ended"], reads  # both pages at once
    assert first["pid"] != second["pid"] and first["slot"] != second["slot"]
    assert len(engine_loads(w)) == 2  # one per job child


def test_born_digital_pdf_is_analysed_without_ocr(make_env: Any, db: Database, tenant: str) -> None:
    """A PDF with a text layer: no engine, no page rendered; its text per page, its
    date and search work as for a scan; the derived PDF is the original's bytes."""
    env: Env = make_env(worker=WORKER, analysis=ANALYSIS, log={"level": "debug"})
    src = text_pdf(env.root / "in" / "Brief.pdf", [page(1), ["Zweite Seite", "Grüße aus Köln"]])
    original = sha(src)
    doc_id = ingest(env, db, src)
    w = drain(env)
    row = doc(db, doc_id)
    assert row["processing_status"] == "done", row
    assert row["page_count"] == 2 and row["pages"][1] == "Zweite Seite\nGrüße aus Köln"
    assert "Kundennummer 4712" in row["pages"][0]
    assert str(row["issued_date"]) == "2026-03-14"
    assert w.events("ocr.engine_loaded") == [] and w.events("ocr.page_read") == []
    derived = env.config.paths.derived_dir / row["searchable_pdf"]
    assert sha(derived) == original
    hit = run_cli(env, "search", "--tenant", "acme", "--json", "Kundennummer")
    assert [r["id"] for r in json.loads(hit.stdout)] == [doc_id]


def test_text_layer_lies_over_the_original_page_images_untouched(
    make_env: Any, db: Database, tenant: str
) -> None:
    """The searchable PDF keeps the scan's image stream byte for byte and adds the words
    as text a viewer finds where they are printed."""
    env: Env = make_env(worker=WORKER, analysis=ANALYSIS)
    src = image_pdf(env.root / "in" / "scan.pdf", [page(3)])
    doc_id = ingest(env, db, src)
    drain(env)
    row = doc(db, doc_id)
    out = env.config.paths.derived_dir / row["searchable_pdf"]
    archived = env.config.paths.archive_dir / row["archive_path"]
    with pikepdf.open(archived) as before, pikepdf.open(out) as after:
        images = page_images(before.pages[0])
        (name,) = list(images)
        raw_before = images[name].read_raw_bytes()
        raw_after = page_images(after.pages[0])[name].read_raw_bytes()
    assert raw_before == raw_after
    import pypdfium2

    pdf = pypdfium2.PdfDocument(str(out))
    try:
        text = pdf[0].get_textpage().get_text_range()
    finally:
        pdf.close()
    assert "Straßenreinigung" in text and "Kundennummer" in text


# -- hostile pages -------------------------------------------------------------------------
def _image_bomb_pdf(path: Path, side: int = 40_000) -> Path:
    """An A4 page holding a 40,000 x 40,000 pixel 1-bit image: a few hundred kilobytes of
    Flate that decode to 200 MB (1.6 gigapixels for a renderer)."""
    packer = zlib.compressobj(9)
    row = bytes(side // 8)
    chunks = [packer.compress(row * 1000) for _ in range(side // 1000)]
    data = b"".join(chunks) + packer.flush()
    pdf = pikepdf.new()
    image = pdf.make_stream(
        data,
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Image,
        Width=side,
        Height=side,
        ColorSpace=pikepdf.Name.DeviceGray,
        BitsPerComponent=1,
        Filter=pikepdf.Name.FlateDecode,
    )
    page = pdf.add_blank_page(page_size=(595, 842))
    page.obj.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(Im0=image))
    page.contents_add(pdf.make_stream(b"q 595 0 0 842 0 0 cm /Im0 Do Q"))
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.save(path)
    return path


def _image_bomb_png(path: Path, side: int = 30_000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("1", (side, side), 1).save(path, "PNG")
    return path


def test_hostile_pages_end_in_attention_and_the_worker_serves_the_next_job(
    make_env: Any, db: Database, tenant: str
) -> None:
    """An image-bomb page in a PDF and as a PNG, a page over analysis.page_timeout:
    each document needs attention with the reason, none is retried, and a normal scan
    queued behind them is analysed by the same worker."""
    env: Env = make_env(worker=WORKER, analysis=ANALYSIS)
    bomb = ingest(env, db, _image_bomb_pdf(env.root / "in" / "bomb.pdf"))
    png = ingest(env, db, _image_bomb_png(env.root / "in" / "bomb.png"))
    normal = ingest(env, db, image_pdf(env.root / "in" / "ok.pdf", [page(5)]))
    drain(env)
    row = doc(db, bomb)
    assert row["processing_status"] == "attention", row
    assert "page 1 holds an image of 40,000 x 40,000 pixels" in row["attention_reason"]
    assert "analysis.max_page_megapixels (300 megapixels)" in row["attention_reason"]
    row = doc(db, png)
    assert row["processing_status"] == "attention", row
    assert "the image has 900 megapixels, too many to decode safely" in row["attention_reason"]
    assert doc(db, normal)["processing_status"] == "done"


def test_a_page_over_the_page_timeout_needs_attention(
    make_env: Any, db: Database, tenant: str
) -> None:
    """analysis.page_timeout bounds each page: a page tesseract cannot finish within it
    ends the document in attention naming the limit (not retried); the next job runs."""
    env: Env = make_env(worker=WORKER, analysis={**ANALYSIS, "page_timeout": 0.01})
    slow = ingest(env, db, image_pdf(env.root / "in" / "slow.pdf", [page(6) * 6]))
    drain(env)
    row = doc(db, slow)
    assert row["processing_status"] == "attention", row
    assert "page 1: OCR took longer than analysis.page_timeout (0.01 s)" in row["attention_reason"]


@pytest.mark.parametrize("engine", ["ocrmypdf"])
def test_ocrmypdf_stays_selectable_per_tenant(
    make_env: Any, db: Database, tenant: str, engine: str
) -> None:
    """analysis.tenant_engines: a tenant on ocrmypdf gets its engine's output."""
    env: Env = make_env(worker=WORKER, analysis={**ANALYSIS, "tenant_engines": {"acme": engine}})
    doc_id = ingest(env, db, image_pdf(env.root / "in" / "scan.pdf", [page(9)]))
    drain(env)
    row = doc(db, doc_id)
    assert row["processing_status"] == "done", row
    assert row["engine"].startswith("ocrmypdf 17.")
    assert "Kundennummer 4720" in row["pages"][0]
