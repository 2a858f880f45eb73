"""SFTP upload throughput: ingestd's SFTP server next to OpenSSH's internal-sftp, in one run.

Both servers listen on 127.0.0.1 and get the same uploads from the same OpenSSH ``sftp -b``
client with the same options (cipher, key exchange and host key type pinned, the same for
both). The baseline is a private sshd (own config, host key and authorized_keys;
``Subsystem sftp internal-sftp``); the product is a real ``ingestd serve`` on a durable
embedded PostgreSQL. Workloads, alternating the two servers round by round:

1. one 200 MB file (MB/s);
2. 200 files of 300 KB in one session (files/s);
3. 50 concurrent clients, 20 files of 300 KB each (files/s).

The upload figure is from starting the client(s) to their exit: the CLOSE-to-client rate
a scanner sees. For ingestd, "incl. ingest" runs until the last document is committed
(documents.created_at). Every file is distinct (per round too), so none is a duplicate.

    .venv/bin/python bench/sftp.py [--rounds 3] [--concurrent-rounds 1] [--small]
                                   [--cipher aes128-gcm@openssh.com] [--only openssh|ingestd]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# The project root, not bench/: bench/queue.py would otherwise shadow the stdlib's queue.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import paramiko
import psycopg

from bench._common import BenchError, bench_cluster, median, print_table, run_main
from bench._sftp_client import Client
from bench._sftp_servers import (
    HOSTKEY,
    INGEST_TIMEOUT,
    INGESTD,
    KEX,
    MB,
    Ingestd,
    OpenSSH,
    OpenSSHFsync,
    Server,
    write_pdf,
)


@dataclass(frozen=True)
class Plan:
    big: int  # bytes of the single large file
    files: int  # files in the one-session workload
    file_size: int
    clients: int
    per_client: int


FULL = Plan(big=200 * MB, files=200, file_size=300_000, clients=50, per_client=20)
SMALL = Plan(big=20 * MB, files=40, file_size=300_000, clients=10, per_client=5)


# -- workloads --------------------------------------------------------------------------
@dataclass
class Result:
    label: str
    unit: str
    upload: dict[str, list[float]] = field(default_factory=dict)  # server name -> rates
    ingest: list[float] = field(default_factory=list)  # ingestd rates incl. commit
    ingested: list[tuple[int, int]] = field(default_factory=list)  # (found, expected)


def measure(
    client: Client,
    server: Server,
    result: Result,
    batches: list[Path],
    prefix: str,
    amount: float,
    files: int,
) -> None:
    """Upload ``batches`` to ``server``; record ``amount`` per second (and for ingestd the
    rate until the ``files`` documents named ``prefix*`` are committed)."""
    # Flush what earlier uploads left dirty in the page cache so that its writeback is not
    # billed to this measurement (internal-sftp does not fsync; ingestd may).
    os.sync()
    start_wall, elapsed = client.run(server, batches)
    result.upload.setdefault(server.name, []).append(amount / elapsed)
    line = f"{result.label}, {server.name}: {amount / elapsed:.1f} {result.unit} upload"
    if isinstance(server, Ingestd):
        count, last = server.wait_ingested(prefix, files)
        result.ingested.append((count, files))
        if count >= files and last is not None:
            # created_at is when the INSERT's transaction began, which can precede the
            # client's exit (it still tears the connection down): never beat the upload.
            result.ingest.append(amount / max(last - start_wall, elapsed))
            line += f", {result.ingest[-1]:.1f} incl. ingest"
        else:
            line += f", only {count}/{files} ingested after {INGEST_TIMEOUT:.0f} s"
    print(line, file=sys.stderr)
    server.after_upload()


def order(servers: list[Server], rnd: int) -> list[Server]:
    # Alternate who goes first, so neither side always gets the warmer (or fuller) machine.
    return servers if rnd % 2 == 0 else servers[::-1]


def run_big(client: Client, servers: list[Server], src: Path, plan: Plan, rounds: int) -> Result:
    res = Result(f"1 file of {plan.big // MB} MB", "MB/s")
    for rnd in range(rounds):
        # Fresh content per round: the same bytes again would be a duplicate for ingestd.
        local = write_pdf(src / "big.pdf", f"sftp bench big r{rnd}", plan.big, rnd)
        prefix = f"big-r{rnd}-"
        for server in order(servers, rnd):
            batch = client.puts(server, [(local, prefix + "scan.pdf")])
            measure(client, server, res, [batch], prefix, plan.big / MB, 1)
        local.unlink()
    return res


def run_many(client: Client, servers: list[Server], src: Path, plan: Plan, rounds: int) -> Result:
    res = Result(f"{plan.files} files of {plan.file_size // 1000} KB, one session", "files/s")
    for rnd in range(rounds):
        d = src / f"many-{rnd}"
        d.mkdir()
        prefix = f"many-r{rnd}-"
        files = [
            (
                write_pdf(d / f"{i:05d}.pdf", f"sftp bench many r{rnd}", plan.file_size, i),
                f"{prefix}{i:05d}.pdf",
            )
            for i in range(plan.files)
        ]
        for server in order(servers, rnd):
            batch = client.puts(server, files)
            measure(client, server, res, [batch], prefix, plan.files, plan.files)
        shutil.rmtree(d)
    return res


def run_concurrent(
    client: Client, servers: list[Server], src: Path, plan: Plan, rounds: int
) -> Result:
    total = plan.clients * plan.per_client
    res = Result(
        f"{plan.clients} clients x {plan.per_client} files of {plan.file_size // 1000} KB",
        "files/s",
    )
    for rnd in range(rounds):
        d = src / f"conc-{rnd}"
        d.mkdir()
        prefix = f"conc-r{rnd}-"
        per_client = [
            [
                (
                    write_pdf(
                        d / f"{c:03d}-{i:03d}.pdf",
                        f"sftp bench conc r{rnd} c{c}",
                        plan.file_size,
                        i,
                    ),
                    f"{prefix}{c:03d}-{i:03d}.pdf",
                )
                for i in range(plan.per_client)
            ]
            for c in range(plan.clients)
        ]
        for server in order(servers, rnd):
            batches = [client.puts(server, files) for files in per_client]
            measure(client, server, res, batches, prefix, total, total)
        shutil.rmtree(d)
    return res


# -- main -------------------------------------------------------------------------------
def fmt(values: list[float]) -> str:
    return f"{median(values):.1f}" if values else "-"


def openssh_version() -> str:
    res = subprocess.run(["ssh", "-V"], capture_output=True, text=True, timeout=10)
    return (res.stderr or res.stdout).strip().split(",")[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of workloads 1 and 2")
    ap.add_argument("--concurrent-rounds", type=int, default=1, help="rounds of workload 3")
    # aes128-gcm: offered by both, AES-NI on both sides and no separate MAC, so the
    # comparison measures the SFTP servers rather than a MAC only one side does fast
    # (OpenSSH's default chacha20-poly1305 and umac are not in paramiko).
    ap.add_argument(
        "--cipher",
        default="aes128-gcm@openssh.com",
        choices=["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes256-ctr"],
    )
    ap.add_argument("--only", choices=["openssh", "ingestd"], default=None)
    ap.add_argument(
        "--processes", type=int, default=0, help="ingestd's sftp.processes (0: one per core)"
    )
    ap.add_argument(
        "--small",
        action="store_true",
        help="quick smoke run: 20 MB file, 40 files, 10 clients x 5 files",
    )
    args = ap.parse_args()
    if args.rounds < 1 or args.concurrent_rounds < 1:
        ap.error("--rounds and --concurrent-rounds must be at least 1")
    plan = SMALL if args.small else FULL
    want = {"openssh", "ingestd"} if args.only is None else {args.only}

    with contextlib.ExitStack() as stack:
        # Callbacks run in reverse: servers stop, then Postgres, then the temp dir goes.
        work = Path(tempfile.mkdtemp(prefix="ingestd-bench-sftp-", dir=os.environ.get("BENCH_DIR")))
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        src = work / "src"
        src.mkdir()
        client = Client(work, args.cipher)
        servers: list[Server] = []
        if "openssh" in want:
            sshd = OpenSSH(work, client.pub)
            stack.callback(sshd.stop)
            sshd.start()
            servers.append(sshd)
            servers.append(OpenSSHFsync(sshd))
        if "ingestd" in want:
            if not Path(INGESTD).exists():
                raise BenchError(f"{INGESTD} not found: run from the project venv")
            cluster = stack.enter_context(bench_cluster())
            with psycopg.connect(cluster.conninfo_for("postgres"), autocommit=True) as admin:
                admin.execute('CREATE DATABASE "sftpbench"')
            ingestd = Ingestd(work, client.pub, cluster.conninfo_for("sftpbench"), args.processes)
            stack.callback(ingestd.stop)
            ingestd.start()
            servers.append(ingestd)
        # Both must accept the pinned cipher (and log in) before anything is timed.
        for server in servers:
            client.run(server, [client.batch(["pwd"])])

        results = [
            run_big(client, servers, src, plan, args.rounds),
            run_many(client, servers, src, plan, args.rounds),
            run_concurrent(client, servers, src, plan, args.concurrent_rounds),
        ]

    rows = []
    for r in results:
        ssh_v = r.upload.get(OpenSSH.name, [])
        dur_v = r.upload.get(OpenSSHFsync.name, [])
        ing_v = r.upload.get(Ingestd.name, [])
        ratio = f"{median(ing_v) / median(ssh_v):.2f}" if ssh_v and ing_v else "-"
        ratio_f = f"{median(ing_v) / median(dur_v):.2f}" if dur_v and ing_v else "-"
        runs = " / ".join(
            " ".join(f"{v:.1f}" for v in vals) or "-" for vals in (ssh_v, dur_v, ing_v, r.ingest)
        )
        rows.append(
            [
                f"{r.label} ({r.unit})",
                fmt(ssh_v),
                fmt(dur_v),
                fmt(ing_v),
                ratio,
                ratio_f,
                fmt(r.ingest),
                runs,
            ]
        )

    mode = "--small" if args.small else "full"
    print(
        f"\nSFTP upload benchmark ({mode}): {openssh_version()} sftp client -> 127.0.0.1, "
        f"cipher {args.cipher}" + (f", MAC {client.mac}" if client.mac else "") + ", "
        f"kex {KEX}, host key {HOSTKEY}; "
        f"{os.cpu_count()} cores, paramiko {paramiko.__version__}; medians of "
        f"{args.rounds} rounds ({args.concurrent_rounds} for the concurrent clients); "
        f"MB = 10^6 bytes"
    )
    print_table(
        [
            "workload",
            "OpenSSH internal-sftp",
            "OpenSSH put -f",
            "ingestd",
            "ratio ingestd/OpenSSH",
            "ratio ingestd/put -f",
            "ingestd incl. ingest",
            "runs (OpenSSH / put -f / ingestd / incl. ingest)",
        ],
        rows,
    )
    print(
        "note: internal-sftp answers CLOSE without fsync (sftp sends no fsync@openssh.com "
        "without -f); `put -f` fsyncs each file first; ingestd answers CLOSE only after "
        "the file and its spool entry are fsynced"
    )
    for r in results:
        if r.ingested:
            found = sum(n for n, _ in r.ingested)
            expected = sum(n for _, n in r.ingested)
            print(f"{r.label}: ingested: {found}/{expected}")
    big = results[0].upload
    if OpenSSH.name in big and Ingestd.name in big:
        big_ratio = median(big[Ingestd.name]) / median(big[OpenSSH.name])
        verdict = "met" if big_ratio >= 0.5 else "NOT met"
        # With --small the login (OpenSSH forks and re-execs sshd) weighs more than 20 MB.
        caveat = " - a --small run says little, judge a full one" if args.small else ""
        print(
            f"goal: ingestd at least half of OpenSSH's MB/s on the large file: "
            f"{verdict} ({big_ratio:.2f}){caveat}"
        )


if __name__ == "__main__":
    run_main(main, "servers")
