"""split-batch end to end: generated scans with real barcodes (zxing-cpp), real pikepdf,
real Postgres and archive; the worker loop with its job child for the full path, the job's
handler and applier in this process for the many policy variants."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pikepdf
import pytest

from ingestd.archive.audit_verify import verify_audit
from ingestd.archive.backends import make_archive
from ingestd.archive.s3 import S3Archive
from ingestd.config.split import SplitPolicy, Symbology
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.demo.batches import (
    A6,
    Container,
    Kind,
    Look,
    PrintedCode,
    Side,
    letter_lines,
    write_pdf,
    write_tiff,
)
from ingestd.errors import IngestdError
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.log import get_logger
from ingestd.queue.claims import Queue
from tests.conftest import Env, run_cli
from tests.fixtures.drain import drain
from tests.fixtures.s3 import S3Endpoint, archive_section
from tests.fixtures.sql import one, rows
from worker.jobs import JobContext
from worker.jobs.split import apply_split, split_batch_job
from worker.split.run import split_batch

WORKER = {"poll_interval": 0.1, "lease_seconds": 30, "retry_base": 0.05, "max_retries": 3}
ANALYSIS = {"jobs": 1, "thumbnail_width": 200}
LOOK = Look(size=A6)
SEP = PrintedCode(Symbology.code39, "PATCHT", module=4, at=(0.5, 0.4))


def letter(n: int, page: int = 1, *codes: PrintedCode) -> Side:
    return Side(Kind.letter, lines=letter_lines(n, page)[:6], codes=codes)


def separator(*extra: PrintedCode, code: PrintedCode = SEP) -> Side:
    return Side(Kind.separator, codes=(code, *extra))


def code(text: str, symbology: Symbology = Symbology.code128, **kw: Any) -> PrintedCode:
    return PrintedCode(symbology, text, **{"module": 4, "at": (0.5, 0.8), **kw})


def batch_pdf(path: Path, sides: list[Side]) -> Path:
    return write_pdf(path, sides, LOOK, seed=len(sides))


def _ingest(env: Env, db: Database, path: Path, **kw: Any) -> int:
    policy = env.config.split_policy("acme", None)
    item = IntakeItem(path=path, tenant="acme", split=policy, **kw)
    res = make_intake(env.config, db).ingest(item)
    assert res.outcome is Outcome.ingested and res.document_id is not None, res
    return res.document_id


def _split_here(env: Env, db: Database) -> str | None:
    """Claim the queued split-batch job and run its handler and applier in this process;
    the reason when it needs attention, else None."""
    queue = Queue(db, env.config.worker, "t-split", env.config.deliveries)
    with db.transaction() as tx:  # children's analyses (OCR) are not these tests' business
        tx.raw(
            "UPDATE processing_jobs SET next_attempt_at = now() + interval '1 day' "
            "WHERE status = 'queued' AND kind <> 'split-batch'"
        )
    job = queue.claim()
    assert job is not None and job.kind == "split-batch", job
    ctx = JobContext(job, env.config, db, get_logger())
    try:
        split_batch_job(ctx)
    except IngestdError as exc:
        if not exc.attention:  # only what the job child records as needing attention
            raise
        queue.fail(job, exc.message, permanent=True, attention=True)
        return exc.message
    assert queue.done(job, apply_split, ctx.data)
    return None


def _drain(env: Env, db: Database) -> None:
    drain(env, db, "w-split")


def _parts(db: Database, parent: int) -> list[dict[str, Any]]:
    return rows(
        db,
        "SELECT p.position, p.first_page, p.last_page, d.id, d.sha256, d.archive_path, "
        "d.title, d.asn, d.processing_status, "
        "coalesce((SELECT array_agg(g.name || ':' || dt.origin ORDER BY g.name) "
        "FROM document_tags dt JOIN tags g ON g.id = dt.tag_id "
        "WHERE dt.document_id = d.id), '{}') AS tags, "
        "(SELECT count(*) FROM processing_jobs j WHERE j.document_id = d.id "
        " AND j.kind = 'analyze-document') AS analyze_jobs "
        "FROM document_parts p JOIN documents d ON d.id = p.child_id "
        "WHERE p.parent_id = %(p)s ORDER BY p.position",
        {"p": parent},
    )


def _status(db: Database, doc_id: int) -> tuple[str, str | None]:
    row = one(
        db,
        "SELECT processing_status, attention_reason FROM documents WHERE id = %(id)s",
        {"id": doc_id},
    )
    return row["processing_status"], row["attention_reason"]


@pytest.fixture
def split_env(make_env: Any, db: Database, tenant: str) -> Env:
    """Tenant acme with a default split policy: PATCHT, ASN codes, TAG: codes."""
    env: Env = make_env(worker=WORKER, analysis=ANALYSIS)
    text = env.config_path.read_text()
    text += (
        '\n[split.acme]\nasn_prefix = "ASN"\nmax_pages = 6\n'
        '[[split.acme.tag_barcodes]]\npattern = "TAG:(.+)"\ntag = "{1}"\n'
    )
    env.config_path.write_text(text)
    env.reload()
    return env


def test_a_batch_becomes_children_with_their_own_titles_and_the_batch_stays(
    split_env: Env, db: Database, tmp_path: Path
) -> None:
    """Two separators: three children, each archived with its own SHA-256, its page range,
    its own analysis and title; the batch is kept unchanged as their parent, 'split'."""
    sides = [
        letter(12),
        letter(12, 2),
        separator(),
        letter(13),
        separator(),
        letter(14),
        letter(14, 2),
    ]
    path = batch_pdf(tmp_path / "in" / "Scan_0001.pdf", sides)
    original = hashlib.sha256(path.read_bytes()).hexdigest()
    parent = _ingest(split_env, db, path)
    job = one(db, "SELECT kind FROM processing_jobs WHERE document_id = %(d)s", {"d": parent})
    assert job["kind"] == "split-batch"  # intake queued the split, not an analysis

    _drain(split_env, db)

    assert _status(db, parent) == ("split", None)
    parts = _parts(db, parent)
    assert [(p["first_page"], p["last_page"]) for p in parts] == [(1, 2), (4, 4), (6, 7)]
    assert len({p["sha256"] for p in parts}) == 3
    assert all(p["processing_status"] == "done" and p["analyze_jobs"] == 1 for p in parts)
    titles = [p["title"] for p in parts]
    # Each from its own first page (letters 12, 13 and 14 are from these senders), none
    # the placeholder "Scan_0001 (n/3)" any more.
    assert titles == [
        "Allgemeine Versicherung AG",
        "Finanzamt Musterstadt",
        "Hausverwaltung Lindenhof",
    ], titles
    archive = split_env.config.paths.archive_dir
    for p, pages in zip(parts, (2, 1, 2), strict=True):
        child = archive / p["archive_path"]
        assert hashlib.sha256(child.read_bytes()).hexdigest() == p["sha256"]
        assert oct(child.stat().st_mode & 0o777) == "0o440"
        with pikepdf.open(child) as pdf:
            assert len(pdf.pages) == pages
    # The batch as dropped is archived and recorded exactly as before the split.
    row = one(db, "SELECT archive_path, sha256 FROM documents WHERE id = %(d)s", {"d": parent})
    assert row["sha256"] == original
    assert hashlib.sha256((archive / row["archive_path"]).read_bytes()).hexdigest() == original

    verify = run_cli(split_env, "verify", "--json")
    assert verify.returncode == 0, verify.stdout
    assert json.loads(verify.stdout)["checked"] == 4

    shown = run_cli(split_env, "documents", "show", str(parent))
    assert shown.returncode == 0, shown.stderr
    assert "children:      3" in shown.stdout and "pages 6-7" in shown.stdout
    child_view = run_cli(split_env, "documents", "show", str(parts[1]["id"]))
    assert f"document {parent}, part 2 of 3, page 4" in child_view.stdout
    listing = run_cli(split_env, "documents", "list")
    assert "3 parts" in listing.stdout and f"{parent}#2" in listing.stdout
    again = run_cli(split_env, "documents", "analyze", "--tenant", "acme", str(parent))
    assert again.returncode != 0 and "split into 3 documents" in again.stderr


def test_splitting_the_same_batch_again_gives_byte_identical_children(tmp_path: Path) -> None:
    """Deterministic output: the same batch and policy give the same children's bytes."""
    sides = [letter(1), separator(), letter(2), letter(2, 2), separator(), letter(3)]
    path = batch_pdf(tmp_path / "b.pdf", sides)
    policy = SplitPolicy()
    runs = []
    for n in range(2):
        out = tmp_path / f"out{n}"
        out.mkdir()
        outcome = split_batch(path, policy, out)
        runs.append([hashlib.sha256(c.read_bytes()).hexdigest() for c in outcome.children])
    assert len(runs[0]) == 3 and runs[0] == runs[1]


