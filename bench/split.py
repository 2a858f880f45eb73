"""Batch split throughput and accuracy: ingestd's split next to the paperless method.

The input is a generated batch (ingestd/demo/batches.py; cached under .bench/batches,
keyed by every parameter): N A4 pages at 300 dpi, grayscale JPEG q85 as a scanner
embeds them, with sensor noise, dust and ±3° skew, scanned duplex. Letters of 1-4
sheets (backs printed or blank), separated by PATCH-T sheets (Code 39 "PATCHT") printed
large or small, some in weak grey ink, on the front or on the back of the sheet (the
other side blank or showing through), some fed upside down; ASN stickers (QR, Code 128),
tag codes (DataMatrix) and one letter carrying an unrelated Code 128 invoice number.

- ingestd: ``worker.split.run.split_batch``, exactly what the split-batch job runs in its
  child: read every page (``worker/split/scan.py``), plan the children (duplex, ASN,
  tags), write each child from the batch's own page objects;
- the paperless method (paperless-ngx's barcode splitter): every page rendered at 300 dpi
  (pypdfium2), ``zxingcpp.read_barcodes`` with its default options, a page whose codes
  include "PATCHT" is a separator (dropped), the pages between written as children with
  pikepdf. paperless renders through pdf2image into a temp file per page; here the render
  stays in memory, which only makes the baseline faster.

Each side runs in a fresh child process per round (so its peak RSS is its own), with
TMPDIR and its output in a private directory whose size is sampled every 20 ms (peak temp
disk). The order alternates per round; the table shows medians (accuracy and peaks: the
worst round). Scoring is per sheet: a separator sheet is found when the method split at
a page of it; a false split is a split at any other sheet; children are exact when their
page range is a document's.

    .venv/bin/python bench/split.py [--pages 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

# The project root, not bench/: bench/queue.py would otherwise shadow the stdlib's queue.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import BenchError, median, print_table, run_main
from ingestd.config.split import DEFAULT_SEPARATOR, SplitPolicy, TagBarcode
from ingestd.demo.batches import Batch, BatchSpec, cached_batch

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".bench" / "batches"
SIDES = ("ingestd", "paperless")
RUN_TIMEOUT = 1800.0  # seconds for one side of one round
GOAL_SPEED = 3.0  # ingestd pages/s at least this many times the paperless method's
GOAL_DISK = 2.0  # peak temp disk at most this many times the batch


def policy() -> SplitPolicy:
    """The policy the batch was made for: PATCH-T separators, duplex, ASN and tags."""
    return SplitPolicy(
        duplex=True, asn_prefix="ASN", tag_barcodes=[TagBarcode(pattern="TAG:(.+)", tag="{1}")]
    )


# -- the two methods, each run in a child process --------------------------------------
def run_ingestd(batch: Path, out: Path) -> dict[str, object]:
    from worker.split.run import split_batch

    t0 = time.perf_counter()
    outcome = split_batch(batch, policy(), out)
    elapsed = time.perf_counter() - t0
    plan = outcome.plan
    return {
        "seconds": elapsed,
        "pages": plan.page_count,
        "attention": plan.attention,
        "separators": list(plan.separators),
        "parts": [[p.first, p.last, p.asn, list(p.tags)] for p in plan.parts],
        "children": len(outcome.children),
    }


def run_paperless(batch: Path, out: Path) -> dict[str, object]:
    """paperless-ngx's barcode splitting: render, read with defaults, split, write."""
    import pikepdf
    import pypdfium2  # type: ignore[import-untyped]
    import zxingcpp

    t0 = time.perf_counter()
    separators = []
    doc = pypdfium2.PdfDocument(str(batch))
    try:
        pages = len(doc)
        for index in range(pages):
            page = doc[index]
            bitmap = page.render(scale=300 / 72)
            image = bitmap.to_pil()
            texts = [b.text for b in zxingcpp.read_barcodes(image) if b.text]
            if DEFAULT_SEPARATOR in texts:
                separators.append(index)
            bitmap.close()
            page.close()
    finally:
        doc.close()
    parts: list[list[int]] = []
    current: list[int] = []
    for index in range(pages):
        if index in separators:
            parts.append(current)
            current = []
        else:
            current.append(index)
    parts.append(current)
    parts = [p for p in parts if p]
    with pikepdf.open(batch) as src:
        for n, part in enumerate(parts):
            child = pikepdf.new()
            child.pages.extend(src.pages[i] for i in part)
            child.save(out / f"document_{n}.pdf")
            child.close()
    elapsed = time.perf_counter() - t0
    return {
        "seconds": elapsed,
        "pages": pages,
        "attention": None,
        "separators": separators,
        "parts": [[p[0], p[-1], None, []] for p in parts],
        "children": len(parts),
    }


