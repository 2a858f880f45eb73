"""An in-process SFTP service (spool, spool intake, server) on a free loopback port, with
real clients: OpenSSH sftp/scp/ssh, lftp, curl, paramiko and asyncssh.

Accounts: scan1 (tenant acme, password + key), scan2 (acme, password), beta1 (beta,
password). Log lines go to a JSON file the tests read back.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
import pytest

from ingestd import log
from ingestd.config.load import parse_config
from ingestd.config.settings import Config
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.events.outbox import EventLog
from ingestd.passwords import hash_password
from ingestd.sources.sftp.service import SftpService
from tests.conftest import read_events, wait_until
from tests.fixtures.files import pdf_bytes

PASSWORDS = {"scan1": "secret-1", "scan2": "secret-2", "beta1": "secret-3"}
SSH_OPTS = [
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "ConnectTimeout=20",
]


@pytest.fixture(scope="session")
def password_hashes() -> dict[str, str]:
    # Cost 4: the tests check behaviour, not bcrypt's slowness.
    return {user: hash_password(pw, rounds=4) for user, pw in PASSWORDS.items()}


@pytest.fixture(scope="session")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ed25519 key pair made by ssh-keygen, as a scanner admin would."""
    key = tmp_path_factory.mktemp("clientkey") / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "scanner", "-f", str(key)], check=True
    )
    return key


