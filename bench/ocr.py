"""OCR throughput and quality: ingestd's long-running worker next to tesseract and ocrmypdf.

One run measures every side on the same, freshly generated files (distinct per round:
ingestd refuses a file it already has), in rounds whose side order alternates; the tables
show medians (runs listed below them). Workloads (``--workloads``, default all):

- (0) clean letter: one N-page (``--pages``, 10) image-only PDF of the generated German
  letter, lossless 300 dpi grayscale (ingestd/demo/scans.py: image_pdf);
- (a) noisy scan: one 10-page letter as a scanner's PDF, JPEG q85 pages with paper tone,
  sensor noise, dust and a seeded skew within ±1.5° (ingestd/demo/batches.py: write_pdf);
- (b) mixed batch: 12 such PDFs, 8 × 1, 3 × 3 and 1 × 8 pages (25 pages);
- (c) born-digital: 20 one-page PDFs with a text layer (scans.text_pdf), each with a
  letter's date ("Musterstadt, den 3. März 2024") and a customer number; no OCR needed.

The sides (``--only``, default all):

- ingestd: one durable embedded PostgreSQL (fsync on), ``ingestd migrate``, ``ingestd
  tenant create bench`` and ONE long-running worker started as the systemd unit does
  (``ingestd --config CFG worker --worker-id bench-1``, its default concurrency), warmed up
  with one small document before the first round. Per workload and round, ``ingestd
  ingest --tenant bench --keep-source FILE...`` (untimed CLI), then the database is polled
  every 0.1 s until every analyze-document job of those files is done. Time = last
  processing_jobs.finished_at - first created_at over those jobs: queue to done, without
  CLI start-up. Refused as a figure (BenchError) unless every document's document_content
  has its page count; a failed attempt or a document needing attention is an error too.
  For (c) every document must also hold the letter's text, be found by ``ingestd search``
  and have documents.issued_date set to the letter's date.
- limit: tesseract itself, what no wrapper can beat. Untimed, every page's embedded image
  is extracted unchanged (pikepdf: the scanner's JPEG as it is; PNG for (0)); timed,
  ``tesseract IMG OUT --dpi 300 -l deu+eng txt pdf`` (OMP_THREAD_LIMIT=1), as many at a
  time as there are cores, over all pages of the workload. Not for (c).
- ocrmypdf: the venv's CLI as an admin would run it, ``ocrmypdf -l deu+eng --rotate-pages
  --output-type pdf --sidecar TXT IN OUT``, the files one after another (it uses every
  core itself); a plain PDF like ingestd's (its default, PDF/A, would add ghostscript's
  conversion, which no other side pays for); for (c) with ``--skip-text`` (without it,
  ocrmypdf refuses a PDF with text, exit 6).

Rows of the throughput table: pages/min of each side for (0), (a), (b) with the ratios
ingestd/limit (goal >= 0.95 for (a) and (b): the worker adds at most 5 % to tesseract's
own work) and ingestd/ocrmypdf; documents/s for (c) (goal: ingestd >= 20 documents/s).
Rows of the recall table: word recall against the generated text of every page, for
ingestd (document_content.pages), ocrmypdf (its sidecar, pages split at form feeds) and
the limit (tesseract's .txt). Words are whitespace-separated, surrounding punctuation
stripped, case-sensitive; recall = truth words found on their page (as a multiset) /
truth words, over the whole workload, in percent; goal: ingestd at most 0.5 points below
ocrmypdf. A "goals:" block says met / NOT met for each.

    .venv/bin/python bench/ocr.py [--rounds 3] [--pages 10] [--workloads 0,a,b,c]
                                  [--only limit,ocrmypdf,ingestd] [--small]

``--small`` (make test, on a busy CI machine): 1 round, (0) 1 page, (a) 1 page, (b) 2
one-page documents, (c) 2 documents; every side still runs and the full table is
printed (its figures are latency, not throughput).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import hashlib
import json
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

# The project root, not bench/: bench/queue.py would otherwise shadow the stdlib's queue.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pikepdf
import psycopg

from bench._common import BenchError, bench_cluster, median, print_table, run_main
from ingestd.demo import batches, scans

# The console scripts next to the interpreter running us: the venv's.
INGESTD = str(Path(sys.executable).with_name("ingestd"))
OCRMYPDF = str(Path(sys.executable).with_name("ocrmypdf"))
TESSERACT = "tesseract"
LANGUAGES = "deu+eng"
TENANT = "bench"
WORKER_ID = "bench-1"
RUN_TIMEOUT = 1800.0  # seconds for one side of one workload in one round
PAGE_TIMEOUT = 600.0  # one tesseract call on one page
CLI_TIMEOUT = 120.0  # migrate, tenant create, ingest, search
START_TIMEOUT = 120.0  # the worker provisions the tenant
STOP_TIMEOUT = 60.0  # SIGTERM to exit, then SIGKILL
POLL = 0.1
SKEW = 1.5  # degrees either way, for the noisy scans
KNOWN_WORD = "Straßenreinigung"  # in the body of every letter
MONTHS = ("Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August")
# Surrounding punctuation a word loses before it is compared (ASCII and German quotes).
PUNCTUATION = string.punctuation + "„“”‚‘’«»–—…·"

SIDES = ("limit", "ocrmypdf", "ingestd")
WORKLOADS = ("0", "a", "b", "c")
NAMES = {"0": "clean letter", "a": "noisy scan", "b": "mixed batch", "c": "born-digital"}
GOAL_LIMIT = 0.95  # ingestd/limit pages/min, for (a) and (b)
GOAL_RECALL = -0.5  # ingestd - ocrmypdf, points
GOAL_DOCS = 20.0  # born-digital documents/s


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


# -- helpers -------------------------------------------------------------------------------
def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def file_tail(path: Path, lines: int = 25) -> str:
    try:
        return tail(path.read_text(errors="replace"), lines)
    except OSError:
        return "(no log)"


def toml_str(value: str) -> str:
    # A JSON string (ASCII-only, standard escapes) is a valid TOML basic string.
    return json.dumps(value)


def tool_version(argv: list[str]) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError, IndexError):
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return (res.stdout.strip() or res.stderr.strip()).splitlines()[0]
    return "unknown"


def run(argv: list[str], what: str, timeout: float, **kw: Any) -> subprocess.CompletedProcess[str]:
    """``argv`` to completion; a BenchError with its output's tail if it fails."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        raise BenchError(f"{what} did not finish within {timeout:.0f} s\n{tail(text)}") from None
    except OSError as exc:
        raise BenchError(f"{what}: cannot run {argv[0]}: {exc}") from None
    if res.returncode != 0:
        raise BenchError(f"{what}: exit {res.returncode}\n{tail(res.stdout + res.stderr)}")
    return res