def child_main(side: str, batch: Path, out: Path) -> None:
    import resource

    out.mkdir(parents=True, exist_ok=True)
    result = run_ingestd(batch, out) if side == "ingestd" else run_paperless(batch, out)
    result["max_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(result))


# -- the parent: rounds, sampling, scoring ---------------------------------------------
def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed while we looked
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@dataclass
class Run:
    side: str
    seconds: float
    pages: int
    separators: list[int]
    parts: list[list[object]]
    attention: str | None
    peak_disk: int
    max_rss_kib: int


def run_side(side: str, batch: Path, work: Path) -> Run:
    private = work / f"{side}-{time.monotonic_ns()}"
    tmp = private / "tmp"
    tmp.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(tmp)}
    argv = [sys.executable, __file__, "--child", side, str(batch), str(private / "out")]
    peak = 0
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, dir_size(private))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise BenchError(f"{side} did not finish within {RUN_TIMEOUT:.0f} s") from None
    finally:
        done.set()
        sampler.join()
    peak = max(peak, dir_size(private))
    shutil.rmtree(private, ignore_errors=True)
    if proc.returncode != 0:
        tail = "\n".join(stderr.decode(errors="replace").strip().splitlines()[-20:])
        raise BenchError(f"{side}: exit {proc.returncode}\n{tail}")
    r = json.loads(stdout.decode().strip().splitlines()[-1])
    return Run(
        side,
        float(r["seconds"]),
        int(r["pages"]),
        [int(i) for i in r["separators"]],
        r["parts"],
        r["attention"],
        peak,
        int(r["max_rss_kib"]),
    )


@dataclass
class Score:
    found: int
    missed: int
    false_splits: int
    exact: int  # children whose page range is a document's
    marks: int  # ... and whose ASN and tags are the document's too


