"""The three sides bench/ocr.py runs on the same documents: the limit (tesseract on
pre-rendered pages, one per core), ocrmypdf file by file, and ingestd (one long-running
worker with its real job children)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import pikepdf
import psycopg

from bench._common import BenchError, toml_str
from bench._ocr_common import (
    CLI_TIMEOUT,
    INGESTD,
    KNOWN_WORD,
    LANGUAGES,
    OCRMYPDF,
    PAGE_TIMEOUT,
    POLL,
    RUN_TIMEOUT,
    START_TIMEOUT,
    STOP_TIMEOUT,
    TENANT,
    TESSERACT,
    WORKER_ID,
    Result,
    file_tail,
    run,
)
from bench._ocr_inputs import Doc, Recall, split_pages
from ingestd.demo import scans


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