def test_children_copy_the_page_objects_without_re_encoding(tmp_path: Path) -> None:
    """A child's page image is the batch's image stream, byte for byte."""
    path = batch_pdf(tmp_path / "b.pdf", [letter(1), separator(), letter(2)])
    out = tmp_path / "out"
    out.mkdir()
    children = split_batch(path, SplitPolicy(), out).children

    def image_bytes(pdf_path: Path, page: int) -> bytes:
        with pikepdf.open(pdf_path) as pdf:
            (image,) = pdf.pages[page].get_images().values()
            return bytes(image.read_raw_bytes())

    assert image_bytes(children[0], 0) == image_bytes(path, 0)
    assert image_bytes(children[1], 0) == image_bytes(path, 2)


def test_a_tiff_batch_splits_into_pdf_children(
    split_env: Env, db: Database, tmp_path: Path
) -> None:
    """A multi-page TIFF batch is split too; its children are PDFs."""
    sides = [letter(1), separator(), letter(2), letter(2, 2)]
    parents = [
        _ingest(split_env, db, write_tiff(tmp_path / f"b-{c}.tif", sides, LOOK, container=c))
        for c in (Container.tiff_jpeg, Container.tiff_g4)
    ]
    for _ in parents:
        assert _split_here(split_env, db) is None
    for parent in parents:
        parts = _parts(db, parent)
        assert [(p["first_page"], p["last_page"]) for p in parts] == [(1, 1), (3, 4)]
        child = split_env.config.paths.archive_dir / parts[1]["archive_path"]
        assert child.suffix == ".pdf"
        with pikepdf.open(child) as pdf:
            assert len(pdf.pages) == 2


