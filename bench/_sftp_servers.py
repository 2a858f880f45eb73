"""The two SFTP servers bench/sftp.py compares, each started and stopped by the bench: a
private OpenSSH sshd with internal-sftp (also with an fsync per file) and a real
``ingestd serve`` on a durable embedded PostgreSQL; and the helpers they share."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

# The project root, not bench/: bench/queue.py would otherwise shadow the stdlib's queue.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench._common import BenchError, free_port, toml_str
from ingestd.demo.samples import pdf_bytes

SSHD = "/usr/sbin/sshd"
# The console script next to the interpreter running us: the venv's `ingestd`.
INGESTD = str(Path(sys.executable).with_name("ingestd"))
KEX = "curve25519-sha256@libssh.org"  # both servers know it by this name
HOSTKEY = "ssh-ed25519"
MB = 1_000_000
CLIENT_TIMEOUT = 900.0  # seconds for one batch of sftp clients, the 200 MB file included
INGEST_TIMEOUT = 300.0  # seconds to wait for uploaded files to show up in `documents`
START_TIMEOUT = 60.0  # seconds for a server to accept TCP connections
STOP_TIMEOUT = 60.0  # seconds for a server to exit after SIGTERM


# -- helpers ----------------------------------------------------------------------------
def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def wait_listening(port: int, proc: subprocess.Popen[bytes], log_path: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited with {proc.returncode}:\n{tail(log_path)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    raise BenchError(
        f"{what} not listening on {port} after {START_TIMEOUT:.0f} s:\n{tail(log_path)}"
    )


def terminate(proc: subprocess.Popen[bytes] | None) -> int | None:
    """SIGTERM, a bounded wait, then SIGKILL; the exit code (None if it had to be killed)."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            return None
    return proc.returncode


def write_pdf(path: Path, text: str, size: int, seed: int) -> Path:
    # Callers vary text and seed per file and round: ingestd must see no duplicates.
    path.write_bytes(pdf_bytes(text, pad_to=size, seed=seed))
    return path


# -- servers ----------------------------------------------------------------------------
class OpenSSH:
    """A private sshd serving internal-sftp; uploads go to absolute paths in its inbox."""

    name = "OpenSSH internal-sftp"

    def __init__(self, work: Path, client_pub: str) -> None:
        self.dir = work / "openssh"
        self.inbox = self.dir / "inbox"
        self.log = self.dir / "sshd.log"
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.port = free_port()
        self.client_pub = client_pub
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.inbox.mkdir(parents=True)
        host_key = self.dir / "host_ed25519"
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "bench-sshd",
                "-f",
                str(host_key),
            ],
            check=True,
            timeout=30,
        )
        authorized = self.dir / "authorized_keys"
        authorized.write_text(self.client_pub + "\n")
        authorized.chmod(0o600)
        config = self.dir / "sshd_config"
        config.write_text(
            f"ListenAddress 127.0.0.1\n"
            f"Port {self.port}\n"
            f"HostKey {host_key}\n"
            f"AuthorizedKeysFile {authorized}\n"
            "PidFile none\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PermitRootLogin prohibit-password\n"
            "AuthenticationMethods publickey\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UseDNS no\n"
            "X11Forwarding no\n"
            "AllowTcpForwarding no\n"
            "PrintMotd no\n"
            # 50 clients log in at once: the default 10:30:100 would drop some of them.
            "MaxStartups 100:30:200\n"
            "MaxSessions 100\n"
            "LogLevel ERROR\n"
            "Subsystem sftp internal-sftp\n"
        )
        if os.geteuid() == 0:
            # The privilege-separation directory a root sshd insists on; a system path
            # the distribution's sshd uses too, so it is left in place afterwards.
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
            )
        wait_listening(self.port, self.proc, self.log, "sshd")

    def target(self, name: str) -> str:
        return str(self.inbox / name)

    def after_upload(self) -> None:
        # Keep the disk from filling up over the rounds; not part of the timing.
        shutil.rmtree(self.inbox)
        self.inbox.mkdir()

    def stop(self) -> None:
        terminate(self.proc)


class OpenSSHFsync:
    """The same sshd, with `put -f`: the client asks for fsync@openssh.com before CLOSE.

    internal-sftp alone acknowledges a file still in the page cache; this is the OpenSSH
    setup with the durability ingestd gives every upload.
    """

    name = "OpenSSH put -f (fsync)"
    put = "put -f"

    def __init__(self, sshd: OpenSSH) -> None:
        self.sshd = sshd
        self.user, self.port, self.log = sshd.user, sshd.port, sshd.log

    def target(self, name: str) -> str:
        return self.sshd.target(name)

    def after_upload(self) -> None:
        self.sshd.after_upload()


