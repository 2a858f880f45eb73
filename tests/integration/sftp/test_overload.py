"""Overload (issue #14): the unauthenticated pool and known-good addresses, handles per
session, descriptor exhaustion, and log volume under floods.

All traffic is on 127.0.0.0/8 (the whole /8 is local on Linux): other source addresses
stand in for other hosts; 127.0.0.1 is a NAT with scanners and an attacker behind it.
Every load loop is bounded in count and in time; waits poll with generous bounds.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import select
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import paramiko
import pytest
from prometheus_client import REGISTRY

from tests.conftest import wait_until
from tests.fixtures.files import pdf_bytes
from tests.integration.sftp.conftest import PASSWORDS, Rig
from tests.unit.test_fail2ban_filter import _host

NAT = "127.0.0.1"  # scanners and one attacker behind the same address
SHARED = "127.0.1.50"  # an attacker's address that a scanner shares too


def connections(result: str) -> float:
    """The process's ingestd_sftp_connections_total{result=...} (counters only grow)."""
    value = REGISTRY.get_sample_value("ingestd_sftp_connections_total", {"result": result})
    return value or 0.0


def lines_about(rig: Rig, ip: str) -> list[dict[str, Any]]:
    """Log lines about ``ip``: its own events and the summaries held back for it."""
    return [e for e in rig.logs() if e.get("remote_ip") == ip or e.get("source") == ip]


def pending_count(rig: Rig) -> int:
    """Connections the server holds that have not logged in (yet)."""
    server = rig.service.server
    assert server is not None
    return sum(1 for s in server.sessions() if s["account"] is None)


class Flood:
    """Attackers: from each address ``idle`` sockets that never send a byte and
    ``trickle`` sockets that send one byte a second, never a whole banner line. A socket
    the server closes is opened again 0.5 s later: at most ``max_connects`` connects in
    all, for at most ``max_seconds``, in one selector thread."""

    def __init__(
        self,
        port: int,
        addresses: list[str],
        *,
        idle: int = 1,
        trickle: int = 1,
        max_connects: int = 6000,
        max_seconds: float = 240.0,
    ) -> None:
        self.port = port
        self.slots: list[dict[str, Any]] = [
            {"ip": ip, "trickle": kind == "trickle", "sock": None, "reopen": 0.0}
            for ip in addresses
            for kind in ["idle"] * idle + ["trickle"] * trickle
        ]
        self.max_connects = max_connects
        self.max_seconds = max_seconds
        self.connects = 0
        self.closed_by_server = 0
        self.longest_lived = 0.0  # seconds, of a socket the server closed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flood", daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def open_count(self) -> int:
        return sum(1 for s in self.slots if s["sock"] is not None)

    def _open(self, sel: selectors.BaseSelector, slot: dict[str, Any]) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        self.connects += 1
        try:
            sock.bind((slot["ip"], 0))
            err = sock.connect_ex(("127.0.0.1", self.port))
        except OSError:
            err = -1
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            slot["reopen"] = time.monotonic() + 0.5
            return
        slot["sock"] = sock
        slot["opened"] = time.monotonic()
        sel.register(sock, selectors.EVENT_READ, slot)

    def _close(self, sel: selectors.BaseSelector, slot: dict[str, Any]) -> None:
        sock = slot["sock"]
        sel.unregister(sock)
        sock.close()
        slot["sock"] = None
        slot["reopen"] = time.monotonic() + 0.5
        self.closed_by_server += 1
        self.longest_lived = max(self.longest_lived, time.monotonic() - slot["opened"])

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        deadline = time.monotonic() + self.max_seconds
        next_byte = time.monotonic() + 1.0
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                now = time.monotonic()
                for slot in self.slots:
                    if (
                        slot["sock"] is None
                        and now >= slot["reopen"]
                        and self.connects < self.max_connects
                    ):
                        self._open(sel, slot)
                for key, _ in sel.select(0.1):
                    slot = key.data
                    try:
                        data = slot["sock"].recv(4096)  # the banner, then b"" at the close
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        self._close(sel, slot)
                if now >= next_byte:
                    next_byte = now + 1.0
                    for slot in self.slots:
                        if slot["trickle"] and slot["sock"] is not None:
                            with contextlib.suppress(OSError):
                                slot["sock"].send(b"S")
        finally:
            for slot in self.slots:
                if slot["sock"] is not None:
                    sel.unregister(slot["sock"])
                    slot["sock"].close()
            sel.close()


