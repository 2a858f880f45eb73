"""The web console and the WebDAV mount next to what they wrap, in one run (issue 31).

1. Search page: 20 users at once, each logged in with its own session, ask the search page
   with a filter (``/t/acme/?q=...&since=...``) of a real ``ingestd web``; p50 and p95 of
   the page next to the same query alone (ingestd.search on a pool, the same 20 threads at
   once) and to ``ingestd search`` as a command (a process per query). Goal: page p95
   <= 1.5x the query alone's p95.
2. Download of a 20 MB original: MB/s through the console (re-hashed against the archive
   as it is sent, audited) and through the WebDAV mount, next to reading the archived file
   from disk and hashing it once, which is what any verified copy costs (`sha256sum`).
   The clients are native, as a browser or a mapped drive is: curl with the session's
   cookie for the console, curl's GET of the mount's path (what every WebDAV client sends
   to read a file), both timed by curl itself from its connect to the last byte (a
   browser is already running: starting a curl process is no part of a download), and
   rclone copyto (Debian's; its row is timed from outside and includes starting rclone
   and its PROPFIND, a fixed cost a resident client such as Explorer or davfs2 does not
   pay per file). The timed rounds of curl discard the bytes (as `sha256sum` does),
   rclone's write a file; one untimed download through each client is checked against
   the archive's SHA-256. Goal: >= 0.8x.
3. A mapped drive opening the month folder of the corpus (PROPFIND Depth 1 listing every
   document), next to the folder's query alone (no goal in the issue: shown).

The corpus is bench/search.py's (the demo's letters as analysis stores them, nine in ten
for the searched tenant). Medians of several rounds: the machines here are noisy.

    python bench/web.py            # 5,000 documents, 20 users, 20 MB, 5 rounds
    python bench/web.py --small    # 300 documents, 5 users, 2 MB, 1 round (make test)
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds a queue.py, which would shadow the stdlib's queue module: take bench/ off
# the path, put the repository first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator

import httpx

from bench._common import BenchError, bench_cluster, free_port, median, print_table, run_main
from bench._web_download import PASSWORD, dav_folder, download_table, session
from bench.search import populate
from ingestd.config.load import parse_config
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.db.schema import migrate
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.passwords import hash_password
from ingestd.people import accounts
from ingestd.search.query import search

QUERY = "Rechnung"
SINCE = "2000-01-01"


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _config(root: Path, conninfo: str, port: int) -> Path:
    path = root / "ingestd.toml"
    path.write_text(
        "\n".join(
            [
                "[database]",
                f"url = {json.dumps(conninfo)}",
                "[paths]",
                f'state_dir = "{root / "state"}"',
                f'archive = "{root / "archive"}"',
                f'derived = "{root / "derived"}"',
                f'spool = "{root / "spool"}"',
                "[log]",
                'format = "json"',
                'level = "warning"',
                "[web]",
                f'listen = "127.0.0.1:{port}"',
                "login_failures = 1000",
                "[metrics]",
                'web_listen = "127.0.0.1:0"',
                "[intake]",
                'max_file_size = "64MiB"',
                "",
            ]
        )
    )
    return path


def _big_pdf(path: Path, size: int) -> bytes:
    """A file intake takes as a PDF, ``size`` bytes (incompressible, as scans are)."""
    head = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Length " + str(size).encode()
    head += b" >>\nstream\n"
    tail = b"\nendstream\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n"
    body = os.urandom(max(0, size - len(head) - len(tail)))
    data = head + body + tail
    path.write_bytes(data)
    return data


@contextlib.contextmanager
def _console(config: Path, port: int, log: Path) -> Iterator[str]:
    out = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ingestd.cli", "web", "--config", str(config)],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise BenchError(f"ingestd web exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/login", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise BenchError("ingestd web did not answer within 120 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()


def _concurrently(users: int, each: int, call: Callable[[int], None]) -> list[float]:
    """``users`` threads, each calling ``call`` ``each`` times, all started together;
    every call's seconds."""
    times: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(users)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        start.wait()
        for _ in range(each):
            t0 = time.perf_counter()
            try:
                call(n)
            except BaseException as exc:  # reported below, in the main thread
                errors.append(exc)
                return
            with lock:
                times.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise BenchError(f"a call failed: {errors[0]!r}")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=5000)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--requests", type=int, default=10, help="search pages per user and round")
    ap.add_argument("--mb", type=int, default=20, help="size of the downloaded original")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--small", action="store_true", help="300 documents, 5 users, 2 MB, 1 round")
    ap.add_argument(
        "--only",
        choices=["search", "download"],
        help="the search table, or the download and folder tables",
    )
    args = ap.parse_args()
    if args.small:
        args.docs, args.users, args.requests, args.mb, args.rounds = 300, 5, 4, 2, 1
    for tool in ("rclone", "curl"):
        if shutil.which(tool) is None:
            raise BenchError(f"{tool} is needed (Debian's: apt-get install {tool})")
    root = Path(tempfile.mkdtemp(prefix="ingestd-bench-web-"))
    try:
        with bench_cluster(durable=False) as cluster, Database(cluster.conninfo, max_size=24) as db:
            migrate(db)
            tenant_id = populate(db, args.docs)
            port = free_port()
            config_path = _config(root, cluster.conninfo, port)
            config = parse_config(tomllib.loads(config_path.read_text()), base=root)
            with db.transaction() as tx:
                accounts.add_member(tx, "bench", "acme", "user", hash_password(PASSWORD, 4))
                accounts.add_member(tx, "davbench", "acme", "webdav", hash_password(PASSWORD, 4))
            big = root / "big.pdf"
            data = _big_pdf(big, args.mb * 1024 * 1024)
            res = make_intake(config, db).ingest(
                IntakeItem(path=big, tenant="acme", filename="Grossscan.pdf")
            )
            if res.outcome is not Outcome.ingested or res.archive_path is None:
                raise BenchError(f"the big file was not archived: {res}")
            archived = config.paths.archive_dir / res.archive_path
            with _console(config_path, port, root / "web.log") as url:
                if args.only != "download":
                    _search_table(db, url, tenant_id, config_path, args)
                if args.only != "search":
                    download_table(url, res.document_id, archived, data, root, args)
                    _listing_table(db, url, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _search_table(
    db: Database, url: str, tenant_id: int, config_path: Path, args: argparse.Namespace
) -> None:
    sessions = [session(url) for _ in range(args.users)]
    for s in sessions:  # warm: templates compiled, pool connections open
        s.get("/t/acme/", params={"q": QUERY, "since": SINCE})

    def page(n: int) -> None:
        r = sessions[n].get("/t/acme/", params={"q": QUERY, "since": SINCE})
        if r.status_code != 200 or 'table class="hits"' not in r.text:
            raise BenchError(f"search page: {r.status_code}")

    def query(n: int) -> None:
        with db.transaction() as tx:
            if not search(tx, tenant_id, QUERY, 1000):
                raise BenchError("the query found nothing")

    rounds_page, rounds_query, rounds_cli = [], [], []
    for _ in range(args.rounds):
        rounds_page.append(_concurrently(args.users, args.requests, page))
        rounds_query.append(_concurrently(args.users, args.requests, query))
        cli = []
        for _ in range(3):
            t0 = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "ingestd.cli", "search", "--config", str(config_path),
                 "--tenant", "acme", QUERY],
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise BenchError(f"ingestd search: {done.stderr[-500:]}")
            cli.append(time.perf_counter() - t0)
        rounds_cli.append(cli)
    for s in sessions:
        s.close()

    def stat(rounds: list[list[float]], q: float) -> float:
        return median([_p(r, q) for r in rounds]) * 1000

    base50, base95 = stat(rounds_query, 0.5), stat(rounds_query, 0.95)
    rows = []
    for what, rounds in (
        (f"query alone (ingestd.search, {args.users} threads)", rounds_query),
        (f"search page with a filter ({args.users} users)", rounds_page),
        ("`ingestd search` command (a process each)", rounds_cli),
    ):
        p50, p95 = stat(rounds, 0.5), stat(rounds, 0.95)
        rows.append([what, f"{p50:.1f}", f"{p95:.1f}", f"{p50 / base50:.2f}x",
                     f"{p95 / base95:.2f}x"])  # fmt: skip
    print(f"\nSearch '{QUERY}' since {SINCE}: {args.docs:,} documents, {args.users} at once, "
          f"{args.requests} each, medians of {args.rounds} round(s)")  # fmt: skip
    print_table(["what", "p50 ms", "p95 ms", "p50 ratio", "p95 ratio (goal <= 1.5x)"], rows)