@dataclass
class Rig:
    config: Config
    service: SftpService
    db: Database
    root: Path
    key: Path
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def port(self) -> int:
        assert self.service.server is not None
        return self.service.server.address[1]

    @property
    def spool(self) -> Any:
        return self.service.spool

    # -- what happened --------------------------------------------------------------------
    def logs(self, event: str | None = None) -> list[dict[str, Any]]:
        return read_events(self.log_path, event)

    def documents(self) -> list[dict[str, Any]]:
        with self.db.transaction() as tx:
            return tx.raw(
                "SELECT d.id, t.name AS tenant, d.original_filename, d.source, d.source_subdir,"
                " d.size_bytes, d.sha256 FROM documents d JOIN tenants t ON t.id = d.tenant_id"
                " ORDER BY d.id"
            )

    def documents_or_none(self) -> list[dict[str, Any]] | None:
        """The documents, or None while the database is unreachable."""
        from ingestd.errors import DatabaseError

        try:
            return self.documents()
        except DatabaseError:
            return None

    def wait_documents(self, n: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        wait_until(lambda: len(self.documents()) >= n, timeout=timeout)
        return self.documents()

    def wait_usage(self, account: str, expected: int, timeout: float = 30.0) -> None:
        """The account's pending bytes reach ``expected``: at once in this process, within
        a second or two with SFTP processes (they give back what they reserved ahead once
        the account is idle there)."""
        wait_until(lambda: self.spool.usage(account) == expected, timeout=timeout)

    def wait_idle(self, timeout: float = 60.0) -> None:
        wait_until(self.service.loop.idle, timeout=timeout)

    def operator_events(self, type: str) -> list[dict[str, Any]]:
        with self.db.transaction() as tx:
            return tx.raw(
                "SELECT type, tenant, detail, trace_id FROM operator_events "
                "WHERE type = %(t)s ORDER BY id",
                {"t": type},
            )

    def failed_notes(self) -> list[Path]:
        return sorted((self.config.paths.state_dir / "failed").rglob("*.error.txt"))

    def partials(self) -> list[Path]:
        return sorted(self.spool.partial_dir.iterdir())

    # -- clients --------------------------------------------------------------------------
    def write_pdf(self, name: str, seed: int, size: int = 20_000) -> Path:
        path = self.root / "upload" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pdf_bytes(f"{name} {seed}", pad_to=size, seed=seed))
        return path

    @contextlib.contextmanager
    def paramiko(
        self,
        user: str = "scan1",
        *,
        password: str | None = None,
        key: bool = False,
        source_ip: str | None = None,
    ) -> Iterator[paramiko.SFTPClient]:
        source = (source_ip, 0) if source_ip else None
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=20, source_address=source)
        transport = paramiko.Transport(sock)
        try:
            transport.connect()
            if key:
                pkey = paramiko.Ed25519Key.from_private_key_file(str(self.key))
                transport.auth_publickey(user, pkey)
            else:
                transport.auth_password(user, password or PASSWORDS[user])
            client = paramiko.SFTPClient.from_transport(transport)
            assert client is not None
            yield client
            client.close()
        finally:
            transport.close()

    def askpass(self, password: str) -> dict[str, str]:
        """Environment that makes OpenSSH (and lftp's ssh) read the password from a script."""
        script = self.root / f"askpass-{abs(hash(password))}.sh"
        script.write_text(f"#!/bin/sh\nprintf '%s\\n' '{password}'\n")
        script.chmod(stat.S_IRWXU)
        return {"SSH_ASKPASS": str(script), "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"}

    def ssh_auth_opts(self, user: str, *, password: bool) -> tuple[list[str], dict[str, str]]:
        if password:
            # BatchMode=no first: `sftp -b` adds BatchMode=yes, and ssh keeps the first value.
            opts = [
                "-o",
                "BatchMode=no",
                "-o",
                "PreferredAuthentications=password",
                "-o",
                "PubkeyAuthentication=no",
            ]
            return opts, self.askpass(PASSWORDS[user])
        opts = [
            "-i",
            str(self.key),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "PreferredAuthentications=publickey",
        ]
        return opts, {}

    def sftp_batch(
        self,
        user: str,
        commands: list[str],
        *,
        password: bool = False,
        extra: list[str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        batch = self.root / "batch.txt"
        batch.write_text("\n".join(commands) + "\n")
        opts, env = self.ssh_auth_opts(user, password=password)
        return subprocess.run(
            [
                "sftp",
                *opts,
                "-b",
                str(batch),
                "-P",
                str(self.port),
                *SSH_OPTS,
                *(extra or []),
                f"{user}@127.0.0.1",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=cwd or self.root / "upload",
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
        )


def closed_before_banner(rig: Rig, source_ip: str | None = None) -> bool:
    """True if the server closes a new TCP connection without sending its SSH banner."""
    source = (source_ip, 0) if source_ip else None
    sock = socket.create_connection(("127.0.0.1", rig.port), timeout=20, source_address=source)
    try:
        data = sock.recv(64)
    except ConnectionResetError:
        data = b""
    finally:
        sock.close()
    return data == b""


def _accounts(hashes: dict[str, str], key: Path) -> list[dict[str, Any]]:
    pub = key.with_suffix(".pub").read_text().strip()
    return [
        {
            "username": "scan1",
            "tenant": "acme",
            "password_hash": hashes["scan1"],
            "authorized_keys": [pub],
        },
        {"username": "scan2", "tenant": "acme", "password_hash": hashes["scan2"]},
        {"username": "beta1", "tenant": "beta", "password_hash": hashes["beta1"]},
    ]


@pytest.fixture
def make_rig(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    db: Database,
    password_hashes: dict[str, str],
    client_key: Path,
) -> Iterator[Callable[..., Rig]]:
    # Sessions in this process unless the module asks for SFTP processes (mark
    # sftp_processes(2)): what serve runs by default, at a second or two per rig for
    # their start, so the modules that matter most for it (real clients, durability,
    # tenant statuses, processes themselves) run that way and the rest stay quick.
    marker = request.node.get_closest_marker("sftp_processes")
    processes = int(marker.args[0]) if marker is not None else 1
    started: list[Rig] = []
    with db.transaction() as tx:
        for name in ("acme", "beta"):
            tx.one("tenant_insert", {"name": name, "status": "active"})
    log_path = tmp_path / "ingestd.log"
    log_fh = open(log_path, "a", buffering=1)  # noqa: SIM115 - closed at teardown

    def factory(
        sftp: dict[str, Any] | None = None,
        accounts: list[dict[str, Any]] | None = None,
        database: Database | None = None,
        **sections: Any,
    ) -> Rig:
        the_db = database or db
        sftp_cfg = {
            "listen": "127.0.0.1:0",
            "processes": processes,
            "retry_max_delay": 1,
            "spool_workers": 2,
            "accounts": accounts
            if accounts is not None
            else _accounts(password_hashes, client_key),
        }
        sftp_cfg.update(sftp or {})
        data: dict[str, Any] = {
            "database": {"url": the_db.conninfo},
            "paths": {
                "state_dir": str(tmp_path / "state"),
                "archive": str(tmp_path / "archive"),
                "spool": str(tmp_path / "spool"),
            },
            "sftp": sftp_cfg,
            **sections,
        }
        config = parse_config(data)
        log.configure("debug", "json", stream=log_fh)
        events = EventLog(the_db, config.paths.state_dir)  # as the daemon has them
        service = SftpService(config, make_intake(config, the_db), events=events)
        service.start()
        rig = Rig(config, service, the_db, tmp_path, client_key, log_path)
        (tmp_path / "upload").mkdir(exist_ok=True)
        started.append(rig)
        return rig

    yield factory
    for rig in started:
        rig.service.stop()
    log.configure("debug", "json")
    log_fh.close()


@pytest.fixture
def rig(make_rig: Callable[..., Rig]) -> Rig:
    return make_rig()


@pytest.fixture
def inproc_rig(make_rig: Callable[..., Rig]) -> Rig:
    """A rig whose SFTP sessions run in this process (``sftp.processes = 1``): for tests
    that inject a fault into the serving process (an rlimit) or look at a session's
    internals, and for the exact quota ledger an SFTP process's credit blurs."""
    return make_rig({"processes": 1})
