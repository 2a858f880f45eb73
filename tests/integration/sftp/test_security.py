"""The SSH side's defences: bans, channel policy, algorithms, limits, login answers, host keys.

All traffic is on loopback; other source addresses (127.0.0.2, ...) stand in for other
hosts. Nothing here measures time: timeouts are configured small and the tests wait for
their effect (a closed connection, a log line).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import paramiko
import pytest

from ingestd.config.settings import SftpBansConfig
from ingestd.errors import ConfigError
from ingestd.sources.sftp import bans as bans_module
from ingestd.sources.sftp import hostkeys
from ingestd.sources.sftp.accounts import Accounts, Verdict
from ingestd.sources.sftp.bans import BanList, read_bans
from tests.conftest import wait_until, write_config
from tests.integration.sftp.conftest import PASSWORDS, SSH_OPTS, Rig, closed_before_banner

# Everything paramiko raises when the server refuses or drops a connection.
DROPPED = (paramiko.SSHException, EOFError, OSError)

LEGACY_KEX = ["-o", "KexAlgorithms=diffie-hellman-group14-sha1", "-o", "HostKeyAlgorithms=ssh-rsa"]
LEGACY_CIPHER = ["-o", "Ciphers=aes128-cbc", "-o", "MACs=hmac-sha1"]


# -- helpers --------------------------------------------------------------------------------
@contextlib.contextmanager
def connect(rig: Rig, source_ip: str | None = None) -> Iterator[paramiko.Transport]:
    """A paramiko transport after key exchange, not logged in."""
    source = (source_ip, 0) if source_ip else None
    sock = socket.create_connection(("127.0.0.1", rig.port), timeout=20, source_address=source)
    transport = paramiko.Transport(sock)
    try:
        transport.connect()
        yield transport
    finally:
        transport.close()


@contextlib.contextmanager
def logged_in(
    rig: Rig, user: str = "scan1", source_ip: str | None = None
) -> Iterator[paramiko.Transport]:
    with connect(rig, source_ip) as transport:
        transport.auth_password(user, PASSWORDS[user])
        yield transport


def fail_password(transport: paramiko.Transport, user: str) -> None:
    with pytest.raises(paramiko.AuthenticationException):
        transport.auth_password(user, "wrong")


def allowed_types(transport: paramiko.Transport, user: str) -> list[str]:
    """The methods the server lists for ``user`` (what a 'none' login attempt is told)."""
    with pytest.raises(paramiko.BadAuthenticationType) as err:
        transport.auth_none(user)
    return sorted(err.value.allowed_types)


def new_lines(rig: Rig, event: str, before: int) -> list[dict[str, Any]]:
    return rig.logs(event)[before:]


def wait_logs(rig: Rig, event: str, n: int = 1) -> list[dict[str, Any]]:
    """The ``event`` lines once there are at least ``n``: lines the server writes after the
    client already saw the effect (sftp.connected, sftp.disconnected) need the wait."""
    wait_until(lambda: len(rig.logs(event)) >= n, timeout=60)
    return rig.logs(event)


def ssh(
    rig: Rig, user: str, options: list[str], command: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """OpenSSH ssh with key auth: ``ssh [options] user@127.0.0.1 [command]``."""
    opts, env = rig.ssh_auth_opts(user, password=False)
    return subprocess.run(
        [
            "ssh",
            "-p",
            str(rig.port),
            *SSH_OPTS,
            *opts,
            *options,
            f"{user}@127.0.0.1",
            *(command or []),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_conn(rig: Rig, account: str) -> Any:
    """The server's record of the (only) logged-in connection of ``account``."""
    server = rig.service.server
    assert server is not None
    with server.admission.lock:
        conns = [
            c
            for c in server.admission.conns.values()
            if c.session is not None and c.session.account.username == account
        ]
    assert len(conns) == 1
    return conns[0]


class ForgedKey(paramiko.Ed25519Key):
    """The public half of a real key, with a signature that cannot verify: what anyone
    who read an authorized_keys line can send."""

    def sign_ssh_data(self, data: bytes, algorithm: str | None = None) -> paramiko.Message:
        m = paramiko.Message()
        m.add_string("ssh-ed25519")
        m.add_string(b"\0" * 64)
        return m


def _accounts(
    hashes: dict[str, str], key: Path, **per_user: dict[str, Any]
) -> list[dict[str, Any]]:
    pub = key.with_suffix(".pub").read_text().strip()
    accounts: list[dict[str, Any]] = [
        {
            "username": "scan1",
            "tenant": "acme",
            "password_hash": hashes["scan1"],
            "authorized_keys": [pub],
        },
        {"username": "scan2", "tenant": "acme", "password_hash": hashes["scan2"]},
        {"username": "beta1", "tenant": "beta", "password_hash": hashes["beta1"]},
    ]
    for acct in accounts:
        acct.update(per_user.get(acct["username"], {}))
    return accounts


