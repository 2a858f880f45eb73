"""bench/web.py's download table: a 20 MB original through the console, WebDAV with curl
and with rclone, next to reading and hashing the archived file (the baseline) and, for
scale, a plain file server."""

from __future__ import annotations

# bench/ holds a queue.py, which would shadow the stdlib's queue module: take bench/ off
# the path, put the repository first.
import argparse
import contextlib
import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench._common import BenchError, free_port, median, print_table

PASSWORD = "bench password 1"  # noqa: S105 (a throwaway person of the bench)


def session(url: str) -> httpx.Client:
    c = httpx.Client(base_url=url, timeout=120)
    page = c.get("/login")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    if token is None:
        raise BenchError("no login form")
    r = c.post("/login", data={"login": "bench", "password": PASSWORD, "csrf": token.group(1)})
    if r.status_code != 303:
        raise BenchError(f"login failed: {r.status_code}")
    return c


def download_table(
    url: str, doc_id: int | None, archived: Path, data: bytes, root: Path,
    args: argparse.Namespace,
) -> None:  # fmt: skip
    expected = hashlib.sha256(data).hexdigest()
    mb = len(data) / 1e6
    dav = httpx.Client(base_url=url, timeout=300, auth=("davbench", PASSWORD))
    console = session(url)
    cookie = "; ".join(f"{k}={v}" for k, v in console.cookies.items())
    folder = dav_folder(dav)
    obscured = subprocess.run(["rclone", "obscure", PASSWORD], capture_output=True, text=True,
                              check=True, timeout=60).stdout.strip()  # fmt: skip
    rclone_env = {
        **os.environ,
        "RCLONE_CONFIG": str(root / "rclone.conf"),
        "RCLONE_CONFIG_A_TYPE": "webdav",
        "RCLONE_CONFIG_A_URL": url + "/dav/",
        "RCLONE_CONFIG_A_VENDOR": "other",
        "RCLONE_CONFIG_A_USER": "davbench",
        "RCLONE_CONFIG_A_PASS": obscured,
    }
    console_get = ["curl", "-sS", "-H", f"Cookie: {cookie}", f"{url}/t/acme/d/{doc_id}/original"]
    dav_get = ["curl", "-sS", "-u", f"davbench:{PASSWORD}", f"{url}/dav/{folder}Grossscan.pdf"]
    rclone = ["rclone", "copyto", f"A:{folder}Grossscan.pdf"]

    def fetch(command: list[str], out: Path) -> str:
        done = subprocess.run(
            [*command, str(out)] if command[0] == "rclone" else [*command, "-o", str(out)],
            capture_output=True, text=True, timeout=600, env=rclone_env, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise BenchError(f"{command[0]}: {done.stderr[-500:]}")
        return done.stdout

    # Each client once, untimed, into a file checked against the archive's SHA-256.
    for name, command in (("console", console_get), ("webdav", dav_get), ("rclone", rclone)):
        out = root / f"{name}-copy.pdf"
        fetch(command, out)
        if hashlib.sha256(out.read_bytes()).hexdigest() != expected:
            raise BenchError(f"the {name} download is not the archived file")
        out.unlink()

    def timed(command: list[str]) -> float:
        # curl writes into /dev/null and says how long the transfer took, from its
        # connect to the last byte (what a resident client, a browser, waits; not the
        # start of a curl process). rclone writes a temporary file and renames it over
        # its destination (it would replace /dev/null itself): a file of the bench's,
        # timed from outside, its start included.
        if command[0] == "curl":
            return float(fetch([*command, "-w", "%{time_total}"], Path(os.devnull)))
        t0 = time.perf_counter()
        fetch(command, root / "rclone-copy.pdf")
        return time.perf_counter() - t0

    disk, web, webdav, rclone_t, plain = [], [], [], [], []
    with plain_server(archived.parent) as plain_url:
        plain_get = ["curl", "-sS", f"{plain_url}/{archived.name}"]
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            h = hashlib.sha256()
            with archived.open("rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            disk.append(time.perf_counter() - t0)
            web.append(timed(console_get))
            webdav.append(timed(dav_get))
            rclone_t.append(timed(rclone))
            plain.append(timed(plain_get))
    console.close()
    dav.close()
    base = mb / median(disk)
    rows = [[what, f"{median(t):.3f}", f"{mb / median(t):.0f}", f"{mb / median(t) / base:.2f}x"]
            for what, t in (("read and hash the archived file (baseline)", disk),
                            ("console download, curl (verified, audited)", web),
                            ("WebDAV GET, curl (verified, audited)", webdav),
                            ("WebDAV, rclone copyto (its start included)", rclone_t),
                            ("for scale: a plain file server, curl (no login, hash, audit)",
                             plain))]  # fmt: skip
    print(f"\nDownload of a {mb:.0f} MB original, medians of {args.rounds} round(s)")
    print_table(["what", "seconds", "MB/s", "ratio (goal >= 0.8x)"], rows)


@contextlib.contextmanager
def plain_server(folder: Path) -> Iterator[str]:
    """Python's own http.server over ``folder``: what sending the file costs on this
    machine with nothing of ours (no login, no hash, no audit), for scale."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port),
         "--directory", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/", timeout=5)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise BenchError("python -m http.server did not answer") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def dav_folder(dav: httpx.Client) -> str:
    """acme/<yyyy>/<mm>/ of the big file (the tree by arrival month: the newest)."""
    r = dav.request("PROPFIND", "/dav/acme/", headers={"Depth": "1"})
    years = re.findall(r"/dav/acme/(\d{4})/", r.text)
    if not years:
        raise BenchError(f"no year in /dav/acme/: {r.status_code}")
    r = dav.request("PROPFIND", f"/dav/acme/{years[-1]}/", headers={"Depth": "1"})
    months = re.findall(rf"/dav/acme/{years[-1]}/(\d\d)/", r.text)
    if not months:
        raise BenchError(f"no month in /dav/acme/{years[-1]}/")
    return f"acme/{years[-1]}/{months[-1]}/"
