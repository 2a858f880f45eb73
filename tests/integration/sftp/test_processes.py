"""SFTP on several processes (``sftp.processes``): one admission, one ban list, one
ledger, one queue for all of them; a dead process is replaced and loses nothing acked.

Every test here runs the real supervisor with two real SFTP processes (``python -m
ingestd.sources.sftp.process``), real clients over loopback, and kills with SIGKILL.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest
from prometheus_client import REGISTRY

from ingestd.config.load import parse_config
from ingestd.daemon.wiring import make_intake
from ingestd.runtime import faults
from ingestd.sources.sftp.bans import read_bans
from ingestd.sources.sftp.processes import SftpProcesses
from tests.conftest import wait_until
from tests.fixtures.files import pdf_bytes
from tests.integration.sftp.conftest import PASSWORDS, Rig, closed_before_banner

# What serve runs by default: sessions on SFTP processes.
pytestmark = pytest.mark.sftp_processes(2)

TWO = {"processes": 2}


def processes(rig: Rig) -> SftpProcesses:
    assert rig.service.server is not None and rig.service.server.processes is not None
    return rig.service.server.processes


def owners(rig: Rig) -> Counter[str]:
    """How many connections each SFTP process serves now."""
    assert rig.service.server is not None
    return Counter(s["process"] for s in rig.service.server.sessions())


@contextlib.contextmanager
def session(
    rig: Rig, user: str = "scan1", source_ip: str | None = None
) -> Iterator[paramiko.SFTPClient]:
    source = (source_ip, 0) if source_ip else None
    sock = socket.create_connection(("127.0.0.1", rig.port), timeout=30, source_address=source)
    transport = paramiko.Transport(sock)
    try:
        transport.connect()
        transport.auth_password(user, PASSWORDS[user])
        client = paramiko.SFTPClient.from_transport(transport)
        assert client is not None
        yield client
    finally:
        transport.close()


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_connections_spread_over_processes_and_limits_hold_for_all(
    make_rig: Callable[..., Rig],
) -> None:
    """Sessions go to both processes; the total and per-address limits count them all."""
    rig = make_rig({**TWO, "max_connections": 3, "max_connections_per_ip": 2})
    with session(rig, source_ip="127.0.0.1"), session(rig, source_ip="127.0.0.1"):
        wait_until(lambda: sum(owners(rig).values()) == 2)
        assert len(owners(rig)) == 2  # one on each process
        # The address's share is full, though each process serves only one of them.
        assert closed_before_banner(rig, "127.0.0.1")
        with session(rig, "scan2", source_ip="127.0.0.2"):
            wait_until(lambda: sum(owners(rig).values()) == 3)
            assert rig.service.server is not None
            assert rig.service.server.connection_count() == 3
            assert closed_before_banner(rig, "127.0.0.3")  # the total is full
    limits = [r for r in rig.logs("sftp.connection_limit") if r.get("pool") == "sessions"]
    assert {r["remote_ip"] for r in limits} == {"127.0.0.1", "127.0.0.3"}


def test_a_ban_earned_across_processes_holds_on_all_and_survives_restart(
    make_rig: Callable[..., Rig],
) -> None:
    """Failed logins on both processes add up to one ban, enforced at accept for all of
    them, and still there after the daemon restarts."""
    rig = make_rig({**TWO, "bans": {"threshold": 6}})
    served_by: set[str] = set()
    for attempt in range(6):
        sock = socket.create_connection(("127.0.0.1", rig.port), timeout=30)
        transport = paramiko.Transport(sock)
        try:
            transport.connect()
            wait_until(lambda: sum(owners(rig).values()) == 1)
            served_by |= set(owners(rig))
            with pytest.raises(paramiko.AuthenticationException):
                transport.auth_password("scan1", f"guess-{attempt}")
        finally:
            transport.close()
        wait_until(lambda: sum(owners(rig).values()) == 0)
    assert len(served_by) == 2  # the failures were spread over both processes
    [ban] = rig.logs("sftp.banned")
    assert ban["remote_ip"] == "127.0.0.1"
    assert [b["ip"] for b in read_bans(rig.config.paths.state_dir)] == ["127.0.0.1"]
    for _ in range(4):  # whichever process would get it: closed before the banner
        assert closed_before_banner(rig, "127.0.0.1")
    rig.service.stop()
    again = make_rig(TWO)
    assert closed_before_banner(again, "127.0.0.1")
    assert not closed_before_banner(again, "127.0.0.2")


def test_reload_reaches_every_process_without_dropping_an_upload(
    make_rig: Callable[..., Rig], password_hashes: dict[str, str]
) -> None:
    """A reload changes the accounts on both processes; an upload open across it lands."""
    rig = make_rig(TWO)
    data = pdf_bytes("across the reload", pad_to=200_000, seed=7)
    with session(rig) as sftp:
        handle = sftp.open("across.pdf", "wb")
        handle.write(data[:100_000])
        handle.flush()
        cfg = rig.config.model_dump(mode="json")
        cfg["sftp"]["accounts"] = [
            a for a in cfg["sftp"]["accounts"] if a["username"] != "scan2"
        ] + [{"username": "late", "tenant": "beta", "password_hash": password_hashes["scan2"]}]
        new = parse_config(cfg)
        rig.service.reload(new, make_intake(new, rig.db))
        handle.write(data[100_000:])
        handle.close()
    [doc] = rig.wait_documents(1)
    assert doc["sha256"] == hashlib.sha256(data).hexdigest()
    # Two at once: one on each process. Both know the new account and forgot the old one.
    with contextlib.ExitStack() as stack:
        for _ in range(2):
            stack.enter_context(login_as(rig, "late", "secret-2"))
        wait_until(lambda: len(owners(rig)) == 2)
    for _ in range(2):
        with pytest.raises(paramiko.AuthenticationException), session(rig, "scan2"):
            pass


@contextlib.contextmanager
def login_as(rig: Rig, user: str, password: str) -> Iterator[paramiko.SFTPClient]:
    with rig.paramiko(user, password=password) as sftp:
        yield sftp


def test_a_killed_process_is_replaced_while_other_sessions_keep_uploading(
    make_rig: Callable[..., Rig],
) -> None:
    """SIGKILL of one SFTP process: its sessions end, its half-written upload leaves no
    partial and no quota behind, the other process's session keeps uploading, and a new
    process takes the slot."""
    rig = make_rig(TWO)
    before = dict(processes(rig).pids())
    with session(rig) as keeps, session(rig, "scan2") as doomed:
        wait_until(lambda: len(owners(rig)) == 2)
        assert rig.service.server is not None
        victim_owner = next(
            s["process"] for s in rig.service.server.sessions() if s["account"] == "scan2"
        )
        half = doomed.open("half.pdf", "wb")
        half.write(pdf_bytes("half", pad_to=300_000, seed=1)[:150_000])
        half.flush()
        assert rig.spool.usage("scan2") > 0
        assert any(p.name.startswith(f"{victim_owner}-") for p in rig.partials())
        os.kill(before[victim_owner], signal.SIGKILL)
        wait_until(lambda: rig.logs("sftp.process_died"))
        for i in range(5):
            src = rig.write_pdf(f"keep-{i}.pdf", 100 + i)
            keeps.put(str(src), f"keep-{i}.pdf")
    [died] = rig.logs("sftp.process_died")
    assert died["signal"] == "SIGKILL" and died["connections"] == 1
    assert died["partials_discarded"] == 1
    assert not any(p.name.startswith(f"{victim_owner}-") for p in rig.partials())
    rig.wait_documents(5)
    rig.wait_idle()
    rig.wait_usage("scan2", 0)
    wait_until(lambda: len(processes(rig).pids()) == 2)
    after = processes(rig).pids()
    assert before[victim_owner] not in after.values()
    wait_until(lambda: rig.logs("sftp.process_replaced"))  # written once the new one runs
    with session(rig, "scan2") as sftp:  # the new process serves
        sftp.put(str(rig.write_pdf("after.pdf", 200)), "after.pdf")
    rig.wait_documents(6)


def test_1000_uploads_from_50_clients_are_all_ingested_once(make_rig: Callable[..., Rig]) -> None:
    """50 clients x 20 files over both processes: 1,000 documents, each once, and the
    upload counters of both processes add up in this process's /metrics."""
    rig = make_rig({**TWO, "max_connections_per_ip": 60, "max_unauthenticated_per_ip": 60})
    uploads_before = counter("ingestd_sftp_uploads_total", tenant="acme")
    payloads = {
        (c, i): pdf_bytes(f"client {c} file {i}", pad_to=2_000, seed=c * 100 + i)
        for c in range(50)
        for i in range(20)
    }
    errors: list[BaseException] = []
    served_by: set[str] = set()

    def client(c: int) -> None:
        try:
            with session(rig, "scan1" if c % 2 else "scan2") as sftp:
                served_by.update(owners(rig))
                for i in range(20):
                    with sftp.open(f"c{c:02d}-{i:02d}.pdf", "wb") as fh:
                        fh.write(payloads[(c, i)])
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == []
    assert served_by == set(processes(rig).pids())
    docs = rig.wait_documents(1000, timeout=300)
    assert len(docs) == 1000
    assert sorted(d["sha256"] for d in docs) == sorted(
        hashlib.sha256(p).hexdigest() for p in payloads.values()
    )
    rig.wait_idle()
    assert rig.spool.snapshot()["pending"] == 0
    wait_until(
        lambda: counter("ingestd_sftp_uploads_total", tenant="acme") - uploads_before == 1000
    )