def test_a_single_image_is_never_a_batch(split_env: Env, db: Database, tmp_path: Path) -> None:
    """A JPEG from a source with a split policy is analysed as one document."""
    from PIL import Image

    path = tmp_path / "photo.jpg"
    Image.new("L", (200, 200), 255).save(path, "JPEG")
    doc = _ingest(split_env, db, path)
    row = one(db, "SELECT kind FROM processing_jobs WHERE document_id = %(d)s", {"d": doc})
    assert row["kind"] == "analyze-document"


def test_a_batch_without_separator_is_analysed_as_one_document(
    split_env: Env, db: Database, tmp_path: Path
) -> None:
    """No separator: no children; the batch itself gets its analysis (and its ASN)."""
    path = batch_pdf(tmp_path / "one.pdf", [letter(1, 1, code("ASN00077")), letter(1, 2)])
    doc = _ingest(split_env, db, path)
    assert _split_here(split_env, db) is None
    assert _parts(db, doc) == []
    row = one(db, "SELECT asn, processing_status FROM documents WHERE id = %(d)s", {"d": doc})
    assert (row["asn"], row["processing_status"]) == (77, "queued")
    kinds = rows(
        db,
        "SELECT kind, status FROM processing_jobs WHERE document_id = %(d)s ORDER BY id",
        {"d": doc},
    )
    assert kinds == [
        {"kind": "split-batch", "status": "done"},
        {"kind": "analyze-document", "status": "queued"},
    ]


