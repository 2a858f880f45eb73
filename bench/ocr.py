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
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The project root, not bench/: bench/queue.py would otherwise shadow the stdlib's queue.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from bench._common import bench_cluster, median, print_table, run_main
from bench._ocr_common import (
    GOAL_DOCS,
    GOAL_LIMIT,
    GOAL_RECALL,
    LANGUAGES,
    NAMES,
    OCRMYPDF,
    SIDES,
    TESSERACT,
    WORKLOADS,
    Result,
    tool_version,
)
from bench._ocr_inputs import Sizes, make_inputs
from bench._ocr_sides import Ingestd, run_limit, run_ocrmypdf


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
