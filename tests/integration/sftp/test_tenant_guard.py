"""Logins of accounts whose tenant is not active: refused after the credentials, never banned.

The server reads tenant statuses from a cache refreshed in the background (the daemon
gives the service one; the shared rig runs without). These tests restart the rig's service
with a cache refreshed every 0.2 s and wait for it to see a change before they log in.
Real clients (paramiko, OpenSSH) against the real server and a real PostgreSQL; the outage
is a real stopped cluster.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
import subprocess
from collections.abc import Callable, Iterator

import paramiko
import pytest

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.db.schema import migrate
from ingestd.sources.sftp.service import SftpService
from ingestd.sources.sftp.tenant_status import MISSING, TenantStatusCache
from tests.conftest import private_cluster, wait_until
from tests.integration.sftp.conftest import PASSWORDS, SSH_OPTS, Rig

# What serve runs by default: sessions on SFTP processes.
pytestmark = pytest.mark.sftp_processes(2)

# Everything paramiko raises when the server refuses a channel or drops the connection.
DROPPED = (paramiko.SSHException, EOFError, OSError)
INTERVAL = 0.2


# -- helpers --------------------------------------------------------------------------------
def fast_refresh(rig: Rig) -> Rig:
    """The rig's service again, with a tenant status cache refreshed every INTERVAL s."""
    rig.service.stop()
    statuses = TenantStatusCache(rig.db, interval=INTERVAL)
    rig.service = SftpService(rig.config, make_intake(rig.config, rig.db), tenant_status=statuses)
    rig.service.start()
    return rig


def copies_hold_max_age(rig: Rig, max_age: float) -> bool:
    """Every SFTP process was sent the cache's statuses with this max_age (or there are
    no separate processes: the server asks the cache itself)."""
    assert rig.service.server is not None
    processes = rig.service.server.processes
    return processes is None or processes.pushed()[1] == max_age


def cache(rig: Rig) -> TenantStatusCache:
    assert rig.service.tenant_status is not None
    return rig.service.tenant_status


def set_status(db: Database, tenant: str, status: str) -> None:
    with db.transaction() as tx:
        tx.raw(
            "UPDATE tenants SET status = %(s)s, updated_at = now() WHERE name = %(t)s",
            {"s": status, "t": tenant},
        )


@contextlib.contextmanager
def connect(rig: Rig, source_ip: str) -> Iterator[paramiko.Transport]:
    """A paramiko transport after key exchange, not logged in."""
    sock = socket.create_connection(
        ("127.0.0.1", rig.port), timeout=20, source_address=(source_ip, 0)
    )
    transport = paramiko.Transport(sock)
    try:
        transport.connect()
        yield transport
    finally:
        transport.close()


def _packet(channel: paramiko.Channel) -> bytes:
    """One SFTP packet the server sent on ``channel`` (its type byte first)."""
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        chunk = channel.recv(4096)
        assert chunk, f"channel closed after {data!r}"
        data += chunk
    return data[4:]


def told(transport: paramiko.Transport) -> str:
    """What the server says on the one channel a refused login may open: the reason on
    stderr, and to an SFTP client a version 3 handshake and, for its request, a
    permission-denied status with the same reason (what lftp shows); then the channel
    closes with exit status 1. Returns the stderr text."""
    channel = transport.open_session(timeout=30)
    channel.settimeout(30)
    channel.invoke_subsystem("sftp")
    channel.sendall(b"\0\0\0\5\1\0\0\0\3")  # SSH_FXP_INIT, as a client sends it
    assert _packet(channel) == b"\2\0\0\0\3"  # SSH_FXP_VERSION 3
    # SSH_FXP_OPEN id 7 of "x.pdf" for writing: answered, never served.
    name = b"x.pdf"
    payload = b"\3" + struct.pack(">II", 7, len(name)) + name + struct.pack(">II", 0x1A, 0)
    channel.sendall(struct.pack(">I", len(payload)) + payload)
    status = _packet(channel)
    said = b""
    while chunk := channel.recv_stderr(1024):
        said += chunk
    assert channel.recv_exit_status() == 1
    assert status[0] == 101 and struct.unpack(">II", status[1:9]) == (7, 3)  # permission denied
    (length,) = struct.unpack(">I", status[9:13])
    assert status[13 : 13 + length].decode() + "\r\n" == said.decode()
    return said.decode()