def test_max_pages_flags_the_batch_and_split_max_pages_cuts_it(
    split_env: Env, db: Database, tmp_path: Path
) -> None:
    """A child longer than max_pages: attention with the reason, nothing split or lost;
    `documents split --max-pages` then cuts it."""
    sides = [letter(1, p) for p in range(1, 9)] + [separator(), letter(2)]
    path = batch_pdf(tmp_path / "long.pdf", sides)
    parent = _ingest(split_env, db, path)
    reason = _split_here(split_env, db)
    assert reason is not None and "pages 1-8" in reason and "max_pages 6" in reason
    status, why = _status(db, parent)
    assert status == "attention" and "separator sheet may be missing" in str(why)
    assert _parts(db, parent) == []
    listed = run_cli(split_env, "documents", "attention")
    assert "max_pages 6" in listed.stdout

    out = run_cli(
        split_env, "documents", "split", "--tenant", "acme", "--max-pages", "8", str(parent)
    )
    assert out.returncode == 0, out.stderr
    assert _split_here(split_env, db) is None
    assert [(p["first_page"], p["last_page"]) for p in _parts(db, parent)] == [(1, 8), (10, 10)]
    again = run_cli(split_env, "documents", "split", "--tenant", "acme", str(parent))
    assert again.returncode != 0 and "already split into 2" in again.stderr


def test_asn_and_tag_barcodes_set_the_childs_serial_number_and_tags(
    split_env: Env, db: Database, tmp_path: Path
) -> None:
    """ASN00042 numbers its child; TAG:Rechnung tags it (origin barcode); the batch's
    folder tags go to every child."""
    sides = [
        letter(1, 1, code("ASN00042")),
        separator(),
        letter(2, 1, code("TAG:Rechnung", Symbology.qr, module=6)),
    ]
    path = batch_pdf(tmp_path / "tagged.pdf", sides)
    parent = _ingest(split_env, db, path, tags=("Posteingang",))
    assert _split_here(split_env, db) is None
    parts = _parts(db, parent)
    assert [p["asn"] for p in parts] == [42, None]
    assert parts[0]["tags"] == ["Posteingang:intake"]
    assert parts[1]["tags"] == ["Posteingang:intake", "Rechnung:barcode"]


def test_a_duplicate_asn_is_a_clear_refusal_and_nothing_is_lost(
    split_env: Env, db: Database, tmp_path: Path
) -> None:
    """An ASN another document has: the batch needs attention naming ASN and document."""
    first = batch_pdf(tmp_path / "a.pdf", [letter(1, 1, code("ASN5")), separator(), letter(2)])
    second = batch_pdf(tmp_path / "b.pdf", [letter(3), separator(), letter(4, 1, code("ASN5"))])
    _ingest(split_env, db, first)
    assert _split_here(split_env, db) is None
    owner = one(db, "SELECT id FROM documents WHERE asn = 5")["id"]
    parent = _ingest(split_env, db, second)
    reason = _split_here(split_env, db)
    assert reason is not None and f"ASN 5 on page 3 is already document {owner}'s" in reason
    assert _status(db, parent)[0] == "attention"
    row = one(db, "SELECT archive_path FROM documents WHERE id = %(d)s", {"d": parent})
    assert (split_env.config.paths.archive_dir / row["archive_path"]).exists()