@pytest.mark.parametrize(
    ("point", "durable"),
    [
        ("spool.before_queue", False),  # entry written and fsynced, not in the queue yet
        ("spool.after_data", True),  # both names in the queue, not flushed
        ("spool.after_flush", True),  # durable, the supervisor not told yet
    ],
)
def test_a_process_killed_while_queueing_an_upload_loses_nothing_acked(
    make_rig: Callable[..., Rig],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    point: str,
    durable: bool,
) -> None:
    """SIGKILL inside the spool hand-over: the client is never told OK; an entry that made
    it into the queue is ingested exactly once anyway, one that did not leaves nothing;
    the retried upload (on the new process) gives one document in either case."""
    monkeypatch.setenv(faults.ENV, point)
    monkeypatch.setenv(faults.ONCE_ENV, str(tmp_path / "crashed-once"))
    rig = make_rig(TWO)
    src = rig.write_pdf("crash.pdf", 5)
    with pytest.raises((OSError, EOFError, paramiko.SSHException)), session(rig) as sftp:
        sftp.put(str(src), "crash.pdf")
    wait_until(lambda: rig.logs("sftp.process_died"))
    [died] = rig.logs("sftp.process_died")
    assert died["signal"] == "SIGKILL"
    assert died["entries_recovered"] == (1 if durable else 0)
    if durable:
        rig.wait_documents(1)
    rig.wait_idle()
    assert len(rig.documents()) == (1 if durable else 0)
    assert rig.partials() == []
    rig.wait_usage("scan1", 0)
    wait_until(lambda: len(processes(rig).pids()) == 2)
    with session(rig) as sftp:  # the scanner tries again
        sftp.put(str(src), "crash.pdf")
    rig.wait_documents(1)
    rig.wait_idle()
    [doc] = rig.documents()
    assert doc["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()


def test_an_account_quota_counts_its_uploads_on_every_process(
    make_rig: Callable[..., Rig], password_hashes: dict[str, str], client_key: Path
) -> None:
    """Temp-named uploads held on one process count against the upload on the other: the
    second is refused over the quota, and fits once the first is removed."""
    pub = client_key.with_suffix(".pub").read_text().strip()
    account = {
        "username": "scan1",
        "tenant": "acme",
        "password_hash": password_hashes["scan1"],
        "authorized_keys": [pub],
        "quota": 300_000,
    }
    rig = make_rig(TWO, accounts=[account])
    first = pdf_bytes("first", pad_to=200_000, seed=1)
    second = pdf_bytes("second", pad_to=200_000, seed=2)
    with session(rig) as a, session(rig) as b:
        wait_until(lambda: len(owners(rig)) == 2)  # one session on each process
        with a.open("first.pdf.part", "wb") as fh:
            fh.write(first)
        rig.wait_usage("scan1", len(first))
        with pytest.raises(OSError, match="quota exceeded"), b.open("second.pdf.part", "wb") as fh:
            fh.write(second)
        a.remove("first.pdf.part")
        with b.open("second.pdf.part", "wb") as fh:
            fh.write(second)
        b.rename("second.pdf.part", "second.pdf")
    [doc] = rig.wait_documents(1)
    assert doc["sha256"] == hashlib.sha256(second).hexdigest()
    rig.wait_idle()
    rig.wait_usage("scan1", 0)