@dataclass
class Result:
    seconds: float
    units: int  # pages, or documents for (c)
    recall: float | None = None  # percent; None for (c)
    per_minute: bool = True  # pages/min; False: documents/s

    @property
    def rate(self) -> float:
        return self.units / self.seconds * (60 if self.per_minute else 1)


# -- the limit: tesseract on pre-rendered pages -------------------------------------------
def run_limit(docs: Sequence[Doc], work: Path) -> Result:
    work.mkdir(parents=True)
    images: list[Path] = []
    for d, doc in enumerate(docs):
        with pikepdf.open(doc.path) as pdf:
            for p, page in enumerate(pdf.pages):
                found = page.get_images()
                names = list(found.keys())
                if len(names) != 1:
                    raise BenchError(f"{doc.path.name} page {p + 1}: {len(names)} images, not 1")
                stream = found[names[0]]
                assert isinstance(stream, pikepdf.Stream)
                # As embedded: DCTDecode comes out as the scanner's .jpg, Flate as .png.
                image = pikepdf.PdfImage(stream).extract_to(
                    fileprefix=str(work / f"{d:02d}-{p:03d}")
                )
                images.append(Path(image))
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}

    def ocr(img: Path) -> None:
        argv = [TESSERACT, str(img), str(img.with_suffix("")), "--dpi", "300"]
        run([*argv, "-l", LANGUAGES, "txt", "pdf"], f"tesseract {img.name}", PAGE_TIMEOUT, env=env)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(ocr, images))  # re-raises the first error
    seconds = time.monotonic() - t0
    recall = Recall()
    for d, doc in enumerate(docs):
        texts = [
            (work / f"{d:02d}-{p:03d}.txt").read_text(errors="replace")
            for p in range(len(doc.truth))
        ]
        recall.add_doc(doc, texts)
    return Result(seconds, len(images), recall.percent())