def password_refused(rig: Rig, user: str, source_ip: str) -> str:
    """A right password of a tenant that is not active: authenticated, then told why."""
    with connect(rig, source_ip) as transport:
        transport.auth_password(user, PASSWORDS[user])
        return told(transport)


def upload(rig: Rig, user: str, name: str, seed: int, source_ip: str) -> None:
    with connect(rig, source_ip) as transport:
        transport.auth_password(user, PASSWORDS[user])
        sftp = paramiko.SFTPClient.from_transport(transport)
        assert sftp is not None
        sftp.put(str(rig.write_pdf(name, seed)), name)
        sftp.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- tests ----------------------------------------------------------------------------------
def test_suspended_tenant_login_refused_not_banned(make_rig: Callable[..., Rig]) -> None:
    """A suspended tenant's right password is refused and logged, 20 times without a ban."""
    rig = fast_refresh(make_rig())
    set_status(rig.db, "acme", "suspended")
    wait_until(lambda: cache(rig).status("acme") == "suspended")
    ip = "127.0.0.5"
    for _ in range(20):  # more than the ban threshold (15) and max_auth_attempts (6)
        said = password_refused(rig, "scan1", ip)
        assert said == "ingestd: tenant acme is suspended; uploads are refused\r\n"
    refused = rig.logs("sftp.auth_refused")
    assert len(refused) == 20
    assert {
        (r["account"], r["tenant"], r["tenant_status"], r["reason"], r["remote_ip"], r["method"])
        for r in refused
    } == {("scan1", "acme", "suspended", "tenant_suspended", ip, "password")}
    assert rig.logs("sftp.auth_failed") == []  # the fail2ban line: nothing to ban
    assert rig.logs("sftp.banned") == []
    server = rig.service.server
    assert server is not None and server.bans.banned_until(ip) is None
    assert [r for r in rig.logs("sftp.login") if r["username"] == "scan1"] == []
    # The same address still logs in to an active tenant's account and uploads.
    upload(rig, "beta1", "beta.pdf", 1, ip)
    assert [d["tenant"] for d in rig.wait_documents(1)] == ["beta"]
    # OpenSSH shows a scanner's admin the reason, not "Permission denied".
    result = rig.sftp_batch("scan2", ["ls"], password=True)
    assert result.returncode != 0
    assert "tenant acme is suspended; uploads are refused" in result.stderr, result.stderr
    assert "Permission denied" not in result.stderr
    assert rig.logs("sftp.auth_refused")[-1]["account"] == "scan2"


def test_activated_tenant_logs_in_after_the_refresh(make_rig: Callable[..., Rig]) -> None:
    """Once the tenant is active again and the cache refreshed, the same account uploads."""
    rig = fast_refresh(make_rig())
    wait_until(lambda: cache(rig).status("acme") == "active")
    set_status(rig.db, "acme", "suspended")
    wait_until(lambda: cache(rig).status("acme") == "suspended")
    password_refused(rig, "scan1", "127.0.0.6")
    set_status(rig.db, "acme", "active")
    wait_until(lambda: cache(rig).status("acme") == "active", timeout=60)
    changed = rig.logs("sftp.tenant_status_changed")
    assert [(c["tenant"], c["old_status"], c["new_status"]) for c in changed] == [
        ("acme", "active", "suspended"),
        ("acme", "suspended", "active"),
    ]
    upload(rig, "scan1", "back.pdf", 2, "127.0.0.6")
    result = rig.sftp_batch("scan1", ["put " + str(rig.write_pdf("ossh.pdf", 3))], password=True)
    assert result.returncode == 0, result.stderr
    docs = rig.wait_documents(2)
    assert sorted(d["original_filename"] for d in docs) == ["back.pdf", "ossh.pdf"]


