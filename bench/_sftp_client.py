"""The OpenSSH ``sftp -b`` client bench/sftp.py drives both servers with, with the same
options for either (cipher, key exchange and host key type pinned)."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from bench._common import BenchError
from bench._sftp_servers import CLIENT_TIMEOUT, HOSTKEY, KEX, Server, tail


# -- client -----------------------------------------------------------------------------
class Client:
    """The OpenSSH sftp client, identical options for either server."""

    def __init__(self, work: Path, cipher: str) -> None:
        self.dir = work / "client"
        self.dir.mkdir(parents=True)
        self.key = self.dir / "id_ed25519"
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "sftp-bench",
                "-f",
                str(self.key),
            ],
            check=True,
            timeout=30,
        )
        self.pub = self.key.with_suffix(".pub").read_text().strip()
        self.cipher = cipher
        # An AEAD cipher carries its own MAC; otherwise pin the MAC too, else the client
        # would pick umac with sshd and something else with paramiko.
        self.mac = None if "gcm" in cipher else "hmac-sha2-256-etm@openssh.com"
        self.batches = 0

    def argv(self, server: Server, batch: Path) -> list[str]:
        opts = {
            "StrictHostKeyChecking": "no",
            "UserKnownHostsFile": "/dev/null",
            "BatchMode": "yes",
            "IdentitiesOnly": "yes",  # only -i: no agent or ~/.ssh keys tried first
            "LogLevel": "ERROR",
            "Ciphers": self.cipher,
            # OpenSSH 9 would pick the post-quantum sntrup761x25519 with sshd (~100 ms more
            # per login here) and curve25519 with paramiko: pin one KEX and host key type.
            "KexAlgorithms": KEX,
            "HostKeyAlgorithms": HOSTKEY,
        }
        if self.mac:
            opts["MACs"] = self.mac
        # -F /dev/null: no user or system ssh_config (ControlMaster, other ciphers) applies.
        argv = [
            "sftp",
            "-F",
            "/dev/null",
            "-b",
            str(batch),
            "-i",
            str(self.key),
            "-P",
            str(server.port),
        ]
        for k, v in opts.items():
            argv += ["-o", f"{k}={v}"]
        return [*argv, f"{server.user}@127.0.0.1"]

    def batch(self, lines: list[str]) -> Path:
        self.batches += 1
        path = self.dir / f"batch-{self.batches:05d}.txt"
        path.write_text("".join(line + "\n" for line in lines))
        return path

    def puts(self, server: Server, files: list[tuple[Path, str]]) -> Path:
        put = getattr(server, "put", "put")
        return self.batch([f'{put} "{local}" "{server.target(name)}"' for local, name in files])

    def run(self, server: Server, batches: list[Path]) -> tuple[float, float]:
        """One sftp per batch file, started together: (wall-clock start, seconds to last exit)."""
        errs: list[IO[bytes]] = []
        procs: list[subprocess.Popen[bytes]] = []
        timed_out = threading.Event()

        def kill_all() -> None:
            timed_out.set()
            for p in procs:
                with contextlib.suppress(OSError):
                    p.kill()

        # Popen.wait(timeout) polls with sleeps of up to 50 ms, a visible error on a
        # sub-second upload; a plain wait() returns at the exit, and this timer bounds it.
        watchdog = threading.Timer(CLIENT_TIMEOUT, kill_all)
        watchdog.daemon = True
        try:
            for b in batches:
                errs.append(open(b.with_suffix(".err"), "w+b"))  # noqa: SIM115 - closed below
            watchdog.start()
            start_wall, start = time.time(), time.perf_counter()
            for b, err in zip(batches, errs, strict=True):
                procs.append(
                    subprocess.Popen(
                        self.argv(server, b),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                    )
                )
            for p in procs:
                p.wait()
            elapsed = time.perf_counter() - start
        finally:
            watchdog.cancel()
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for err in errs:
                err.close()
        if timed_out.is_set():
            raise BenchError(
                f"{server.name}: sftp clients killed, still running after {CLIENT_TIMEOUT:.0f} s"
                f"\nserver log:\n{tail(server.log)}"
            )
        failed = [(b, p.returncode) for b, p in zip(batches, procs, strict=True) if p.returncode]
        if failed:
            b, code = failed[0]
            raise BenchError(
                f"{server.name}: {len(failed)} of {len(procs)} sftp clients failed; the first "
                f"({b.name}) exited {code}:\n{tail(b.with_suffix('.err'))}\n"
                f"command: {' '.join(self.argv(server, b))}\n"
                f"server log:\n{tail(server.log)}"
            )
        return start_wall, elapsed