# -- ocrmypdf, file by file ---------------------------------------------------------------
def run_ocrmypdf(docs: Sequence[Doc], work: Path, born_digital: bool) -> Result:
    work.mkdir(parents=True)
    extra = ["--skip-text"] if born_digital else []
    t0 = time.monotonic()
    for i, doc in enumerate(docs):
        argv = [OCRMYPDF, "-l", LANGUAGES, "--rotate-pages", "--output-type", "pdf", *extra]
        argv += ["--sidecar", str(work / f"{i:02d}.txt"), str(doc.path), str(work / f"{i:02d}.pdf")]
        run(argv, f"ocrmypdf {doc.path.name}", RUN_TIMEOUT)
    seconds = time.monotonic() - t0
    if born_digital:
        return Result(seconds, len(docs), per_minute=False)
    recall = Recall()
    for i, doc in enumerate(docs):
        text = (work / f"{i:02d}.txt").read_text(errors="replace")
        recall.add_doc(doc, split_pages(text, len(doc.truth)))
    return Result(seconds, sum(len(d.truth) for d in docs), recall.percent())


# -- ingestd: one long-running worker ------------------------------------------------------
STATUS_SQL = """
SELECT d.sha256, d.processing_status, d.attention_reason,
       j.id, j.status, j.retry_count, j.error_message
FROM documents d JOIN tenants t ON t.id = d.tenant_id
LEFT JOIN processing_jobs j ON j.document_id = d.id AND j.kind = 'analyze-document'
WHERE t.name = %s AND d.sha256 = ANY(%s)
"""
SPAN_SQL = """
SELECT extract(epoch FROM max(j.finished_at) - min(j.created_at))::float8
FROM documents d JOIN tenants t ON t.id = d.tenant_id
JOIN processing_jobs j ON j.document_id = d.id AND j.kind = 'analyze-document'
WHERE t.name = %s AND d.sha256 = ANY(%s)
"""
CONTENT_SQL = """
SELECT d.sha256, d.id, d.issued_date, c.page_count, c.pages
FROM documents d JOIN tenants t ON t.id = d.tenant_id
LEFT JOIN document_content c ON c.document_id = d.id
WHERE t.name = %s AND d.sha256 = ANY(%s)
"""