def test_key_login_refused_after_the_signature(make_rig: Callable[..., Rig]) -> None:
    """A suspended tenant's valid key: no session, the connection closes, logged, no ban."""
    rig = fast_refresh(make_rig())
    set_status(rig.db, "acme", "deleting")
    wait_until(lambda: cache(rig).status("acme") == "deleting")
    key = paramiko.Ed25519Key.from_private_key_file(str(rig.key))
    with connect(rig, "127.0.0.7") as transport:
        # paramiko has verified the signature and said so; the refusal comes right after.
        transport.auth_publickey("scan1", key)
        assert told(transport) == "ingestd: tenant acme is being deleted; uploads are refused\r\n"
    result = rig.sftp_batch("scan1", ["ls"])  # OpenSSH with the key
    assert result.returncode != 0
    assert "tenant acme is being deleted; uploads are refused" in result.stderr, result.stderr
    # paramiko's SFTP client: the handshake succeeds, its first request fails with the
    # reason as a permission error, and nothing is stored.
    with connect(rig, "127.0.0.7") as transport:
        transport.auth_publickey("scan1", key)
        client = paramiko.SFTPClient.from_transport(transport)
        assert client is not None
        with pytest.raises(PermissionError) as refused_put:
            client.put(str(rig.write_pdf("refused.pdf", 9)), "refused.pdf")
        assert refused_put.value.errno == errno.EACCES
        assert refused_put.value.strerror == (
            "ingestd: tenant acme is being deleted; uploads are refused"
        )
    refused = rig.logs("sftp.auth_refused")
    assert [(r["method"], r["reason"], r["tenant_status"]) for r in refused] == [
        ("publickey", "tenant_deleting", "deleting")
    ] * 3
    wait_until(lambda: len(rig.logs("sftp.disconnected")) >= 3)
    assert {r["reason"] for r in rig.logs("sftp.disconnected")} == {"tenant_deleting"}
    assert rig.logs("sftp.login") == [] and rig.logs("sftp.auth_failed") == []
    server = rig.service.server
    assert server is not None and server.bans.active() == []


def test_account_of_a_tenant_that_does_not_exist_is_refused(
    make_rig: Callable[..., Rig], password_hashes: dict[str, str]
) -> None:
    """An account bound to a tenant missing from the database: refused as tenant_unknown."""
    accounts = [{"username": "scan1", "tenant": "ghost", "password_hash": password_hashes["scan1"]}]
    rig = fast_refresh(make_rig(accounts=accounts))
    wait_until(lambda: cache(rig).status("ghost") == MISSING)
    assert "tenant ghost does not exist" in password_refused(rig, "scan1", "127.0.0.8")
    [line] = rig.logs("sftp.auth_refused")
    assert (line["tenant"], line["tenant_status"], line["reason"]) == (
        "ghost",
        "missing",
        "tenant_unknown",
    )


def test_database_unreachable_logins_go_to_the_spool(make_rig: Callable[..., Rig]) -> None:
    """Statuses never read (no database): logins are let in, uploads spooled, one log line."""
    conninfo = f"host=127.0.0.1 port={closed_port()} dbname=ingestd user=ingestd"
    with Database(conninfo, connect_timeout=1) as unreachable:
        rig = fast_refresh(make_rig(database=unreachable))
        upload(rig, "scan1", "while-down.pdf", 4, "127.0.0.9")
        wait_until(lambda: rig.spool.snapshot()["pending"] == 1)  # indexed once reported
        wait_until(lambda: cache(rig).failures >= 3)
        assert cache(rig).status("acme") is None
        assert rig.logs("sftp.auth_refused") == []
        assert len(rig.logs("sftp.login")) == 1
        # Once per outage, not once per refresh.
        assert len(rig.logs("sftp.tenant_status_unavailable")) == 1
        rig.service.stop()


def test_outage_keeps_last_known_statuses_then_lets_logins_in(make_rig: Callable[..., Rig]) -> None:
    """Postgres stops: the last statuses hold for max_age, then logins go in; logged once."""
    with private_cluster(5438) as cluster, Database(cluster.conninfo, connect_timeout=1) as pg:
        migrate(pg)
        with pg.transaction() as tx:
            tx.one("tenant_insert", {"name": "acme", "status": "suspended"})
            tx.one("tenant_insert", {"name": "beta", "status": "active"})
        rig = fast_refresh(make_rig(database=pg))
        wait_until(lambda: cache(rig).status("acme") == "suspended")
        cluster.stop("fast")
        wait_until(lambda: cache(rig).failures >= 2)
        wait_until(lambda: len(rig.logs("sftp.tenant_status_unavailable")) >= 1)
        password_refused(rig, "scan1", "127.0.0.10")  # last known: still suspended
        cache(rig).max_age = 1.0
        wait_until(lambda: cache(rig).status("acme") is None)
        # The SFTP processes judge logins by their copy: wait until it carries max_age 1 s
        # (pushed by the supervisor's loop; under load a login could overtake it).
        wait_until(lambda: copies_hold_max_age(rig, 1.0))
        upload(rig, "scan1", "outage.pdf", 5, "127.0.0.10")  # unknown now: let in, spooled
        wait_until(lambda: rig.spool.snapshot()["pending"] == 1)  # indexed once reported
        assert len(rig.logs("sftp.tenant_status_unavailable")) == 1
        cluster.start()
        wait_until(lambda: cache(rig).status("acme") == "suspended", timeout=60)
        # The line is written just after the statuses are published: wait for it too.
        wait_until(lambda: len(rig.logs("sftp.tenant_status_restored")) >= 1, timeout=60)
        assert len(rig.logs("sftp.tenant_status_restored")) == 1
        password_refused(rig, "scan1", "127.0.0.10")
        assert len(rig.logs("sftp.auth_refused")) == 2
        assert rig.spool.snapshot()["pending"] == 1  # held in the spool: tenant not active
        rig.service.stop()