def _listing_table(db: Database, url: str, args: argparse.Namespace) -> None:
    """A mapped drive opening the month folder that holds the corpus (PROPFIND Depth 1,
    every document's name, size and date), next to the folder's query alone."""
    dav = httpx.Client(base_url=url, timeout=300, auth=("davbench", PASSWORD))
    folder = dav_folder(dav)
    _, year, month, _ = folder.split("/")
    params = {"tenant": "acme", "year": int(year), "month": int(month)}
    count = len(db.all("dav_month", params))
    query, propfind = [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        db.all("dav_month", params)
        query.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        r = dav.request("PROPFIND", f"/dav/{folder}", headers={"Depth": "1"})
        propfind.append(time.perf_counter() - t0)
        if (
            r.status_code != 207
            or r.text.count("<d:response") + r.text.count("<D:response") < count
        ):
            raise BenchError(f"PROPFIND {folder}: {r.status_code}, not every document")
    dav.close()
    rows = [[what, f"{median(t) * 1000:.1f}", f"{median(t) / median(query):.1f}x"]
            for what, t in (("the folder's query alone (baseline)", query),
                            ("WebDAV PROPFIND Depth 1", propfind))]  # fmt: skip
    print(f"\nA mapped drive opens a month folder of {count} documents, "
          f"medians of {args.rounds} round(s)")  # fmt: skip
    print_table(["what", "ms", "ratio"], rows)


if __name__ == "__main__":
    run_main(main, "the web bench")