def test_a_source_with_split_false_overrides_the_tenant_default(
    make_env: Any, db: Database, tenant: str, tmp_path: Path
) -> None:
    """watch.split = false: that folder's files are single documents; others inherit."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    env: Env = make_env(
        watch=[
            {"path": str(a), "tenant": "acme", "split": False},
            {"path": str(b), "tenant": "acme"},
        ]
    )
    text = env.config_path.read_text() + "\n[split.acme]\nmax_pages = 9\n"
    env.config_path.write_text(text)
    cfg = env.reload()
    off, inherits = cfg.watch
    assert cfg.split_policy("acme", off.split) is None
    policy = cfg.split_policy("acme", inherits.split)
    assert policy is not None and policy.max_pages == 9


CRASH_SIDES = [letter(1), separator(), letter(2), letter(2, 2), separator(), letter(3)]


@pytest.mark.parametrize(
    ("point", "worker_dies"),
    [
        ("split_after_children", False),  # the job's child: children written, nothing archived
        ("split_after_archive", True),  # the worker: a child linked into the archive, no row
        ("split_before_commit", True),  # the worker: every row written, never committed
    ],
)
def test_sigkill_at_each_step_of_a_split_ends_with_the_same_children_once(
    split_env: Env, db: Database, tmp_path: Path, point: str, worker_dies: bool
) -> None:
    """A real worker SIGKILLed at each step of a split, then the job again: exactly the
    children a clean split makes (same bytes), once each; the archive verifies clean."""
    path = batch_pdf(tmp_path / "in" / "crash.pdf", CRASH_SIDES)
    clean = tmp_path / "clean"
    clean.mkdir()
    expected = [
        hashlib.sha256(c.read_bytes()).hexdigest()
        for c in split_batch(path, split_env.config.split["acme"], clean).children
    ]
    parent = _ingest(split_env, db, path)
    # A retry an hour away: the crashed run's drain stops instead of trying again.
    text = split_env.config_path.read_text().replace("retry_base = 0.05", "retry_base = 3600")
    split_env.config_path.write_text(text + "\n[metrics]\nenabled = false\n")
    crashed = run_cli(
        split_env,
        "worker",
        "--drain",
        "--worker-id",
        "crash",
        extra_env={"INGESTD_CRASHPOINT": point},
    )
    if worker_dies:
        assert crashed.returncode == -9, crashed.stderr[-2000:]
        with db.transaction() as tx:
            tx.raw(
                "UPDATE processing_jobs SET lease_expires_at = now() - interval '1 s' "
                "WHERE document_id = %(d)s",
                {"d": parent},
            )
        Queue(db, split_env.config.worker, "rescuer").rescue()
    else:
        assert crashed.returncode == 0, crashed.stderr[-2000:]
    assert _parts(db, parent) == []
    with db.transaction() as tx:
        tx.raw(
            "UPDATE processing_jobs SET next_attempt_at = now() WHERE document_id = %(d)s",
            {"d": parent},
        )

    assert _split_here(split_env, db) is None

    parts = _parts(db, parent)
    assert [p["sha256"] for p in parts] == expected
    count = one(db, "SELECT count(*) AS n FROM documents")["n"]
    assert count == 1 + len(expected)
    verify = run_cli(split_env, "verify", "--json")
    assert verify.returncode == 0, verify.stdout
    assert not (split_env.config.paths.derived_dir / ".split").exists() or not any(
        (split_env.config.paths.derived_dir / ".split").iterdir()
    )


def test_work_files_of_jobs_that_ended_are_swept(
    split_env: Env, db: Database, tmp_path: Path
) -> None:
    """Housekeeping removes a split work directory whose job ended, keeps a live one's."""
    from worker.housekeeping import sweep_split_work
    from worker.jobs.split import work_dir_of

    path = batch_pdf(tmp_path / "b.pdf", [letter(1), separator(), letter(2)])
    parent = _ingest(split_env, db, path)
    job = one(db, "SELECT id FROM processing_jobs WHERE document_id = %(d)s", {"d": parent})
    live = work_dir_of(split_env.config.paths.derived_dir, int(job["id"]))
    gone = work_dir_of(split_env.config.paths.derived_dir, 999_999)
    for d in (live, gone):
        d.mkdir(parents=True)
        (d / "part-0001.pdf").write_bytes(b"%PDF-1.7\n")
    assert sweep_split_work(db, split_env.config, get_logger()) == 1
    assert live.exists() and not gone.exists()


def test_an_unreadable_batch_needs_attention_and_stays_archived(
    split_env: Env, db: Database, tmp_path: Path
) -> None:
    """An encrypted or truncated batch: attention with the reason, the file kept."""
    from tests.fixtures.scans import encrypted_pdf, truncated_pdf

    bad = [
        _ingest(split_env, db, encrypted_pdf(tmp_path / "locked.pdf")),
        _ingest(split_env, db, truncated_pdf(tmp_path / "cut.pdf")),
    ]
    reasons = [_split_here(split_env, db), _split_here(split_env, db)]
    assert "encrypted" in str(reasons[0]), reasons
    assert reasons[1], reasons
    for doc in bad:
        assert _status(db, doc)[0] == "attention"
    verify = run_cli(split_env, "verify")
    assert verify.returncode == 0, verify.stdout


BLANK = Side(Kind.blank)


def _ranges(path: Path, tmp_path: Path, **policy: Any) -> list[tuple[int, int]]:
    out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    plan = split_batch(path, SplitPolicy.model_validate(policy), out).plan
    assert plan.attention is None, plan.attention
    return [(p.first + 1, p.last + 1) for p in plan.parts]