@pytest.mark.parametrize("status", ["suspended", "deleting"])
def test_open_session_starts_no_upload_once_the_tenant_is_not_active(
    make_rig: Callable[..., Rig], status: str
) -> None:
    """A session that logged in while its tenant was active: once the tenant is suspended
    or being deleted its next upload is refused at OPEN (permission denied, `sftp.refused`
    with the reason); the upload it finished before is kept."""
    rig = fast_refresh(make_rig())
    wait_until(lambda: cache(rig).status("acme") == "active")
    with connect(rig, "127.0.0.6") as transport:
        transport.auth_password("scan1", PASSWORDS["scan1"])
        sftp = paramiko.SFTPClient.from_transport(transport)
        assert sftp is not None
        sftp.put(str(rig.write_pdf("before.pdf", 1)), "before.pdf")
        set_status(rig.db, "acme", status)
        wait_until(lambda: cache(rig).status("acme") == status)
        with pytest.raises(PermissionError):
            sftp.put(str(rig.write_pdf("after.pdf", 2)), "after.pdf")
        sftp.close()
    refused = [r for r in rig.logs("sftp.refused") if r["path"].endswith("after.pdf")]
    assert [(r["op"], r["reason"], r["tenant"], r["account"]) for r in refused] == [
        ("open", f"tenant_{status}", "acme", "scan1")
    ]
    assert [r["path"] for r in rig.logs("sftp.upload_complete")] == ["/before.pdf"]


def test_each_client_shows_the_refusal_as_the_readme_says(make_rig: Callable[..., Rig]) -> None:
    """A suspended tenant, with the real clients: OpenSSH's sftp and lftp (with its default
    retries: it must not retry) print the reason, curl its fixed "Access denied" (libssh2
    shows no server text), paramiko raises PermissionError with the reason: the README's
    table of what each client shows."""
    rig = fast_refresh(make_rig())
    set_status(rig.db, "acme", "suspended")
    wait_until(lambda: cache(rig).status("acme") == "suspended")
    reason = "ingestd: tenant acme is suspended; uploads are refused"
    src = rig.write_pdf("in.pdf", 3)

    result = rig.sftp_batch("scan1", ["put in.pdf"], cwd=src.parent)  # OpenSSH, its key
    assert result.returncode == 255
    assert result.stderr.splitlines()[0] == reason, result.stderr

    ssh = "ssh -a -x " + " ".join(SSH_OPTS)
    lftp = subprocess.run(
        [
            "lftp",
            "-u",
            f"scan1,{PASSWORDS['scan1']}",
            f"sftp://127.0.0.1:{rig.port}",
            "-e",
            f"set sftp:connect-program '{ssh}'; set net:timeout 20; put {src} -o up.pdf; bye",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
    )
    assert lftp.returncode == 1
    assert lftp.stderr == f"put: {src}: Access failed: {reason} (up.pdf)\n", lftp.stderr

    curl = subprocess.run(
        [
            "curl",
            "-sS",
            "--insecure",
            "--max-time",
            "60",
            "-u",
            f"scan1:{PASSWORDS['scan1']}",
            "-T",
            str(src),
            f"sftp://127.0.0.1:{rig.port}/up.pdf",
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert (curl.returncode, curl.stderr) == (9, "curl: (9) Access denied to remote resource\n")

    with rig.paramiko("scan1") as client, pytest.raises(PermissionError) as refused:
        client.put(str(src), "up.pdf")
    assert refused.value.strerror == reason
    assert len(rig.logs("sftp.auth_refused")) == 4
    assert rig.documents() == [] and rig.partials() == []
    assert list(rig.spool.queue_dir.iterdir()) == []