def upload(rig: Rig, user: str, name: str, seed: int, source_ip: str) -> None:
    with rig.paramiko(user, source_ip=source_ip) as sftp:
        sftp.put(str(rig.write_pdf(name, seed)), name)


# -- the unauthenticated pool -----------------------------------------------------------------
def test_flood_of_idle_and_trickling_connections_does_not_lock_out_scanners(
    make_rig: Callable[..., Rig],
) -> None:
    """200 idle/trickling sockets from 100 addresses hold the unauthenticated pool; 20
    scanners (behind the attackers' NAT and a shared address), 10 as the flood begins
    and 10 once its sockets hit handshake_timeout and come back, all upload and are
    ingested, and an open session keeps working."""
    rig = make_rig()
    attackers = [NAT] + [f"127.0.1.{i}" for i in range(1, 100)]
    assert SHARED in attackers and len(attackers) == 100
    # The scanners uploaded before (known-good): one login from each of their addresses.
    for ip in (NAT, SHARED):
        with rig.paramiko("scan1", source_ip=ip) as sftp:
            assert sftp.listdir("/") == []
    evicted_before = connections("evicted")
    errors: list[BaseException] = []
    started = time.monotonic()
    with rig.paramiko("beta1", source_ip="127.0.2.1") as session, Flood(rig.port, attackers) as fl:
        wait_until(lambda: fl.connects >= 200, timeout=60)
        # The pool (50 by default) is full and sockets are refused: the flood is real.
        wait_until(
            lambda: pending_count(rig) >= 50 and rig.logs("sftp.connection_limit"), timeout=60
        )

        def scanner(i: int) -> None:
            try:
                upload(
                    rig,
                    "scan2" if i % 4 == 0 else "scan1",
                    f"Flood_{i:02d}.pdf",
                    i,
                    NAT if i % 2 == 0 else SHARED,
                )
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        with ThreadPoolExecutor(max_workers=10) as pool:
            list(pool.map(scanner, range(10)))  # while the pool is young: nothing to evict
            # The attackers' first sockets have been closed by the server's deadline (and
            # reopened): a pool of older and younger sockets.
            wait_until(lambda: fl.longest_lived >= 9, timeout=60)
            list(pool.map(scanner, range(10, 20)))
        # A session that was open before the flood works during it.
        with session.open("DuringFlood.pdf", "wb") as fh:
            fh.write(pdf_bytes("during the flood", pad_to=20_000, seed=99))
        connects = fl.connects
    flood_seconds = time.monotonic() - started
    assert errors == [], errors
    docs = rig.wait_documents(21, timeout=120)
    names = {d["original_filename"] for d in docs}
    assert names == {f"Flood_{i:02d}.pdf" for i in range(20)} | {"DuringFlood.pdf"}
    # The scanners got in by taking the place of attackers' sockets, which were refused.
    assert connections("evicted") > evicted_before
    assert connects > 200
    assert flood_seconds < 180
    # Log volume: what anyone can cause without a login (lines naming no account) is
    # at most the first 5 lines per event, address and 10 s interval (plus summaries).
    per_source = Counter(
        (e["event"], e["remote_ip"])
        for e in rig.logs()
        if e.get("remote_ip") in attackers and "account" not in e and "username" not in e
    )
    intervals = int(flood_seconds // 10) + 2
    noisy = {k: n for k, n in per_source.items() if n > 5 * intervals}
    assert noisy == {}, noisy


def test_pre_authentication_connections_do_not_count_against_sessions(
    make_rig: Callable[..., Rig],
) -> None:
    """Idle pre-login sockets do not use up max_connections: with 2 sessions allowed and
    4 sockets silent, a scanner logs in and uploads."""
    rig = make_rig(sftp={"max_connections": 2, "max_connections_per_ip": 2})
    source = ("127.0.4.1", 0)
    idle = [
        socket.create_connection(("127.0.0.1", rig.port), timeout=20, source_address=source)
        for _ in range(4)
    ]
    try:
        wait_until(lambda: pending_count(rig) == 4, timeout=60)
        upload(rig, "scan1", "NotLockedOut.pdf", 1, "127.0.4.2")
        assert [d["original_filename"] for d in rig.wait_documents(1)] == ["NotLockedOut.pdf"]
    finally:
        for sock in idle:
            sock.close()


def test_a_login_over_the_session_limit_is_closed(make_rig: Callable[..., Rig]) -> None:
    """Two connections that shook hands while one session was free: the first to log in
    gets it, the second is closed at its login (sftp.connection_limit, stage login), with
    no failed-login line."""
    rig = make_rig(sftp={"max_connections": 1})
    sockets = [socket.create_connection(("127.0.0.1", rig.port), timeout=20) for _ in range(2)]
    first, second = (paramiko.Transport(s) for s in sockets)
    try:
        first.connect()
        second.connect()
        first.auth_password("scan1", PASSWORDS["scan1"])
        with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
            second.auth_password("scan2", PASSWORDS["scan2"])
        wait_until(lambda: not second.is_active(), timeout=60)
        sftp = paramiko.SFTPClient.from_transport(first)
        assert sftp is not None and sftp.listdir("/") == []
    finally:
        first.close()
        second.close()
    [limit] = rig.logs("sftp.connection_limit")
    assert (limit["pool"], limit["stage"], limit["total"]) == ("sessions", "login", 1)
    assert rig.logs("sftp.auth_failed") == []
    assert [r["username"] for r in rig.logs("sftp.login")] == ["scan1"]


def test_a_burst_from_one_address_waits_instead_of_failing(make_rig: Callable[..., Rig]) -> None:
    """12 scanners behind one address connect at once, twice its unauthenticated share
    of 6: the other 6 wait for a slot (no thread, no banner yet) instead of being
    refused, and all 12 upload."""
    rig = make_rig(sftp={"max_unauthenticated_per_ip": 6})
    errors: list[BaseException] = []

    def scanner(i: int) -> None:
        try:
            upload(rig, "scan1", f"Burst_{i:02d}.pdf", 40 + i, "127.0.5.1")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    with ThreadPoolExecutor(max_workers=12) as pool:
        list(pool.map(scanner, range(12)))
    assert errors == []
    assert len(rig.wait_documents(12)) == 12


def test_a_burst_of_20_from_one_address_all_get_in_with_the_defaults(
    make_rig: Callable[..., Rig],
) -> None:
    """20 scanners behind 127.0.0.1 (a scan relay, a NAT; never logged in before) connect at
    once with the default limits (5 unauthenticated per address): the 15 beyond wait
    for a slot instead of being refused, and all 20 upload."""
    rig = make_rig()
    before = connections("limit_unauthenticated_per_ip")
    errors: list[BaseException] = []
    barrier = threading.Barrier(20, timeout=60)

    def scanner(i: int) -> None:
        try:
            barrier.wait()  # all 20 connect together
            upload(rig, "scan1", f"Relay_{i:02d}.pdf", 70 + i, NAT)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    with ThreadPoolExecutor(max_workers=20) as pool:
        list(pool.map(scanner, range(20)))
    assert errors == []
    assert len(rig.wait_documents(20)) == 20
    assert connections("limit_unauthenticated_per_ip") == before
    assert rig.logs("sftp.connection_limit") == []


def test_handshake_deadline_closes_tricklers_and_long_banners(make_rig: Callable[..., Rig]) -> None:
    """A socket trickling a byte a second is closed at handshake_timeout (10 s; paramiko's
    own timeout restarts with every byte); a 1 MiB "banner" without a newline is cut
    short at 64 KiB."""
    rig = make_rig()
    sock = socket.create_connection(
        ("127.0.0.1", rig.port), timeout=20, source_address=("127.0.6.1", 0)
    )
    closed_after = None
    try:
        for sent in range(30):  # bounded: 30 bytes, one a second
            try:
                sock.sendall(b"S")
                ready, _, _ = select.select([sock], [], [], 1.0)
                closed = bool(ready) and sock.recv(4096) == b""
            except ConnectionError:  # closed with our bytes unread: a reset
                closed = True
            if closed:
                closed_after = sent
                break
    finally:
        sock.close()
    assert closed_after is not None and 5 <= closed_after <= 14
    failed = [e for e in rig.logs("sftp.handshake_failed") if e["remote_ip"] == "127.0.6.1"]
    assert failed and failed[0]["timeout"] is True
    # A client sending a "banner" line that never ends: closed after 64 KiB, not 1 MiB.
    sock = socket.create_connection(
        ("127.0.0.1", rig.port), timeout=20, source_address=("127.0.6.2", 0)
    )
    sent_bytes = 0
    try:
        with contextlib.suppress(OSError):
            while sent_bytes < 1 << 20:  # bounded: 1 MiB
                sent_bytes += sock.send(b"x" * 4096)
        # Open until the server has judged it: closing with bytes it has not read yet
        # (loopback buffers hold the whole MiB) resets the connection first.
        wait_until(
            lambda: any(e["remote_ip"] == "127.0.6.2" for e in rig.logs("sftp.handshake_failed")),
            timeout=60,
        )
    finally:
        sock.close()
    [long] = [e for e in rig.logs("sftp.handshake_failed") if e["remote_ip"] == "127.0.6.2"]
    assert long["detail"].endswith("over 65536 bytes") and long["timeout"] is False


# -- handles and descriptors ------------------------------------------------------------------
def test_open_handles_are_limited_per_session(rig: Rig) -> None:
    """OPEN past max_handles_per_session (64) fails with "too many open files" and the
    limit; after closing two, the same session uploads again; refusals log a few lines."""
    limit = 64  # the default
    handles: list[paramiko.SFTPFile] = []
    refusals: list[str] = []
    with rig.paramiko("scan1") as sftp:
        for i in range(limit + 10):  # bounded: 10 past the limit
            try:
                handles.append(sftp.open(f"Open_{i:03d}.pdf", "wb"))
            except OSError as exc:
                refusals.append(str(exc))
        assert len(handles) == limit and len(refusals) == 10
        assert "too many open files" in refusals[0] and f"limit is {limit}" in refusals[0]
        handles[0].write(pdf_bytes("first", pad_to=20_000, seed=1))
        handles[0].close()
        handles[1].close()  # empty: refused, but the handle is free
        # Two handles free: two more uploads open (and stay open), the next is refused.
        for seed, name in enumerate(("After.pdf", "AfterToo.pdf"), start=2):
            handles.append(sftp.open(name, "wb"))
            handles[-1].write(pdf_bytes(name, pad_to=20_000, seed=seed))
        with pytest.raises(OSError, match="too many open files"):
            sftp.open("OneTooMany.pdf", "wb")
        for fh in handles[2:]:
            fh.close()
        # All free again.
        with sftp.open("Last.pdf", "wb") as fh:
            fh.write(pdf_bytes("last", pad_to=20_000, seed=4))
    docs = rig.wait_documents(4)
    assert {d["original_filename"] for d in docs} == {
        "Open_000.pdf",
        "After.pdf",
        "AfterToo.pdf",
        "Last.pdf",
    }
    refused = [e for e in rig.logs("sftp.refused") if e["reason"] == "too_many_handles"]
    assert 1 <= len(refused) <= 5


def test_all_sessions_together_stay_within_the_server_budget(inproc_rig: Rig) -> None:
    """Two sessions of one client together cannot take more handles than the server's
    budget (half the descriptor limit; set to 70 here): the one past it reads "too many
    open files on the server", and gets handles once the other session ends. (In this
    process: each SFTP process has a budget of its own, from its own limit.)"""
    rig = inproc_rig
    server = rig.service.server
    assert server is not None
    assert server.handles.limit == resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2
    server.handles.limit = 70  # what a daemon at LimitNOFILE=140 would have
    with rig.paramiko("scan1") as a, rig.paramiko("scan2") as b:
        held = [a.open(f"A_{i:02d}.pdf", "wb") for i in range(64)]
        held += [b.open(f"B_{i:02d}.pdf", "wb") for i in range(6)]
        with pytest.raises(OSError, match="too many open files on the server"):
            b.open("B_06.pdf", "wb")
        a.close()  # the session ends: its 64 uploads are aborted, its handles freed
        wait_until(lambda: server.handles.used == 6, timeout=60)
        with b.open("B_late.pdf", "wb") as fh:
            fh.write(pdf_bytes("late", pad_to=20_000, seed=8))
        for fh in held[64:]:
            fh.close()
    assert [d["original_filename"] for d in rig.wait_documents(1)] == ["B_late.pdf"]
    wait_until(lambda: server.handles.used == 0, timeout=60)


def test_descriptor_exhaustion_backs_off_and_recovers(make_rig: Callable[..., Rig]) -> None:
    """With the process out of descriptors accept() is retried with a growing delay and
    logged in a few lines without tracebacks; once descriptors are back the waiting
    client and a new one upload."""
    rig = make_rig()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    waiting = socket.socket()  # made before the hog: connect() needs no new descriptor
    hog: list[int] = []
    failed_before = connections("accept_failed")
    mark = len(rig.log_path.read_text().splitlines())
    try:
        try:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 64, hard)
            )
            while len(hog) < 100_000:  # bounded; ends at EMFILE
                hog.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass  # EMFILE: the table is full
        waiting.settimeout(20)
        waiting.connect(("127.0.0.1", rig.port))  # in the backlog: accept() gets EMFILE
        t0 = time.monotonic()
        wait_until(lambda: connections("accept_failed") - failed_before >= 6, timeout=60)
        six_failures = time.monotonic() - t0
    finally:
        for fd in hog:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    # 0.1 + 0.2 + 0.4 + 0.8 + 1.0 s between the first six attempts, not 6 x 0.1 s.
    assert six_failures >= 2.0
    transport = paramiko.Transport(waiting)
    try:
        transport.connect(username="scan1", password=PASSWORDS["scan1"])
        sftp = paramiko.SFTPClient.from_transport(transport)
        assert sftp is not None
        sftp.put(str(rig.write_pdf("Waited.pdf", 5)), "Waited.pdf")
    finally:
        transport.close()
    upload(rig, "scan1", "Fresh.pdf", 6, "127.0.0.1")
    docs = rig.wait_documents(2)
    assert {d["original_filename"] for d in docs} == {"Waited.pdf", "Fresh.pdf"}
    text = rig.log_path.read_text().splitlines()[mark:]
    assert not [line for line in text if "Traceback" in line or '"exception"' in line]
    events = [json.loads(line) for line in text]
    failed = [e for e in events if e["event"] == "sftp.accept_failed"]
    assert 1 <= len(failed) <= 5 and failed[0]["errno"] == "EMFILE"
    assert len([e for e in events if e["event"] == "sftp.accept_recovered"]) == 1
    assert len(text) <= 40, text