class Ingestd:
    """A config, a migrated database, a tenant and one long-running worker."""

    def __init__(self, work: Path, conninfo: str) -> None:
        self.dir = work / "ingestd"
        self.config = self.dir / "ingestd.toml"
        self.log = self.dir / "worker.log"
        self.conninfo = conninfo
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    def cli(self, *args: str, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return run([INGESTD, "--config", str(self.config), *args], f"ingestd {args[0]}", timeout)

    def error(self, message: str) -> BenchError:
        return BenchError(f"{message}\nworker log ({self.log}):\n{file_tail(self.log)}")

    def start(self) -> None:
        self.dir.mkdir(parents=True)
        self.config.write_text(
            "[database]\n"
            f"url = {toml_str(self.conninfo)}\n"
            "[paths]\n"
            f"state_dir = {toml_str(str(self.dir / 'state'))}\n"
            f"archive = {toml_str(str(self.dir / 'archive'))}\n"
            f"derived = {toml_str(str(self.dir / 'derived'))}\n"
            f"spool = {toml_str(str(self.dir / 'spool'))}\n"
            "[log]\n"
            'format = "json"\n'
            'level = "warning"\n'  # logs stay small; warnings and errors still show up
        )
        self.cli("migrate")
        self.cli("tenant", "create", TENANT)
        self._log_file = self.log.open("wb")
        # As ingestd-worker.service runs it: no concurrency option, the defaults count.
        self.proc = subprocess.Popen(
            [INGESTD, "--config", str(self.config), "worker", "--worker-id", WORKER_ID],
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        # The worker runs provision-tenant; ingest wants an active tenant.
        deadline = time.monotonic() + START_TIMEOUT
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            while True:
                row = conn.execute("SELECT status FROM tenants WHERE name = %s", (TENANT,))
                status = (row.fetchone() or ("missing",))[0]
                if status == "active":
                    break
                self.check_alive()
                if time.monotonic() > deadline:
                    raise self.error(f"tenant {TENANT} is {status!r} after {START_TIMEOUT:.0f} s")
                time.sleep(POLL)
        # Warm up (untimed): a long-running worker has done a job before the first one we time.
        warm = scans.image_pdf(
            self.dir / "warm-up.pdf", [["Stadtwerke Musterstadt"]], size=scans.A6
        )
        self.run([Doc(warm, [("Stadtwerke", "Musterstadt")])], born_digital=False)

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise self.error(f"the worker exited with {self.proc.returncode}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        try:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    print(
                        f"worker ignored SIGTERM for {STOP_TIMEOUT:.0f} s; killed", file=sys.stderr
                    )
                    proc.kill()
                    proc.wait(10)
        finally:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    def wait(self, docs: Sequence[Doc]) -> None:
        """Until every analyze-document job of ``docs`` is done (poll every 0.1 s)."""
        shas = [d.sha256 for d in docs]
        deadline = time.monotonic() + RUN_TIMEOUT
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            while True:
                rows = conn.execute(STATUS_SQL, (TENANT, shas)).fetchall()
                seen = {r[0] for r in rows}
                if missing := [d.path.name for d in docs if d.sha256 not in seen]:
                    raise self.error(f"no document for the ingested {missing}")
                pending = []
                for sha, doc_status, reason, job, status, retries, error in rows:
                    name = next(d.path.name for d in docs if d.sha256 == sha)
                    if doc_status == "attention":
                        raise self.error(f"{name} needs attention: {reason}")
                    if status == "failed":
                        raise self.error(f"{name}: analyze-document job {job} failed: {error}")
                    if retries:  # a retry would time the backoff, not OCR
                        raise self.error(f"{name}: job {job} failed an attempt: {error}")
                    if status != "done":
                        pending.append(f"{name}: {status or 'no job'}")
                if not pending:
                    return
                self.check_alive()
                if time.monotonic() > deadline:
                    raise self.error(f"not done after {RUN_TIMEOUT:.0f} s: {pending}")
                time.sleep(POLL)

    def run(self, docs: Sequence[Doc], born_digital: bool) -> Result:
        """Ingest ``docs`` (untimed), wait for their jobs, verify; queue-to-done time."""
        self.check_alive()
        res = self.cli(
            "ingest",
            "--json",
            "--tenant",
            TENANT,
            "--keep-source",
            *map(str, [d.path for d in docs]),
        )
        refused = [e for e in json.loads(res.stdout) if e.get("outcome") != "ingested"]
        if refused:
            raise BenchError(f"ingestd ingest did not take every file: {refused}")
        self.wait(docs)
        shas = [d.sha256 for d in docs]
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            span = conn.execute(SPAN_SQL, (TENANT, shas)).fetchone()
            content = {r[0]: r[1:] for r in conn.execute(CONTENT_SQL, (TENANT, shas))}
        recall = Recall()
        for doc in docs:
            _id, issued, page_count, texts = content[doc.sha256]
            texts = texts or []
            if page_count is None:
                raise self.error(
                    f"{doc.path.name}: analyze-document finished without a document_content "
                    "row (is OCR wired into the handler?); `--only limit,ocrmypdf` runs the "
                    "baselines alone"
                )
            pages = len(doc.truth)
            if page_count != pages or len(texts) != pages:
                raise self.error(
                    f"{doc.path.name}: document_content has {page_count} pages "
                    f"({len(texts)} texts), expected {pages}"
                )
            recall.add_doc(doc, texts)
            if born_digital:
                if not any(KNOWN_WORD in t for t in texts):
                    raise self.error(f"{doc.path.name}: no {KNOWN_WORD!r} in its text: {texts!r}")
                if issued != doc.issued:
                    raise self.error(
                        f"{doc.path.name}: documents.issued_date is {issued}, the letter "
                        f"says {doc.issued}"
                    )
        if born_digital:
            self.search(docs, {content[d.sha256][0]: d for d in docs})
        assert span is not None and span[0] is not None
        if born_digital:
            return Result(float(span[0]), len(docs), per_minute=False)
        return Result(float(span[0]), sum(len(d.truth) for d in docs), recall.percent())

    def search(self, docs: Sequence[Doc], by_id: dict[int, Doc]) -> None:
        """Each document is found by `ingestd search` for its customer number."""
        query = " or ".join(d.key for d in docs)
        res = self.cli("search", "--json", "--tenant", TENANT, "--limit", str(2 * len(docs)), query)
        found = {int(r["id"]) for r in json.loads(res.stdout)}
        if missing := [d.path.name for i, d in by_id.items() if i not in found]:
            raise BenchError(f"`ingestd search {query!r}` does not find {missing}")


# -- the table -----------------------------------------------------------------------------
@dataclass
class Runs:
    """Per workload and side, one Result per round."""

    results: dict[tuple[str, str], list[Result]] = field(default_factory=dict)

    def add(self, wl: str, side: str, res: Result) -> None:
        self.results.setdefault((wl, side), []).append(res)

    def rate(self, wl: str, side: str) -> float | None:
        got = self.results.get((wl, side))
        return median([r.rate for r in got]) if got else None

    def recall(self, wl: str, side: str) -> float | None:
        got = [r.recall for r in self.results.get((wl, side), []) if r.recall is not None]
        return median(got) if got else None


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def diff(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def verdict(value: float | None, ok: Callable[[float], bool], shown: str) -> str:
    if value is None:
        return "not measured"
    return f"{'met' if ok(value) else 'NOT met'} ({shown})"


def report(runs: Runs, workloads: Sequence[str], sizes: Sizes, rounds: int) -> None:
    image = [wl for wl in workloads if wl != "c"]
    rows: list[list[str]] = []
    for wl in image:
        ing, lim, ocr = (runs.rate(wl, s) for s in ("ingestd", "limit", "ocrmypdf"))
        pages = sum(sizes.of(wl))
        rows.append(
            [
                f"({wl}) {NAMES[wl]}, {plural(len(sizes.of(wl)), 'doc')}, {pages} p: "
                "ingestd pages/min",
                fmt(ing),
                fmt(lim),
                fmt(ocr),
                fmt(ratio(ing, lim), ".2f"),
                fmt(ratio(ing, ocr), ".2f"),
                f">= {GOAL_LIMIT:.2f} vs limit" if wl in ("a", "b") else "-",
            ]
        )
    if "c" in workloads:
        ing, ocr = runs.rate("c", "ingestd"), runs.rate("c", "ocrmypdf")
        rows.append(
            [
                f"(c) {NAMES['c']}, {sizes.born} docs: born-digital documents/s",
                fmt(ing, ".2f"),
                "-",
                fmt(ocr, ".2f"),
                "-",
                fmt(ratio(ing, ocr), ".2f"),
                f"ingestd >= {GOAL_DOCS:.0f} docs/s",
            ]
        )
    print_table(
        [
            "throughput (median)",
            "ingestd",
            "limit",
            "ocrmypdf",
            "ratio ingestd/limit",
            "ratio ingestd/ocrmypdf",
            "goal",
        ],
        rows,
    )
    print()
    recall_rows = []
    for wl in image:
        ing, lim, ocr = (runs.recall(wl, s) for s in ("ingestd", "limit", "ocrmypdf"))
        recall_rows.append(
            [
                f"({wl}) {NAMES[wl]}: word recall %",
                fmt(ing),
                fmt(lim),
                fmt(ocr),
                fmt(diff(ing, ocr), "+.1f", " pt"),
                f">= {GOAL_RECALL:+.1f} pt",
            ]
        )
    if recall_rows:
        print_table(
            ["word recall (median)", "ingestd", "limit", "ocrmypdf", "ingestd - ocrmypdf", "goal"],
            recall_rows,
        )

    print(f"\nruns ({rounds} rounds; seconds, rate, recall %):")
    for wl in workloads:
        for side in SIDES:
            got = runs.results.get((wl, side))
            if not got:
                continue
            unit = "docs/s" if wl == "c" else "p/min"
            cells = ", ".join(
                f"{r.seconds:.2f} s {r.rate:.1f} {unit}"
                + ("" if r.recall is None else f" {r.recall:.1f} %")
                for r in got
            )
            print(f"  ({wl}) {side:<8} {cells}")

    print("\ngoals:")
    for wl in ("a", "b"):
        if wl in workloads:
            r = ratio(runs.rate(wl, "ingestd"), runs.rate(wl, "limit"))
            print(
                f"  ({wl}) {NAMES[wl]}: ingestd >= {GOAL_LIMIT:.2f} x the limit's pages/min: "
                + verdict(r, lambda v: v >= GOAL_LIMIT, f"{r or 0:.2f}")
            )
    for wl in image:
        d = diff(runs.recall(wl, "ingestd"), runs.recall(wl, "ocrmypdf"))
        print(
            f"  ({wl}) {NAMES[wl]}: ingestd word recall >= ocrmypdf's {GOAL_RECALL:+.1f} pt: "
            + verdict(d, lambda v: v >= GOAL_RECALL, f"{d or 0:+.1f} pt")
        )
    if "c" in workloads:
        v = runs.rate("c", "ingestd")
        print(
            f"  (c) {NAMES['c']}: ingestd >= {GOAL_DOCS:.0f} documents/s: "
            + verdict(v, lambda x: x >= GOAL_DOCS, f"{v or 0:.2f}/s")
        )


# -- main ----------------------------------------------------------------------------------
def choices(raw: list[str] | None, allowed: Sequence[str], what: str) -> list[str]:
    """A repeatable, comma-separated option as a list in ``allowed``'s order."""
    if not raw:
        return list(allowed)
    picked = {v.strip() for item in raw for v in item.split(",") if v.strip()}
    if bad := picked - set(allowed):
        raise SystemExit(f"unknown {what}: {', '.join(sorted(bad))} (choose from {allowed})")
    return [v for v in allowed if v in picked]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=None, help="rounds (3; --small: 1)")
    ap.add_argument("--pages", type=int, default=None, help="pages of (0) (10; --small: 1)")
    ap.add_argument(
        "--only", action="append", metavar="SIDE", help="limit, ocrmypdf, ingestd (repeatable)"
    )
    ap.add_argument("--workloads", action="append", metavar="W", help="0, a, b, c (0,a,b,c)")
    ap.add_argument("--small", action="store_true", help="the make-test size, every side")
    args = ap.parse_args()
    sides = choices(args.only, SIDES, "side")
    workloads = choices(args.workloads, WORKLOADS, "workload")
    if args.small:
        sizes = Sizes(clean=args.pages or 1, noisy=1, batch=[1, 1], born=2)
        rounds = args.rounds or 1
    else:
        sizes = Sizes(clean=args.pages or 10, noisy=10, batch=[1] * 8 + [3] * 3 + [8], born=20)
        rounds = args.rounds or 3
    if sizes.clean < 1 or rounds < 1:
        ap.error("need --pages >= 1 and --rounds >= 1")

    runs = Runs()
    with contextlib.ExitStack() as stack:
        work = Path(tempfile.mkdtemp(prefix="ingestd-bench-ocr-", dir=os.environ.get("BENCH_DIR")))
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        ingestd = None
        if "ingestd" in sides:
            cluster = stack.enter_context(bench_cluster())
            ingestd = Ingestd(work, cluster.conninfo_for(cluster.dbname))
            stack.callback(ingestd.stop)
            ingestd.start()
        load_before = os.getloadavg()
        t_all = time.monotonic()
        for rnd in range(rounds):
            order = sides if rnd % 2 == 0 else sides[::-1]
            for wl in workloads:
                docs = make_inputs(wl, rnd, sizes, work)
                for side in order:
                    out = work / "out" / f"{wl}-{rnd}-{side}"
                    if side == "limit":
                        if wl == "c":
                            continue  # nothing to OCR
                        res = run_limit(docs, out)
                    elif side == "ocrmypdf":
                        res = run_ocrmypdf(docs, out, born_digital=wl == "c")
                    else:
                        assert ingestd is not None
                        res = ingestd.run(docs, born_digital=wl == "c")
                    runs.add(wl, side, res)
                    recall = "" if res.recall is None else f", recall {res.recall:.1f} %"
                    print(
                        f"round {rnd + 1} ({wl}) {side}: {res.seconds:.2f} s for {res.units} "
                        f"{'documents' if wl == 'c' else 'pages'}{recall}",
                        file=sys.stderr,
                    )
        elapsed = time.monotonic() - t_all
        load_after = os.getloadavg()

    def loads(avg: tuple[float, float, float]) -> str:
        return "/".join(f"{v:.2f}" for v in avg)

    print(
        f"\nOCR benchmark: {os.cpu_count()} cores; {tool_version([TESSERACT, '--version'])}; "
        f"ocrmypdf {tool_version([OCRMYPDF, '--version'])}; languages {LANGUAGES}; "
        f"medians of {rounds} round(s), side order alternating ({', '.join(sides)}); "
        f"{elapsed:.0f} s; load average (1/5/15 min) {loads(load_before)} before, "
        f"{loads(load_after)} after"
    )
    report(runs, workloads, sizes, rounds)


if __name__ == "__main__":
    run_main(main, "tesseract, ocrmypdf, the worker and Postgres")