@pytest.mark.parametrize(
    "symbology", [Symbology.code39, Symbology.code128, Symbology.qr, Symbology.datamatrix]
)
def test_separator_sheets_of_each_symbology_split_real_scans(
    tmp_path: Path, symbology: Symbology
) -> None:
    """A PATCHT separator printed as Code 39, Code 128, QR or DataMatrix splits alike;
    a policy reading only other symbologies does not see it."""
    sep = separator(code=PrintedCode(symbology, "PATCHT", module=5, at=(0.5, 0.4)))
    path = batch_pdf(tmp_path / "b.pdf", [letter(1), sep, letter(2)])
    assert _ranges(path, tmp_path) == [(1, 1), (3, 3)]
    others = [s for s in Symbology if s is not symbology]
    assert _ranges(path, tmp_path, symbologies=others) == [(1, 3)]


def test_keep_or_drop_the_separator_page_on_real_scans(tmp_path: Path) -> None:
    """Dropped by default; with keep_separator the sheet leads the next child."""
    path = batch_pdf(tmp_path / "b.pdf", [letter(1), separator(), letter(2), letter(2, 2)])
    assert _ranges(path, tmp_path) == [(1, 1), (3, 4)]
    assert _ranges(path, tmp_path, keep_separator=True) == [(1, 1), (2, 4)]


def test_duplex_separator_printed_on_the_back_takes_its_sheet(tmp_path: Path) -> None:
    """duplex: a separator on a sheet's back side drops the (blank) front with it."""
    sides = [letter(1), BLANK, BLANK, separator(), letter(2), letter(2, 2)]
    path = batch_pdf(tmp_path / "b.pdf", sides)
    assert _ranges(path, tmp_path, duplex=True) == [(1, 2), (5, 6)]


def test_blank_sheets_separate_real_scans_when_asked(tmp_path: Path) -> None:
    """blank_sheets: a scanned blank page (noise, dust) separates; a letter never does."""
    path = batch_pdf(tmp_path / "b.pdf", [letter(1), BLANK, letter(2), letter(3)])
    assert _ranges(path, tmp_path, blank_sheets=True) == [(1, 1), (3, 4)]
    assert _ranges(path, tmp_path) == [(1, 4)]


def test_barcode_change_mode_on_real_scans(tmp_path: Path) -> None:
    """barcode-change: a new document number on a page starts a child; the unrelated
    invoice code of a letter does not (change_regex)."""
    sides = [
        letter(1, 1, code("DOC-0001")),
        letter(1, 2, code("INV-77", at=(0.5, 0.6))),
        letter(2, 1, code("DOC-0002")),
        letter(3, 1, code("DOC-0003")),
        letter(3, 2),
    ]
    path = batch_pdf(tmp_path / "b.pdf", sides)
    assert _ranges(path, tmp_path, mode="barcode-change", change_regex="DOC-[0-9]+") == [
        (1, 2),
        (3, 3),
        (4, 5),
    ]


def test_verify_finds_an_altered_child_and_broken_lineage(
    split_env: Env, db: Database, tmp_path: Path
) -> None:
    """verify re-hashes children like any document and reports a split batch whose
    lineage rows are gone."""
    path = batch_pdf(tmp_path / "b.pdf", [letter(1), separator(), letter(2)])
    parent = _ingest(split_env, db, path)
    assert _split_here(split_env, db) is None
    child = _parts(db, parent)[1]
    target = split_env.config.paths.archive_dir / child["archive_path"]
    target.chmod(0o640)
    with target.open("r+b") as fh:  # one byte, same size: only the hash can tell
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 1]))
    target.chmod(0o440)
    with db.transaction() as tx:
        tx.raw("DELETE FROM document_parts WHERE parent_id = %(p)s", {"p": parent})
    verify = run_cli(split_env, "verify", "--json")
    assert verify.returncode == 5
    problems = {(p["kind"], p["document_id"]) for p in json.loads(verify.stdout)["problems"]}
    assert problems == {("altered", child["id"]), ("lineage", parent)}