# -- log volume -------------------------------------------------------------------------------
def test_failed_handshake_flood_is_a_dozen_lines(make_rig: Callable[..., Rig]) -> None:
    """500 failed handshakes from one address write at most about a dozen lines, and the
    summaries carry the count."""
    rig = make_rig()
    ip = "127.0.7.9"
    started = time.monotonic()
    for _ in range(500):  # bounded; each waits for the server to close
        with socket.create_connection(
            ("127.0.0.1", rig.port), timeout=20, source_address=(ip, 0)
        ) as sock:
            sock.sendall(b"SSH-1.5-flood\r\n")
            for _ in range(10):  # the banner, then the close
                if sock.recv(4096) == b"":
                    break
    seconds = time.monotonic() - started

    def summaries(event: str) -> list[dict[str, Any]]:
        return [e for e in lines_about(rig, ip) if e["event"] == f"{event}.summary"]

    def counted() -> int:  # lines logged plus those a summary (of any interval) counts
        failed = [e for e in lines_about(rig, ip) if e["event"] == "sftp.handshake_failed"]
        return len(failed) + sum(e["held_back"] for e in summaries("sftp.handshake_failed"))

    # Every interval's summary comes once that interval is over: wait for all of them.
    wait_until(lambda: counted() == 500 and summaries("sftp.disconnected"), timeout=60)
    lines = lines_about(rig, ip)
    assert all(e["last"]["remote_ip"] == ip for e in summaries("sftp.handshake_failed"))
    # One 10 s interval: 5 + 1 lines per event (failed, disconnected).
    bound = 12 * (int(seconds // 10) + 1)
    assert len(lines) <= bound, (seconds, Counter(e["event"] for e in lines))


def test_auth_failed_flood_keeps_fail2ban_lines_and_a_summary_it_ignores(
    make_rig: Callable[..., Rig],
) -> None:
    """30 wrong passwords from one address (bans off): the first 20 sftp.auth_failed lines
    are written and match the fail2ban filter; the summary of the other 10 does not."""
    rig = make_rig(sftp={"bans": {"enabled": False}})
    ip = "127.0.8.8"
    for _ in range(5):  # 5 connections x 6 attempts (max_auth_attempts)
        with contextlib.ExitStack() as stack:
            sock = socket.create_connection(
                ("127.0.0.1", rig.port), timeout=20, source_address=(ip, 0)
            )
            transport = stack.enter_context(paramiko.Transport(sock))
            transport.connect()
            for attempt in range(6):
                try:
                    transport.auth_password("scan1", f"wrong-{attempt}")
                except paramiko.AuthenticationException:
                    continue
                except (paramiko.SSHException, EOFError, OSError):
                    break
    wait_until(
        lambda: any(e["event"] == "sftp.auth_failed.summary" for e in lines_about(rig, ip)),
        timeout=60,
    )
    raw = [line for line in rig.log_path.read_text().splitlines() if ip in line]
    matched = [line for line in raw if _host(line) == ip]
    assert len(matched) == 20
    [summary] = [line for line in raw if '"sftp.auth_failed.summary"' in line]
    assert _host(summary) is None
    assert rig.logs("sftp.auth_failed.summary")[0]["held_back"] == 10