# -- brute force and bans -------------------------------------------------------------------
def _status_shows_ban(rig: Rig) -> None:
    """`ingestd status` (another process) lists the ban the server made."""
    import json

    from tests.conftest import Env, run_cli, write_config

    paths = rig.config.paths
    cfg = rig.root / "status.toml"
    write_config(
        cfg,
        {
            "database": {"url": rig.db.conninfo},
            "paths": {
                "state_dir": str(paths.state_dir),
                "spool": str(paths.spool),
                "archive": str(paths.archive_dir),
            },
        },
    )
    env = Env(rig.root, cfg, rig.config, rig.db.conninfo)
    data = json.loads(run_cli(env, "status", "--json").stdout)
    assert [b["ip"] for b in data["sftp_bans"]] == ["127.0.0.1"]
    assert "127.0.0.1" in run_cli(env, "status").stdout


def test_brute_force_bans_the_source_ip(rig: Rig) -> None:
    """15 wrong passwords ban the IP before the banner, persistently; other IPs still work."""
    failures = 0
    for _ in range(4):  # 20 attempts at most, 6 per connection (max_auth_attempts)
        try:
            with connect(rig) as transport:
                for _ in range(6):
                    try:
                        transport.auth_password("scan1", f"guess-{failures}")
                    except paramiko.AuthenticationException:
                        failures += 1
        except DROPPED:
            break
    assert 15 <= failures <= 20
    banned = rig.logs("sftp.banned")
    assert len(banned) == 1
    assert banned[0]["remote_ip"] == "127.0.0.1"
    # The ban came with the 15th failure, not later.
    events = [r["event"] for r in rig.logs() if r["event"] in ("sftp.auth_failed", "sftp.banned")]
    assert events.index("sftp.banned") == 15
    assert [b["ip"] for b in read_bans(rig.config.paths.state_dir)] == ["127.0.0.1"]
    [event] = rig.operator_events("sftp.banned")  # the operator is told, once
    assert event["tenant"] is None and event["detail"]["remote_ip"] == "127.0.0.1"
    _status_shows_ban(rig)

    assert closed_before_banner(rig)
    with pytest.raises(DROPPED), rig.paramiko("scan1"):
        pass
    closed = rig.logs("sftp.banned_connection_closed")
    assert len(closed) >= 2 and {c["remote_ip"] for c in closed} == {"127.0.0.1"}
    # Another host is not affected and its upload is ingested.
    src = rig.write_pdf("ok.pdf", 7)
    with rig.paramiko("scan1", source_ip="127.0.0.2") as sftp:
        sftp.put(str(src), "AfterBan.pdf")
    docs = rig.wait_documents(1)
    assert [d["original_filename"] for d in docs] == ["AfterBan.pdf"]
    # `ingestd sftp unban`: the running server lifts the ban at the next connection.
    bans_module.request_unban(rig.config.paths.state_dir, "127.0.0.1")
    with rig.paramiko("scan1"):
        pass
    assert rig.logs("sftp.unbanned")[0]["remote_ip"] == "127.0.0.1"
    assert read_bans(rig.config.paths.state_dir) == []