def score(run: Run, truth: Batch) -> Score:
    per = 2 if truth.spec.duplex else 1
    true_sheets = {i // per for i in truth.separator_pages}
    split_sheets = {i // per for i in run.separators}
    documents = {(d.first, d.last): d for d in truth.documents}
    exact = marks = 0
    for part in run.parts:
        first, last, asn, tags = part
        doc = documents.get((int(str(first)), int(str(last))))
        if doc is None:
            continue
        exact += 1
        tag_list = [str(t) for t in tags] if isinstance(tags, list) else []
        if asn == doc.asn and sorted(tag_list) == sorted(doc.tags):
            marks += 1
    return Score(
        found=len(true_sheets & split_sheets),
        missed=len(true_sheets - split_sheets),
        false_splits=len(split_sheets - true_sheets),
        exact=exact,
        marks=marks,
    )


@dataclass
class Side:
    name: str
    runs: list[Run] = field(default_factory=list)
    scores: list[Score] = field(default_factory=list)

    def rate(self) -> float:
        return median([r.pages / r.seconds for r in self.runs])

    def worst(self) -> Score:
        return Score(
            found=min(s.found for s in self.scores),
            missed=max(s.missed for s in self.scores),
            false_splits=max(s.false_splits for s in self.scores),
            exact=min(s.exact for s in self.scores),
            marks=min(s.marks for s in self.scores),
        )


def mb(n: float) -> str:
    return f"{n / 1e6:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=300, help="A4 pages in the batch (300)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--child", nargs=3, metavar=("SIDE", "BATCH", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        side, batch_path, out = args.child
        child_main(side, Path(batch_path), Path(out))
        return
    if args.pages < 4 or args.rounds < 1:
        ap.error("need --pages >= 4 and --rounds >= 1")

    t_gen = time.monotonic()
    truth = cached_batch(CACHE, BatchSpec(pages=args.pages, seed=args.seed))
    gen_seconds = time.monotonic() - t_gen
    size = truth.path.stat().st_size
    print(
        f"batch: {truth.path.relative_to(REPO)} ({len(truth.pages)} pages, {mb(size)} MB, "
        f"{'made' if gen_seconds > 1 else 'cached'} in {gen_seconds:.0f} s)",
        file=sys.stderr,
    )

    sides = {name: Side(name) for name in SIDES}
    work = Path(tempfile.mkdtemp(prefix="ingestd-bench-split-", dir=os.environ.get("BENCH_DIR")))
    load_before = os.getloadavg()[0]
    t_all = time.monotonic()
    try:
        for rnd in range(args.rounds):
            order = SIDES if rnd % 2 == 0 else SIDES[::-1]
            for name in order:
                run = run_side(name, truth.path, work)
                if name == "ingestd" and run.attention is not None:
                    raise BenchError(f"ingestd's plan needs attention: {run.attention}")
                sides[name].runs.append(run)
                sides[name].scores.append(score(run, truth))
                print(
                    f"round {rnd + 1} {name}: {run.seconds:.1f} s, "
                    f"{run.pages / run.seconds:.2f} pages/s",
                    file=sys.stderr,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - t_all
    load_after = os.getloadavg()[0]
    report(truth, sides, size, args.rounds, elapsed, (load_before, load_after))
    print(tiers(truth.path))


def tiers(batch: Path) -> str:
    """How ingestd's scan read this batch's pages (untimed, after the rounds)."""
    from worker.split.pageimages import Source, page_images
    from worker.split.scan import scan_image

    total = full = rendered = 0
    for page in page_images(batch):
        scan_image(page, policy().symbologies)
        total += 1
        full += page.has_full and page.source is Source.jpeg
        rendered += page.source is Source.render
    return (
        f"ingestd's tiers on this batch: {total - full} of {total} pages read from the "
        f"half-size JPEG decode alone, {full} also decoded at full size (for the crop of a "
        f"region the half-size passes did not explain), {rendered} rendered"
    )


def report(
    truth: Batch,
    sides: dict[str, Side],
    size: int,
    rounds: int,
    elapsed: float,
    load: tuple[float, float],
) -> None:
    ing, pl = sides["ingestd"], sides["paperless"]
    si, sp = ing.worst(), pl.worst()
    sheets = truth.separator_sheets
    docs = len(truth.documents)
    back = sum(
        1
        for i in truth.separator_pages
        if i % 2 == 1 and truth.pages[i].codes and not truth.pages[i - 1].codes
    )
    speed = ing.rate() / pl.rate()
    disk = max(r.peak_disk for r in ing.runs)
    rss_i = max(r.max_rss_kib for r in ing.runs) * 1024
    rss_p = max(r.max_rss_kib for r in pl.runs) * 1024

    def runs(side: Side) -> str:
        return " ".join(f"{r.pages / r.seconds:.2f}" for r in side.runs)

    print(
        f"\nsplit benchmark: {len(truth.pages)} A4 pages at 300 dpi (gray JPEG q85, noise, dust, "
        f"±3° skew, duplex), {docs} documents, {sheets} separator sheets ({back} on the back, "
        f"large and small, some weak, some upside down), {mb(size)} MB; {os.cpu_count()} cores, "
        f"zxing-cpp {version('zxing-cpp')}, pypdfium2 {version('pypdfium2')}, pikepdf "
        f"{version('pikepdf')}; medians of {rounds} round(s), order alternating, accuracy and "
        f"peaks of the worst round; {elapsed:.0f} s; load average {load[0]:.1f} before, "
        f"{load[1]:.1f} after"
    )
    print_table(
        ["measure", "ingestd", "paperless method", "ratio ingestd/paperless", "goal", "runs"],
        [
            [
                "pages/s (scan, plan, write children)",
                f"{ing.rate():.2f}",
                f"{pl.rate():.2f}",
                f"{speed:.2f}",
                f">= {GOAL_SPEED:.1f}",
                f"{runs(ing)} / {runs(pl)}",
            ],
            [
                f"separator sheets found (of {sheets})",
                si.found,
                sp.found,
                f"{si.found / max(1, sp.found):.2f}",
                f"{sheets} (100 %)",
                "-",
            ],
            ["separator sheets missed", si.missed, sp.missed, "-", "0", "-"],
            ["false splits", si.false_splits, sp.false_splits, "-", "0", "-"],
            [
                f"children with the document's pages (of {docs})",
                si.exact,
                sp.exact,
                f"{si.exact / max(1, sp.exact):.2f}",
                f"{docs}",
                "-",
            ],
            ["  ... and its ASN and tags", si.marks, "- (not read)", "-", f"{docs}", "-"],
            [
                "peak temp disk, MB (x batch)",
                f"{mb(disk)} ({disk / size:.2f}x)",
                f"{mb(max(r.peak_disk for r in pl.runs))} "
                f"({max(r.peak_disk for r in pl.runs) / size:.2f}x)",
                "-",
                f"<= {GOAL_DISK:.0f}x",
                "-",
            ],
            ["peak memory (RSS of the process), MB", mb(rss_i), mb(rss_p), "-", "bounded", "-"],
        ],
    )
    met = {
        f"pages/s >= {GOAL_SPEED:.0f}x the paperless method ({speed:.2f}x)": speed >= GOAL_SPEED,
        f"every separator found ({si.found}/{sheets})": si.missed == 0,
        f"no false split ({si.false_splits})": si.false_splits == 0,
        f"temp disk <= {GOAL_DISK:.0f}x the batch ({disk / size:.2f}x)": disk <= GOAL_DISK * size,
        f"every child exact with its ASN and tags ({si.marks}/{docs})": si.marks == docs,
    }
    for goal, ok in met.items():
        print(f"goal: {goal}: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    run_main(main, "the split children")
