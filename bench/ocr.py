"""OCR throughput: ingestd's analyze-document job next to plain ocrmypdf, in one run.

The input is a generated German letter, N A4 pages scanned at 300 dpi (grayscale,
lossless, no text layer; ingestd/demo/scans.py), distinct per round so ingestd never
sees a duplicate. Each round runs both sides on the same file, alternating which goes
first; the table shows medians.

- baseline: ``ocrmypdf -l deu+eng --rotate-pages IN OUT``, the CLI as an admin would run
  it, with the options ingestd uses (languages, rotation);
- ingestd: ``ingestd ingest`` (untimed), then ``ingestd worker --drain`` timed from start
  to exit: the worker claims the analyze-document job, runs it in its child (verify the
  archived bytes, OCR through worker/analysis/ocr.py, title/date/taxonomy) and commits the text.
  The document's ``document_content`` row must hold N pages of text, else the figure is
  refused (BenchError). A second row is the job alone (processing_jobs.started_at ->
  finished_at): what a long-running worker spends per document, without its start-up.

Both on one durable embedded PostgreSQL (fsync on) for ingestd; the goal is ingestd within
10 % of ocrmypdf (pages/min ratio >= 0.90).

    .venv/bin/python bench/ocr.py [--pages 10] [--rounds 3] [--only ocrmypdf|ingestd]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# The project root, not bench/: bench/queue.py would otherwise shadow the stdlib's queue.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench._common import BenchError, bench_cluster, median, print_table, run_main
from ingestd.demo import scans

# The console scripts next to the interpreter running us: the venv's.
INGESTD = str(Path(sys.executable).with_name("ingestd"))
OCRMYPDF = str(Path(sys.executable).with_name("ocrmypdf"))
LANGUAGES = "deu+eng"
RUN_TIMEOUT = 1800.0  # seconds for one side of one round
CLI_TIMEOUT = 120.0  # migrate, tenant create, ingest
TENANT = "bench"
# Words of every page of scans.LETTER that OCR must find on every page.
EXPECTED = ("Stadtwerke", "Rechnung", "Straßenreinigung")


@dataclass
class Row:
    measure: str
    product: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    goal: str = "-"

    def ratio(self) -> float | None:
        if not self.product or not self.baseline:
            return None
        return median(self.product) / median(self.baseline)

    def cells(self) -> list[str]:
        def fmt(values: list[float]) -> str:
            return f"{median(values):.1f}" if values else "-"

        def runs(values: list[float]) -> str:
            return " ".join(f"{v:.1f}" for v in values) or "-"

        ratio = self.ratio()
        return [
            self.measure,
            fmt(self.product),
            fmt(self.baseline),
            f"{ratio:.2f}" if ratio is not None else "-",
            self.goal,
            f"{runs(self.product)} / {runs(self.baseline)}",
        ]


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def toml_str(value: str) -> str:
    # A JSON string (ASCII-only, standard escapes) is a valid TOML basic string.
    return json.dumps(value)


def tool_version(argv: list[str]) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return (res.stdout.strip() or res.stderr.strip()).splitlines()[0]
    return "unknown"


# -- the two sides -----------------------------------------------------------------------
def run_ocrmypdf(src: Path, out: Path) -> float:
    """Seconds for the plain CLI on ``src``."""
    t0 = time.monotonic()
    try:
        res = subprocess.run(
            [OCRMYPDF, "-l", LANGUAGES, "--rotate-pages", str(src), str(out)],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"ocrmypdf did not finish within {RUN_TIMEOUT:.0f} s") from None
    elapsed = time.monotonic() - t0
    if res.returncode != 0:
        raise BenchError(f"ocrmypdf: exit {res.returncode}\n{tail(res.stderr)}")
    return elapsed


class Ingestd:
    """A config, a migrated database and a tenant on the bench cluster; one drain per round."""

    def __init__(self, work: Path, conninfo: str) -> None:
        self.dir = work / "ingestd"
        self.config = self.dir / "ingestd.toml"
        self.conninfo = conninfo

    def cli(self, *args: str, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess[str]:
        try:
            res = subprocess.run(
                [INGESTD, "--config", str(self.config), *args],
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise BenchError(f"ingestd {args[0]} did not finish within {timeout:.0f} s") from None
        if res.returncode != 0:
            raise BenchError(
                f"ingestd {' '.join(args)}: exit {res.returncode}\n{tail(res.stdout + res.stderr)}"
            )
        return res

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
        self.cli("worker", "--drain")  # provision-tenant makes it active

    def run(self, src: Path, pages: int) -> tuple[float, float]:
        """(seconds of `worker --drain`, seconds of the job itself) for ``src``."""
        sha = hashlib.sha256(src.read_bytes()).hexdigest()
        self.cli("ingest", "--tenant", TENANT, "--keep-source", str(src))
        t0 = time.monotonic()
        res = self.cli("worker", "--drain", timeout=RUN_TIMEOUT)
        elapsed = time.monotonic() - t0
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            job = conn.execute(
                "SELECT j.status, j.error_message,"
                " extract(epoch FROM j.finished_at - j.started_at)::float8,"
                " c.page_count, c.pages"
                " FROM documents d JOIN processing_jobs j ON j.document_id = d.id"
                " LEFT JOIN document_content c ON c.document_id = d.id"
                " WHERE d.sha256 = %s AND j.kind = 'analyze-document'"
                " ORDER BY j.id DESC LIMIT 1",
                (sha,),
            ).fetchone()
        if job is None:
            raise BenchError(f"no analyze-document job for the ingested scan {sha[:12]}")
        status, error, job_seconds, page_count, texts = job
        if status != "done":
            raise BenchError(
                f"analyze-document job is {status!r}: {error}\n{tail(res.stdout + res.stderr)}"
            )
        if page_count is None:
            raise BenchError(
                "the analyze-document job finished without OCR: no "
                "document_content row (is OCR wired into the handler yet?); "
                "`--only ocrmypdf` runs the baseline alone"
            )
        missing = [
            i + 1
            for i, text in enumerate(texts or [])
            if not all(word in text for word in EXPECTED)
        ]
        if page_count != pages or len(texts or []) != pages or missing:
            raise BenchError(
                f"document_content has {page_count} pages ({len(texts or [])} "
                f"texts), expected {pages}; pages without the letter's words: "
                f"{missing}"
            )
        return elapsed, float(job_seconds)


# -- main ----------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=10, help="A4 pages per scan (10)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["ocrmypdf", "ingestd"], default=None)
    args = ap.parse_args()
    if args.pages < 1 or args.rounds < 1:
        ap.error("need --pages >= 1 and --rounds >= 1")
    sides = [args.only] if args.only else ["ocrmypdf", "ingestd"]

    drain = Row(
        "ingestd `worker --drain` (start to exit) vs `ocrmypdf` CLI, pages/min", goal=">= 0.90"
    )
    job = Row("  ingestd job alone (claimed -> done) vs `ocrmypdf` CLI, pages/min")
    with contextlib.ExitStack() as stack:
        work = Path(tempfile.mkdtemp(prefix="ingestd-bench-ocr-", dir=os.environ.get("BENCH_DIR")))
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        ingestd = None
        if "ingestd" in sides:
            cluster = stack.enter_context(bench_cluster())
            ingestd = Ingestd(work, cluster.conninfo_for(cluster.dbname))
            ingestd.start()
        load_before = os.getloadavg()[0]
        t_all = time.monotonic()
        for rnd in range(args.rounds):
            # Distinct text per round: a repeated scan would be a duplicate to ingestd.
            src = scans.image_pdf(
                work / f"scan-{rnd}.pdf", scans.letter_pages(args.pages, first=1 + rnd * args.pages)
            )
            order = sides if rnd % 2 == 0 else sides[::-1]
            for side in order:
                if side == "ocrmypdf":
                    seconds = run_ocrmypdf(src, work / f"baseline-{rnd}.pdf")
                    drain.baseline.append(args.pages / seconds * 60)
                    job.baseline.append(args.pages / seconds * 60)
                else:
                    assert ingestd is not None
                    seconds, job_seconds = ingestd.run(src, args.pages)
                    drain.product.append(args.pages / seconds * 60)
                    job.product.append(args.pages / job_seconds * 60)
                    print(
                        f"round {rnd + 1} ingestd: drain {seconds:.2f} s, job {job_seconds:.2f} s",
                        file=sys.stderr,
                    )
                    continue
                print(f"round {rnd + 1} ocrmypdf: {seconds:.2f} s", file=sys.stderr)
        elapsed = time.monotonic() - t_all
        load_after = os.getloadavg()[0]

    print(
        f"\nOCR benchmark: {args.pages} A4 pages at 300 dpi (generated German letter, "
        f"image-only PDF), {os.cpu_count()} cores, {tool_version([OCRMYPDF, '--version'])} "
        f"(ocrmypdf), {tool_version(['tesseract', '--version'])}, languages {LANGUAGES}, "
        f"--rotate-pages; medians of {args.rounds} rounds, order alternating; "
        f"{elapsed:.0f} s; load average {load_before:.1f} before, {load_after:.1f} after"
    )
    print_table(
        [
            "measure",
            "ingestd",
            "ocrmypdf",
            "ratio ingestd/ocrmypdf",
            "goal",
            "runs (ingestd / ocrmypdf)",
        ],
        [drain.cells(), job.cells()],
    )
    if drain.baseline:
        per_page = 60 / median(drain.baseline)
        print(
            f"ocrmypdf: {median(drain.baseline):.1f} pages/min, {per_page:.2f} s per page, "
            f"{per_page * args.pages:.1f} s for the {args.pages}-page scan"
        )
    ratio = drain.ratio()
    if ratio is None:
        print("goal: ingestd within 10 % of ocrmypdf: not measured (one side only)")
    else:
        print(
            f"goal: ingestd within 10 % of ocrmypdf (ratio >= 0.90): "
            f"{'met' if ratio >= 0.90 else 'NOT met'} ({ratio:.2f})"
        )


if __name__ == "__main__":
    run_main(main, "ocrmypdf, the worker and Postgres")