def test_unban_cli_lifts_bans_now_or_at_start(tmp_path: Path) -> None:
    """`ingestd sftp unban IP` lifts a ban in a running BanList at the IP's next check, and
    one requested while the server is down at its next start; `sftp bans` lists them."""
    import subprocess
    import sys

    cfg_path = tmp_path / "ingestd.toml"
    cfg_path.write_text(f'[paths]\nstate_dir = "{tmp_path}"\n')
    cli = [sys.executable, "-m", "ingestd.cli", "sftp", "--config", str(cfg_path)]
    cfg = _bans_cfg(ban_time=600, max_ban_time=3600)
    running = BanList(cfg, tmp_path)
    _ban(running, "192.0.2.7")
    _ban(running, "2001:db8::1")
    listed = subprocess.run(
        [*cli[:-2], "bans", *cli[-2:], "--json"], capture_output=True, text=True, check=True
    )
    assert {b["ip"] for b in json.loads(listed.stdout)} == {"192.0.2.7", "2001:db8::1"}
    done = subprocess.run(
        [*cli[:-2], "unban", *cli[-2:], "192.0.2.7", "2001:0db8::0001", "not-an-ip"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "not-an-ip" in done.stderr
    assert running.banned_until("192.0.2.7") is None
    assert not (tmp_path / bans_module.UNBAN_DIR / "192.0.2.7").exists()
    assert [b["ip"] for b in read_bans(tmp_path)] == ["2001:db8::1"]
    # The server is "down" (no BanList checks the IPv6 address): applied at the next start.
    assert BanList(cfg, tmp_path).banned_until("2001:db8::1") is None
    assert read_bans(tmp_path) == []


def test_unknown_users_are_banned_sooner(make_rig: Callable[..., Rig]) -> None:
    """An unknown user name scores more than a wrong password: 3 vs 6 attempts to a ban."""
    rig = make_rig(
        sftp={
            "max_auth_attempts": 10,
            "bans": {"threshold": 6, "score_unknown_user": 2, "score_wrong_password": 1},
        }
    )
    server = rig.service.server
    assert server is not None

    def attempts_to_ban(ip: str, user: str) -> int:
        with connect(rig, ip) as transport:
            for n in range(1, 9):
                assert server.bans.banned_until(ip) is None
                try:
                    transport.auth_password(user, "wrong")
                except paramiko.AuthenticationException:
                    pass
                except DROPPED:
                    return n - 1  # the ban from attempt n-1 closed the connection
                if server.bans.banned_until(ip) is not None:
                    return n
        raise AssertionError(f"{ip} was not banned")

    assert attempts_to_ban("127.0.0.3", "nobody") == 3
    assert attempts_to_ban("127.0.0.4", "scan1") == 6
    reasons = {(r["remote_ip"], r["reason"]) for r in rig.logs("sftp.auth_failed")}
    assert reasons == {("127.0.0.3", "unknown_user"), ("127.0.0.4", "wrong_password")}
    assert {b["ip"] for b in read_bans(rig.config.paths.state_dir)} == {"127.0.0.3", "127.0.0.4"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """bans.py's wall clock, moved by the test instead of waited for."""
    c = Clock()
    monkeypatch.setattr(bans_module, "time", SimpleNamespace(time=c.time))
    return c


def _bans_cfg(**kw: Any) -> SftpBansConfig:
    base: dict[str, Any] = {
        "threshold": 2,
        "score_wrong_password": 1,
        "ban_time": 10,
        "max_ban_time": 35,
        "observation": 100,
    }
    return SftpBansConfig(**{**base, **kw})


def _ban(bans: BanList, ip: str) -> float:
    """Fail until banned (bounded); returns the ban's end."""
    for _ in range(10):
        until = bans.failure(ip, unknown_user=False)
        if until is not None:
            return until
    raise AssertionError("no ban")


def test_repeat_bans_double_in_length(clock: Clock, tmp_path: Path) -> None:
    """Each repeat ban of an IP lasts twice as long as the one before, up to max_ban_time."""
    bans = BanList(_bans_cfg(), tmp_path)
    lengths = []
    for _ in range(4):
        until = _ban(bans, "192.0.2.1")
        lengths.append(until - clock.now)
        assert bans.banned_until("192.0.2.1") == until
        clock.now = until + 1  # the ban ran out
        assert bans.banned_until("192.0.2.1") is None
    assert lengths == [10, 20, 35, 35]
    # One failure below the threshold does not ban; the failure during a ban is no new ban.
    assert bans.failure("192.0.2.9", unknown_user=False) is None
    until = _ban(bans, "192.0.2.9")
    assert bans.failure("192.0.2.9", unknown_user=False) == until


def test_bans_persist_and_reload(clock: Clock, tmp_path: Path) -> None:
    """A reloaded BanList (restarted server) keeps the bans and continues the doubling."""
    first = BanList(_bans_cfg(), tmp_path)
    until = _ban(first, "192.0.2.1")
    data = json.loads((tmp_path / bans_module.STATE_FILE).read_text())
    assert set(data["ips"]) == {"192.0.2.1"}
    assert [b["ip"] for b in read_bans(tmp_path, now=clock.now)] == ["192.0.2.1"]

    second = BanList(_bans_cfg(), tmp_path)
    assert second.banned_until("192.0.2.1") == until
    assert second.banned_until("192.0.2.2") is None
    clock.now = until + 1
    assert second.banned_until("192.0.2.1") is None
    assert read_bans(tmp_path, now=clock.now) == []
    assert _ban(second, "192.0.2.1") - clock.now == 20
    assert second.lift("192.0.2.1")
    assert BanList(_bans_cfg(), tmp_path).banned_until("192.0.2.1") is None


def test_safelisted_networks_are_never_banned(clock: Clock, tmp_path: Path) -> None:
    """Failures from a safelisted network never ban it; other addresses still get banned."""
    bans = BanList(_bans_cfg(safelist=["192.0.2.0/24", "2001:db8::/32"]), tmp_path)
    for _ in range(50):
        assert bans.failure("192.0.2.77", unknown_user=True) is None
        assert bans.failure("2001:db8::1", unknown_user=True) is None
    assert bans.banned_until("192.0.2.77") is None
    assert _ban(bans, "198.51.100.1") > clock.now
    assert [b["ip"] for b in bans.active()] == ["198.51.100.1"]
    # Disabled bans ban nobody.
    off = BanList(_bans_cfg(enabled=False), None)
    for _ in range(10):
        assert off.failure("198.51.100.2", unknown_user=True) is None
    assert off.banned_until("198.51.100.2") is None


def test_safelist_lifts_an_existing_ban(clock: Clock, tmp_path: Path) -> None:
    """A ban from before its network was safelisted no longer locks that IP out."""
    _ban(BanList(_bans_cfg(), tmp_path), "192.0.2.5")
    reloaded = BanList(_bans_cfg(safelist=["192.0.2.0/24"]), tmp_path)
    assert reloaded.banned_until("192.0.2.5") is None


# -- channel policy -------------------------------------------------------------------------
def test_only_sftp_is_allowed_after_login(rig: Rig) -> None:
    """Every channel request but SFTP is refused and logged; the connection stays usable."""

    def refused(what: str, action: Callable[[], Any], raises: bool | None = True) -> dict[str, Any]:
        before = len(rig.logs("sftp.request_refused"))
        if raises:
            with pytest.raises(paramiko.SSHException):
                action()
        else:
            # paramiko sends these without asking for a reply (x11: the channel closes
            # on refusal): only the log line tells.
            with contextlib.suppress(paramiko.SSHException):
                action()
        wait_until(lambda: len(rig.logs("sftp.request_refused")) > before, timeout=60)
        lines = new_lines(rig, "sftp.request_refused", before)
        assert [ln["request"] for ln in lines] == [what]
        assert lines[0]["remote_ip"] == "127.0.0.1" and lines[0]["conn"]
        return lines[0]

    with logged_in(rig) as t:
        line = refused("exec", lambda: t.open_session().exec_command("id"))
        assert line["command"] == "id"
        refused("shell", lambda: t.open_session().invoke_shell())
        refused("pty", lambda: t.open_session().get_pty())
        line = refused("subsystem", lambda: t.open_session().invoke_subsystem("netconf"))
        assert line["name"] == "netconf"
        refused("x11", lambda: t.open_session().request_x11(), raises=None)
        refused(
            "agent_forwarding",
            lambda: t.open_session().request_forward_agent(lambda chan: None),
            raises=None,
        )
        refused("remote_port_forwarding", lambda: t.request_port_forward("127.0.0.1", 0))
        line = refused(
            "local_port_forwarding",
            lambda: t.open_channel("direct-tcpip", ("127.0.0.1", rig.port), ("127.0.0.1", 0)),
        )
        assert str(rig.port) in line["destination"]
        line = refused("channel", lambda: t.open_channel("x11", src_addr=("127.0.0.1", 6000)))
        assert line["kind"] == "x11"
        assert t.is_active()
        sftp = paramiko.SFTPClient.from_transport(t)
        assert sftp is not None
        assert sftp.listdir("/") == []


def test_openssh_exec_and_forwarding_fail(rig: Rig) -> None:
    """OpenSSH `ssh host id`, `ssh -N -L` and `ssh -N -R` get nothing but a refusal."""
    res = ssh(rig, "scan1", [], ["id"])
    assert res.returncode != 0
    assert "uid=" not in res.stdout
    assert any(
        r["request"] == "exec" and r["command"] == "id" for r in rig.logs("sftp.request_refused")
    )

    res = ssh(
        rig,
        "scan1",
        [
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-R",
            f"127.0.0.1:{free_port()}:127.0.0.1:{rig.port}",
        ],
    )
    assert res.returncode != 0
    assert any(r["request"] == "remote_port_forwarding" for r in rig.logs("sftp.request_refused"))

    lport = free_port()
    opts, env = rig.ssh_auth_opts("scan1", password=False)
    proc = subprocess.Popen(
        [
            "ssh",
            "-p",
            str(rig.port),
            *SSH_OPTS,
            *opts,
            "-N",
            "-L",
            f"127.0.0.1:{lport}:127.0.0.1:{rig.port}",
            "scan1@127.0.0.1",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )
    try:
        held: list[socket.socket] = []

        def forward_listening() -> bool:
            assert proc.poll() is None, "ssh -N -L exited"
            try:
                held.append(socket.create_connection(("127.0.0.1", lport), timeout=20))
            except ConnectionRefusedError:
                return False
            return True

        wait_until(forward_listening, timeout=30)
        sock = held[0]
        try:
            # Forwarded to the SFTP port itself: a working tunnel would show its banner.
            data = sock.recv(64)
        except ConnectionResetError:
            data = b""
        finally:
            sock.close()
        assert data == b""
        wait_until(
            lambda: any(
                r["request"] == "local_port_forwarding" for r in rig.logs("sftp.request_refused")
            ),
            timeout=60,
        )
    finally:
        # SIGKILL: ssh may miss a SIGTERM that arrives while it handles the refusal.
        proc.kill()
        proc.communicate(timeout=20)


# -- algorithms -----------------------------------------------------------------------------
def test_modern_defaults_negotiate_no_sha1_or_cbc(rig: Rig) -> None:
    """With default settings a paramiko client ends up with no SHA-1 and no CBC anywhere."""
    with connect(rig) as t:
        agreed = [t.host_key_type, t.local_cipher, t.remote_cipher, t.local_mac, t.remote_mac]
        connected = wait_logs(rig, "sftp.connected")  # before the client goes away
    names = " ".join(str(a).lower() for a in agreed)
    assert "sha1" not in names and "cbc" not in names and "ssh-rsa" not in names
    assert connected[0]["kex"] in paramiko.Transport._preferred_kex
    assert all("sha1" not in json.dumps(c) and "cbc" not in json.dumps(c) for c in connected)
    assert rig.logs("sftp.legacy_algorithms") == []
    # A client that offers nothing but SHA-1 key exchange does not get in.
    sock = socket.create_connection(("127.0.0.1", rig.port), timeout=20)
    only_sha1 = [k for k in paramiko.Transport._preferred_kex if k != "diffie-hellman-group14-sha1"]
    old = paramiko.Transport(sock, disabled_algorithms={"kex": only_sha1})
    try:
        with pytest.raises(DROPPED):
            old.connect()
    finally:
        old.close()


def test_legacy_clients_refused_by_default(rig: Rig) -> None:
    """By default SHA-1 kex/ssh-rsa or CBC/hmac-sha1 OpenSSH clients fail the handshake."""
    for extra in (LEGACY_KEX, LEGACY_CIPHER):
        before = len(rig.logs("sftp.handshake_failed"))
        res = rig.sftp_batch("scan1", ["pwd"], extra=extra)
        assert res.returncode != 0, extra
        assert "Remote working directory" not in res.stdout
        wait_until(lambda b=before: len(rig.logs("sftp.handshake_failed")) > b, timeout=60)
    assert rig.logs("sftp.login") == []
    assert rig.logs("sftp.legacy_algorithms") == []


def test_legacy_algorithms_server_wide(make_rig: Callable[..., Rig]) -> None:
    """With legacy_algorithms the legacy clients log in, upload, and are logged as legacy."""
    rig = make_rig(sftp={"legacy_algorithms": True})
    src = rig.write_pdf("legacy.pdf", 3)
    res = rig.sftp_batch("scan1", [f"put {src} Legacy.pdf"], extra=LEGACY_KEX)
    assert res.returncode == 0, res.stderr
    res = rig.sftp_batch("scan2", ["pwd"], password=True, extra=LEGACY_CIPHER)
    assert res.returncode == 0, res.stderr
    docs = rig.wait_documents(1)
    assert [d["original_filename"] for d in docs] == ["Legacy.pdf"]
    legacy = [set(r["algorithms"]) for r in wait_logs(rig, "sftp.legacy_algorithms", 2)]
    assert {"diffie-hellman-group14-sha1", "ssh-rsa"} in legacy
    assert {"aes128-cbc", "hmac-sha1"} in legacy
    kex = [r["kex"] for r in wait_logs(rig, "sftp.connected", 2)]
    assert kex[0] == "diffie-hellman-group14-sha1"
    assert rig.logs("sftp.legacy_refused") == []
    # Modern clients still get modern algorithms.
    with connect(rig) as t:
        assert "sha1" not in str(t.remote_mac) and "cbc" not in str(t.remote_cipher)
        assert t.host_key_type != "ssh-rsa"


def test_legacy_algorithms_per_account(
    make_rig: Callable[..., Rig], password_hashes: dict[str, str], client_key: Path
) -> None:
    """Server legacy off, one account on: only that account logs in with a legacy client."""
    rig = make_rig(
        accounts=_accounts(password_hashes, client_key, scan1={"legacy_algorithms": True})
    )
    src = rig.write_pdf("legacy.pdf", 4)
    res = rig.sftp_batch("scan1", [f"put {src} PerAccount.pdf"], extra=LEGACY_KEX)
    assert res.returncode == 0, res.stderr
    for extra in (LEGACY_KEX, LEGACY_KEX[:2], LEGACY_CIPHER):
        before = len(rig.logs("sftp.legacy_refused"))
        res = rig.sftp_batch("scan2", ["pwd"], password=True, extra=extra)
        assert res.returncode != 0, extra
        refused = rig.logs("sftp.legacy_refused")[before:]
        assert refused and {r["username"] for r in refused} == {"scan2"}
        wanted = (
            {"diffie-hellman-group14-sha1"}
            if extra is not LEGACY_CIPHER
            else {"aes128-cbc", "hmac-sha1"}
        )
        assert wanted <= set(refused[0]["algorithms"]), (extra, refused[0])
    assert [r["username"] for r in rig.logs("sftp.login")] == ["scan1"]
    # scan2 with a modern client is unaffected.
    res = rig.sftp_batch("scan2", ["pwd"], password=True)
    assert res.returncode == 0, res.stderr
    assert [d["original_filename"] for d in rig.wait_documents(1)] == ["PerAccount.pdf"]


# -- connection limits and timeouts -------------------------------------------------------
def test_connection_limit_per_ip(make_rig: Callable[..., Rig]) -> None:
    """A third connection from one IP is closed; other IPs, and later the same IP, get in."""
    rig = make_rig(sftp={"max_connections_per_ip": 2})
    server = rig.service.server
    assert server is not None
    with logged_in(rig), logged_in(rig, "scan2"):
        assert server.connection_count() == 2
        assert closed_before_banner(rig)
        limit = rig.logs("sftp.connection_limit")
        assert len(limit) == 1 and limit[0]["remote_ip"] == "127.0.0.1"
        assert limit[0]["from_ip"] == 2
        with logged_in(rig, "beta1", source_ip="127.0.0.2") as other:
            assert other.is_authenticated()
    wait_until(lambda: server.connection_count() == 0, timeout=60)
    with rig.paramiko("scan1") as sftp:
        assert sftp.listdir("/") == []
    assert len(rig.logs("sftp.connection_limit")) == 1


def test_auth_timeout_and_idle_timeout(make_rig: Callable[..., Rig]) -> None:
    """Silent, never-logged-in and idle connections are closed by auth/idle_timeout."""
    # In this process: the test ages a session's last activity.
    rig = make_rig(sftp={"auth_timeout": 1, "idle_timeout": 5, "processes": 1})
    with connect(rig) as t:
        wait_until(lambda: not t.is_active(), timeout=60)
    assert len(rig.logs("sftp.auth_timeout")) == 1
    # A client that connects and says nothing: banner, then the close.
    sock = socket.create_connection(("127.0.0.1", rig.port), timeout=20)
    received = b""
    try:
        for _ in range(100):  # bounded; each recv blocks until data or close
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
    finally:
        sock.close()
    assert received.startswith(b"SSH-2.0-ingestd")
    wait_until(lambda: len(rig.logs("sftp.handshake_failed")) == 1, timeout=60)
    # Idle: instead of waiting idle_timeout, age the session's last activity.
    with rig.paramiko("scan1") as sftp:
        sftp.listdir("/")
        conn = server_conn(rig, "scan1")
        assert conn.session is not None
        conn.session.last_activity = time.monotonic() - 60
        channel = sftp.get_channel()
        assert channel is not None
        transport = channel.get_transport()
        wait_until(lambda: not transport.is_active(), timeout=60)
    idle = rig.logs("sftp.idle_timeout")
    assert len(idle) == 1 and idle[0]["conn"] == conn.id
    reasons = [r["reason"] for r in wait_logs(rig, "sftp.disconnected", 3)]
    assert {"auth_timeout", "handshake_failed", "idle_timeout"} <= set(reasons)


def test_max_auth_attempts_closes_the_connection(make_rig: Callable[..., Rig]) -> None:
    """After max_auth_attempts failed logins the server closes the connection."""
    rig = make_rig(sftp={"max_auth_attempts": 2})
    with connect(rig) as t:
        fail_password(t, "scan1")
        assert t.is_active()
        fail_password(t, "scan1")
        wait_until(lambda: not t.is_active(), timeout=60)
    lines = rig.logs("sftp.too_many_auth_failures")
    assert len(lines) == 1 and lines[0]["attempts"] == 2
    assert rig.logs("sftp.banned") == []
    assert [r["reason"] for r in wait_logs(rig, "sftp.disconnected")] == ["auth_failed"]


# -- who may log in -------------------------------------------------------------------------
def test_allowed_sources(
    make_rig: Callable[..., Rig], password_hashes: dict[str, str], client_key: Path
) -> None:
    """An account limited to networks logs in only from them, by password or key."""
    rig = make_rig(
        accounts=_accounts(
            password_hashes,
            client_key,
            scan1={"allowed_sources": ["10.0.0.0/8"]},
            scan2={"allowed_sources": ["127.0.0.0/8"]},
            beta1={"allowed_sources": ["127.0.0.2/32"]},
        )
    )
    for kwargs in ({}, {"key": True}):
        with pytest.raises(paramiko.AuthenticationException), rig.paramiko("scan1", **kwargs):
            pass
    with pytest.raises(paramiko.AuthenticationException), rig.paramiko("beta1"):
        pass
    with rig.paramiko("scan2") as sftp:
        assert sftp.listdir("/") == []
    with rig.paramiko("beta1", source_ip="127.0.0.2") as sftp:
        assert sftp.listdir("/") == []
    failed = [(r["username"], r["method"], r["reason"]) for r in rig.logs("sftp.auth_failed")]
    assert failed == [
        ("scan1", "password", "source_not_allowed"),
        ("scan1", "publickey", "source_not_allowed"),
        ("beta1", "password", "source_not_allowed"),
    ]
    assert sorted(r["username"] for r in rig.logs("sftp.login")) == ["beta1", "scan2"]
    server = rig.service.server
    assert server is not None
    assert server.bans.banned_until("127.0.0.1") is None


def test_unknown_user_and_wrong_password_get_the_same_answer(make_rig: Callable[..., Rig]) -> None:
    """Unknown users, wrong passwords and foreign keys get identical answers and limits."""
    rig = make_rig(sftp={"max_auth_attempts": 3})
    server = rig.service.server
    assert server is not None
    foreign = [paramiko.ECDSAKey.generate() for _ in range(4)]
    answers = {}
    for user in ("nobody", "scan1", "scan2", "beta1"):
        with connect(rig) as t:
            methods = allowed_types(t, user)
            with pytest.raises(paramiko.AuthenticationException) as err:
                t.auth_password(user, "wrong")
            password_answer = (type(err.value), str(err.value))
            # More foreign keys than max_auth_attempts: a key that does not fit is no
            # failure for a real account, so it must not be one for an unknown name.
            for key in foreign:
                with pytest.raises(paramiko.AuthenticationException):
                    t.auth_publickey(user, key)
            # Whether the server is closing this connection is decided (synchronously)
            # before each answer; the close itself follows a moment later.
            port = t.sock.getsockname()[1]
            with server.admission.lock:
                conn = next(c for c in server.admission.conns.values() if c.remote_port == port)
            answers[user] = (methods, password_answer, conn.kill.is_set())
    assert len(set(map(repr, answers.values()))) == 1, answers
    assert answers["nobody"] == (
        ["password", "publickey"],
        (paramiko.AuthenticationException, "Authentication failed."),
        False,
    )
    failed = rig.logs("sftp.auth_failed")
    assert {(r["method"], r["reason"]) for r in failed} == {
        ("password", "unknown_user"),
        ("password", "wrong_password"),
    }


def test_unknown_user_checks_a_dummy_hash(
    monkeypatch: pytest.MonkeyPatch, password_hashes: dict[str, str]
) -> None:
    """Unknown users and password-less accounts cost one bcrypt check of a same-cost dummy."""
    import ingestd.config.settings as cfgmod
    from ingestd import passwords as passwords_module

    pub = "ssh-ed25519 " + base64.b64encode(b"\0\0\0\x0bssh-ed25519\0\0\0\x20" + b"k" * 32).decode()
    accts = Accounts(
        [
            cfgmod.SftpAccountConfig(
                username="scan1", tenant="acme", password_hash=password_hashes["scan1"]
            ),
            cfgmod.SftpAccountConfig(username="keyonly", tenant="acme", authorized_keys=[pub]),
        ]
    )
    checked: list[bytes] = []
    real = passwords_module.bcrypt.checkpw

    def spy(candidate: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return bool(real(candidate, hashed))

    monkeypatch.setattr(passwords_module.bcrypt, "checkpw", spy)
    assert accts.check_password("nobody", "x", "127.0.0.1") is Verdict.unknown_user
    assert accts.check_password("keyonly", "x", "127.0.0.1") is Verdict.wrong_password
    assert accts.check_password("scan1", "wrong", "127.0.0.1") is Verdict.wrong_password
    assert accts.check_password("scan1", PASSWORDS["scan1"], "127.0.0.1") is Verdict.ok
    assert len(checked) == 4
    dummy = checked[0]
    assert checked[1] == dummy and checked[2] == checked[3] == password_hashes["scan1"].encode()
    assert dummy[:7] == password_hashes["scan1"].encode()[:7]  # $2b$04$: the same cost
    assert (
        accts.auth_methods("nobody") == accts.auth_methods("scan1") == accts.auth_methods("keyonly")
    )


def test_forged_key_signature_is_no_login(make_rig: Callable[..., Rig], client_key: Path) -> None:
    """A public key with a forged signature is no login: no sftp.login, auth_timeout applies."""
    rig = make_rig(sftp={"auth_timeout": 1})
    blob = base64.b64decode(client_key.with_suffix(".pub").read_text().split()[1])
    with connect(rig) as t:
        with pytest.raises(paramiko.AuthenticationException):
            t.auth_publickey("scan1", ForgedKey(data=blob))
        wait_until(lambda: not t.is_active(), timeout=60)
    assert rig.logs("sftp.login") == []
    assert len(rig.logs("sftp.auth_timeout")) == 1
    # The real key still works, and logs exactly one login (OpenSSH asks first, then signs).
    res = rig.sftp_batch("scan1", ["pwd"])
    assert res.returncode == 0, res.stderr
    logins = rig.logs("sftp.login")
    assert [(r["username"], r["method"]) for r in logins] == [("scan1", "publickey")]


# -- host keys ------------------------------------------------------------------------------
def test_hostkeys_cli_matches_what_the_server_presents(rig: Rig, tmp_path: Path) -> None:
    """`ingestd hostkeys` equals what ssh-keyscan sees; keys are 0600 and stable."""
    cfg = tmp_path / "hostkeys.toml"
    p = rig.config.paths
    write_config(
        cfg,
        {
            "paths": {
                "state_dir": str(p.state_dir),
                "spool": str(p.spool),
                "archive": str(p.archive_dir),
            },
            "sftp": {"listen": f"127.0.0.1:{rig.port}"},
        },
    )
    res = subprocess.run(
        [sys.executable, "-m", "ingestd.cli", "hostkeys", "--config", str(cfg), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    cli = {row["sha256"] for row in json.loads(res.stdout)}
    assert len(cli) == 2

    scan = subprocess.run(
        ["ssh-keyscan", "-p", str(rig.port), "-t", "ed25519,rsa", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert scan.stdout.count("\n") == 2, scan.stderr
    fp = subprocess.run(
        ["ssh-keygen", "-lf", "-"],
        input=scan.stdout,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    presented = {line.split()[1] for line in fp.stdout.splitlines()}
    assert presented == cli

    listening = rig.logs("sftp.listening")[0]["hostkeys"]
    assert {entry.split()[1] for entry in listening} == cli
    directory = hostkeys.key_dir(p.state_dir)
    assert os.stat(directory).st_mode & 0o777 == 0o700
    for key in hostkeys.load_or_create(p.state_dir):
        assert os.stat(key.path).st_mode & 0o777 == 0o600
    again = {k.fingerprint for k in hostkeys.load_or_create(p.state_dir)}
    assert again == cli


def test_hostkey_with_loose_mode_is_refused(rig: Rig, tmp_path: Path) -> None:
    """A group/world-readable host key is a ConfigError and is left unchanged."""
    state = tmp_path / "copy"
    shutil.copytree(rig.config.paths.state_dir / "hostkeys", state / "hostkeys")
    key = state / "hostkeys" / "ssh_host_ed25519_key"
    original = key.read_bytes()
    key.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600") as err:
        hostkeys.load_or_create(state)
    assert str(key) in err.value.message
    assert key.read_bytes() == original
    assert os.stat(key).st_mode & 0o777 == 0o644


def test_failed_web_logins_ban_the_address_from_sftp_within_seconds(
    make_rig: Callable[..., Rig],
) -> None:
    """The web console's and WebDAV's failed logins (report_failure) are absorbed by the
    running server within seconds and ban the address from SFTP too (issue 31)."""
    rig = make_rig(sftp={"bans": {"threshold": 3}})
    server = rig.service.server
    assert server is not None
    state = rig.config.paths.state_dir
    for _ in range(3):
        bans_module.report_failure(state, "127.0.0.9")
    wait_until(lambda: server.bans.banned_until("127.0.0.9") is not None, timeout=60)
    assert [b["ip"] for b in read_bans(state)] == ["127.0.0.9"]
