"""Upload + ingest with every client scanners and admins use, by password and by key."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import asyncssh
import pytest

from tests.integration.sftp.conftest import PASSWORDS, SSH_OPTS, Rig

# What serve runs by default: sessions on SFTP processes.
pytestmark = pytest.mark.sftp_processes(2)

AUTH = ["password", "key"]


def _expect_ingested(rig: Rig, name: str, src: Path) -> None:
    docs = rig.wait_documents(1)
    assert [d["original_filename"] for d in docs] == [name]
    assert docs[0]["source"] == "sftp:scan1"
    assert docs[0]["size_bytes"] == src.stat().st_size
    assert rig.partials() == []


@pytest.mark.parametrize("auth", AUTH)
def test_openssh_sftp_batch(rig: Rig, auth: str) -> None:
    """OpenSSH `sftp -b` uploads; the file becomes a document."""
    src = rig.write_pdf("in.pdf", 1)
    result = rig.sftp_batch("scan1", ["put in.pdf Scan_0001.pdf"], password=auth == "password")
    assert result.returncode == 0, result.stderr
    _expect_ingested(rig, "Scan_0001.pdf", src)


@pytest.mark.parametrize("auth", AUTH)
def test_openssh_scp_sftp_mode(rig: Rig, auth: str) -> None:
    """OpenSSH `scp -s` (the SFTP protocol, default since OpenSSH 9) uploads."""
    src = rig.write_pdf("in.pdf", 2)
    opts, env = rig.ssh_auth_opts("scan1", password=auth == "password")
    result = subprocess.run(
        [
            "scp",
            "-s",
            "-P",
            str(rig.port),
            *SSH_OPTS,
            *opts,
            str(src),
            "scan1@127.0.0.1:scp-upload.pdf",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    _expect_ingested(rig, "scp-upload.pdf", src)


@pytest.mark.parametrize("auth", AUTH)
def test_lftp(rig: Rig, auth: str) -> None:
    """lftp's sftp:// (over the ssh binary) uploads."""
    src = rig.write_pdf("in.pdf", 3)
    ssh = "ssh -a -x " + " ".join(SSH_OPTS)
    if auth == "password":
        user = f"scan1,{PASSWORDS['scan1']}"
    else:
        user = "scan1,"
        ssh += f" -i {rig.key} -o IdentitiesOnly=yes"
    script = (
        f"set sftp:connect-program '{ssh}'; set net:max-retries 1; set net:timeout 20; "
        f"put {src} -o lftp-upload.pdf; bye"
    )
    result = subprocess.run(
        ["lftp", "-u", user, f"sftp://127.0.0.1:{rig.port}", "-e", script],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    _expect_ingested(rig, "lftp-upload.pdf", src)


@pytest.mark.parametrize("auth", AUTH)
def test_curl(rig: Rig, auth: str) -> None:
    """curl's sftp:// (libssh2) uploads."""
    src = rig.write_pdf("in.pdf", 4)
    if auth == "password":
        creds = ["-u", f"scan1:{PASSWORDS['scan1']}"]
    else:
        creds = ["-u", "scan1:", "--key", str(rig.key), "--pubkey", f"{rig.key}.pub"]
    result = subprocess.run(
        [
            "curl",
            "-sS",
            "--insecure",
            "--max-time",
            "60",
            *creds,
            "-T",
            str(src),
            f"sftp://127.0.0.1:{rig.port}/curl-upload.pdf",
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    _expect_ingested(rig, "curl-upload.pdf", src)


@pytest.mark.parametrize("auth", AUTH)
def test_paramiko_client(rig: Rig, auth: str) -> None:
    """paramiko's SFTPClient uploads."""
    src = rig.write_pdf("in.pdf", 5)
    with rig.paramiko("scan1", key=auth == "key") as sftp:
        sftp.put(str(src), "paramiko-upload.pdf")
    _expect_ingested(rig, "paramiko-upload.pdf", src)


@pytest.mark.parametrize("auth", AUTH)
def test_asyncssh_client(rig: Rig, auth: str) -> None:
    """asyncssh's SFTP client uploads."""
    src = rig.write_pdf("in.pdf", 6)

    async def upload() -> None:
        kwargs: dict[str, object] = {"known_hosts": None, "username": "scan1"}
        if auth == "key":
            kwargs["client_keys"] = [str(rig.key)]
        else:
            kwargs["password"] = PASSWORDS["scan1"]
            kwargs["client_keys"] = None
        connect = asyncssh.connect("127.0.0.1", rig.port, **kwargs)  # type: ignore[arg-type]
        async with connect as conn, conn.start_sftp_client() as sftp:
            await sftp.put(str(src), "asyncssh-upload.pdf")

    asyncio.run(asyncio.wait_for(upload(), 60))
    _expect_ingested(rig, "asyncssh-upload.pdf", src)