class Ingestd:
    """``ingestd serve`` with one SFTP account; the account's root is its inbox."""

    name = "ingestd"
    user = "bench"

    def __init__(self, work: Path, client_pub: str, conninfo: str, processes: int = 0) -> None:
        self.processes = processes
        self.dir = work / "ingestd"
        self.config = self.dir / "ingestd.toml"
        self.log = self.dir / "serve.log"
        self.port = free_port()
        self.client_pub = client_pub
        self.conninfo = conninfo
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: psycopg.Connection[tuple[Any, ...]] | None = None

    def start(self) -> None:
        self.dir.mkdir(parents=True)
        self.config.write_text(
            "[database]\n"
            f"url = {toml_str(self.conninfo)}\n"
            "[paths]\n"
            f"state_dir = {toml_str(str(self.dir / 'state'))}\n"
            f"spool = {toml_str(str(self.dir / 'spool'))}\n"
            "[log]\n"
            'format = "json"\n'
            'level = "warning"\n'  # logs stay small; warnings and errors still show up
            "[sftp]\n"
            f'listen = "127.0.0.1:{self.port}"\n'
            # 50 clients from one address at once: above the per-IP default of 20.
            "max_connections = 200\n"
            "max_connections_per_ip = 100\n"
            f"processes = {self.processes}\n"
            "[[sftp.accounts]]\n"
            f"username = {toml_str(self.user)}\n"
            'tenant = "bench"\n'
            f"authorized_keys = [{toml_str(self.client_pub)}]\n"
        )
        for cmd in (["migrate"], ["tenant", "create", "bench"], ["worker", "--drain"]):
            res = subprocess.run(
                [INGESTD, "--config", str(self.config), *cmd],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if res.returncode != 0:
                raise BenchError(
                    f"ingestd {' '.join(cmd)}: exit {res.returncode}\n{res.stdout}{res.stderr}"
                )
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [INGESTD, "--config", str(self.config), "serve"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_listening(self.port, self.proc, self.log, "ingestd serve")
        self.conn = psycopg.connect(self.conninfo, autocommit=True)

    def target(self, name: str) -> str:
        return name

    def after_upload(self) -> None:
        pass  # ingestd empties its spool itself

    def committed(self, prefix: str) -> tuple[int, float | None]:
        """Documents whose name starts with ``prefix``, and the epoch of the last commit."""
        assert self.conn is not None
        row = self.conn.execute(
            "SELECT count(*), extract(epoch FROM max(created_at))::float8 FROM documents"
            " WHERE original_filename LIKE %s",
            (prefix + "%",),
        ).fetchone()
        assert row is not None
        return int(row[0]), (float(row[1]) if row[1] is not None else None)

    def wait_ingested(self, prefix: str, expected: int) -> tuple[int, float | None]:
        """Poll (bounded) until ``expected`` documents exist; (count, last created_at)."""
        deadline = time.monotonic() + INGEST_TIMEOUT
        while True:
            count, last = self.committed(prefix)
            if count >= expected or time.monotonic() > deadline:
                return count, last
            if self.proc is not None and self.proc.poll() is not None:
                raise BenchError(
                    f"ingestd serve exited with {self.proc.returncode} while "
                    f"ingesting:\n{tail(self.log)}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        code = terminate(self.proc)
        if self.proc is not None and code != 0:
            print(f"ingestd serve: exit {code} on SIGTERM\n{tail(self.log)}", file=sys.stderr)
        # At level "warning" every line is worth a look, and the log goes with the temp dir:
        # summarize it (one sftp.handshake_failed is expected, from the readiness probe).
        events: Counter[str] = Counter()
        with contextlib.suppress(OSError):
            for line in self.log.read_text(errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                    events[f"{entry.get('level')} {entry.get('event')}"] += 1
                except (ValueError, AttributeError):
                    events["(not JSON: tracebacks, other loggers)"] += 1
        if events:
            print(
                "ingestd serve log: " + ", ".join(f"{k} x{n}" for k, n in events.items()),
                file=sys.stderr,
            )


Server = OpenSSH | OpenSSHFsync | Ingestd