def test_a_batch_past_analysis_max_pages_is_not_read(
    make_env: Any, db: Database, tenant: str, tmp_path: Path
) -> None:
    """More pages than analysis.max_pages: attention before any page is read."""
    env: Env = make_env(worker=WORKER, analysis={**ANALYSIS, "max_pages": 3})
    env.config_path.write_text(env.config_path.read_text() + "\n[split.acme]\n")
    env.reload()
    path = batch_pdf(tmp_path / "long.pdf", [letter(1, p) for p in range(1, 5)])
    doc = _ingest(env, db, path)
    reason = _split_here(env, db)
    assert reason is not None and "4 pages, more than analysis.max_pages (3)" in reason
    assert _status(db, doc)[0] == "attention"


def test_a_job_whose_policy_does_not_read_fails_for_good(
    split_env: Env, db: Database, tmp_path: Path
) -> None:
    """A split-batch job with a broken policy is a permanent failure, never retried."""
    from worker.jobs import PermanentError

    path = batch_pdf(tmp_path / "b.pdf", [letter(1)])
    doc = _ingest(split_env, db, path)
    with db.transaction() as tx:
        tx.raw(
            'UPDATE processing_jobs SET payload = payload || \'{"policy": {"mode": "x"}}\' '
            "WHERE document_id = %(d)s",
            {"d": doc},
        )
    with pytest.raises(PermanentError, match="split policy does not read"):
        _split_here(split_env, db)


def test_a_batch_on_the_s3_archive_splits_into_locked_objects(
    make_env: Any, db: Database, tenant: str, s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """With backend = "s3" the split reads the batch from the bucket and stores each child
    there (checksummed, locked); the chain records them; audit verify re-hashes all."""
    section = archive_section(s3_endpoint, tmp_path)
    env: Env = make_env(worker=WORKER, analysis=ANALYSIS, archive=section)
    env.config_path.write_text(env.config_path.read_text() + "\n[split.acme]\nmax_pages = 6\n")
    env.reload()
    path = batch_pdf(tmp_path / "in" / "Scan_0002.pdf", [letter(12), separator(), letter(13)])
    parent = _ingest(env, db, path)
    assert _split_here(env, db) is None
    parts = _parts(db, parent)
    assert len(parts) == 2
    store = make_archive(env.config)
    assert isinstance(store, S3Archive)
    for p in parts:
        found = store.locate(p["archive_path"])
        assert found is not None and found.sha256 == p["sha256"]
        assert found.lock_mode == "COMPLIANCE"
    assert not any(f.is_file() for f in env.config.paths.archive_dir.rglob("*"))
    report = verify_audit(db, store)
    assert report.ok and report.files == 3, report.problems


def test_a_separator_regex_that_backtracks_needs_attention_naming_it_never_retried(
    make_env: Any, db: Database, tenant: str, tmp_path: Path
) -> None:
    """A separator_regex that passes check-config but backtracks on a scanned barcode
    ((a|aa)+$ on forty a's and a "!"): through the worker and its job child, the batch ends
    in attention with the pattern named, after one attempt, and no job.failed event."""
    env: Env = make_env(worker=WORKER, analysis=ANALYSIS)
    env.config_path.write_text(
        env.config_path.read_text() + '\n[split.acme]\nseparator_regex = "(a|aa)+$"\n'
    )
    env.reload()
    check = run_cli(env, "check-config")
    assert check.returncode == 0, check.stdout + check.stderr
    sides = [letter(1), separator(code=code("a" * 40 + "!", Symbology.qr)), letter(2)]
    doc = _ingest(env, db, batch_pdf(tmp_path / "b.pdf", sides))
    _drain(env, db)
    status, reason = _status(db, doc)
    assert status == "attention", reason
    assert "separator_regex '(a|aa)+$'" in str(reason) and "page 2" in str(reason), reason
    job = one(
        db,
        "SELECT status, retry_count FROM processing_jobs WHERE document_id = %(d)s "
        "AND kind = 'split-batch'",
        {"d": doc},
    )
    assert job["retry_count"] == 0, job
    failed = one(db, "SELECT count(*) AS n FROM operator_events WHERE type = 'job.failed'", None)
    assert failed["n"] == 0
