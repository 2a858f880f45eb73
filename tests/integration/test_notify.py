"""Operator notifications end to end: real events (the CLI's tenant commands, an encrypted
PDF analysed, the daemon's EventLog), the worker loop in this process with its real job
child, a real HTTP receiver (http.server) and a real SMTP server (aiosmtpd, with STARTTLS,
TLS and AUTH) on ports the OS chose; EventLog against a database that is not there."""

from __future__ import annotations

import collections
import datetime
import email
import email.policy
import http.server
import ipaddress
import json
import os
import shutil
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from ingestd import log
from ingestd.config.load import parse_config
from ingestd.config.notify import SmtpConfig
from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database, jsonb
from ingestd.events.outbox import EventLog
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.sources.hotfolders import HotFolders
from tests.conftest import Env, read_events, run_cli, wait_until
from tests.fixtures.drain import drain, run_once
from tests.fixtures.files import pdf_bytes
from tests.fixtures.scans import encrypted_pdf
from worker.jobs import PermanentError, notify
from worker.notify.smtp import SmtpError, SmtpRefused, send_mail
from worker.webhooks import verify_signature

WORKER = {"poll_interval": 0.1, "lease_seconds": 30, "retry_base": 0.05, "max_retries": 3}
# Deliveries retry fast here (production: 30 s, 1 min, 2 min ...).
DELIVERIES = {"retry_base": 0.2, "retry_jitter": 0, "max_retries": 8}
SECRET = b"hook-secret"
FROM = "ingestd <ingestd@example.org>"


# --- the receivers -------------------------------------------------------------------------


class Receiver:
    """A webhook receiver on 127.0.0.1 that records every request; stop() takes it down
    (connections refused), start() brings it back on the same port."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.port = 0
        self._server: http.server.ThreadingHTTPServer | None = None

    def start(self) -> None:
        calls = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                calls.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/ingestd"

    def by_sink(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for r in self.requests:
            out[r["headers"]["X-Ingestd-Event-Id"].rpartition(":")[2]].append(r)
        return out


@dataclass
class Mail:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    raw: bytes


class Inbox:
    """aiosmtpd handler: keeps what it was given; answers what a test tells it to."""

    def __init__(self) -> None:
        self.mails: list[Mail] = []
        self.rcpt_replies: dict[str, str] = {}
        self.data_reply: str | None = None
        self.logins: list[tuple[str, str]] = []

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: Any
    ) -> str:
        if address in self.rcpt_replies:
            return self.rcpt_replies[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.data_reply is not None:
            return self.data_reply
        raw = bytes(envelope.original_content or envelope.content)
        # As a mailbox stores it: lines end in LF.
        msg = email.message_from_bytes(raw.replace(b"\r\n", b"\n"), policy=email.policy.default)
        assert isinstance(msg, EmailMessage)
        self.mails.append(Mail(str(envelope.mail_from), list(envelope.rcpt_tos), msg, raw))
        return "250 Message accepted for delivery"

    def authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        # handled=False: aiosmtpd answers 535 itself.
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login, password = auth_data.login.decode(), auth_data.password.decode()
        self.logins.append((login, password))
        return AuthResult(success=(login, password) == ("ingestd", "pässwort"), handled=False)

    def to(self, address: str) -> list[Mail]:
        return [m for m in self.mails if address in m.rcpt_tos]


class Smtpd(Controller):
    """aiosmtpd's threaded controller on a port the OS chose (port=0)."""

    def _trigger_server(self) -> None:
        assert self.server is not None
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


def _start_smtpd(inbox: Inbox, **kwargs: Any) -> Smtpd:
    controller = Smtpd(
        inbox, hostname="127.0.0.1", port=0, server_hostname="smtp.test", ready_timeout=30, **kwargs
    )
    controller.start()
    return controller


# --- TLS: a CA and a certificate for 127.0.0.1, made here ---------------------------------


@dataclass
class Tls:
    ca_file: Path
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    base = tmp_path_factory.mktemp("tls")
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ingestd test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    tls = Tls(base / "ca.pem", base / "server.pem", base / "server.key")
    tls.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    tls.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tls.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return tls


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.start()
    yield r
    r.stop()


@pytest.fixture
def inbox() -> Iterator[tuple[Inbox, int]]:
    box = Inbox()
    controller = _start_smtpd(box)
    yield box, controller.port
    controller.stop()


@pytest.fixture
def hook_secret(tmp_path: Path) -> Path:
    path = tmp_path / "hook-secret"
    path.write_bytes(SECRET + b"\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def worker_log(tmp_path: Path) -> Iterator[Path]:
    """The JSON log lines of this test (the runner's, the EventLog's) go to this file."""
    path = tmp_path / "worker.log"
    with open(path, "w") as stream:
        log.configure("debug", "json", stream=stream)
        try:
            yield path
        finally:
            log.configure("debug", "json")


def _smtp(port: int, **kw: Any) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": port, "from_address": FROM, "timeout": 10, **kw}


def _hook(receiver: Receiver, secret: Path) -> dict[str, Any]:
    return {"url": receiver.url, "secret_file": str(secret), "timeout": 10}


def _one(db: Database, sql: str, params: dict[str, Any] | None = None) -> Any:
    with db.transaction() as tx:
        rows = tx.raw(sql, params)
    return rows[0] if rows else None


def _rows(db: Database, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    with db.transaction() as tx:
        return tx.raw(sql, params)


def _run_once(env: Env, db: Database) -> None:
    run_once(env, db, "w-notify")


def _drain(env: Env, db: Database) -> None:
    drain(env, db, "w-notify", rounds=20)


def _notify_jobs(db: Database) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in _rows(
        db,
        "SELECT id, status, retry_count, error_message, payload "
        "FROM processing_jobs WHERE kind = 'notify' ORDER BY id",
    ):
        out[r["payload"]["sink"]].append(dict(r))
    return out


def _insert_event(
    db: Database,
    type_: str,
    severity: str,
    tenant: str | None,
    detail: dict[str, Any],
    trace_id: str | None = None,
) -> str:
    event_id = str(uuid.uuid4())
    with db.transaction() as tx:
        tx.run(
            "operator_event_insert",
            {
                "event_id": event_id,
                "type": type_,
                "severity": severity,
                "tenant": tenant,
                "detail": jsonb(detail),
                "trace_id": trace_id,
                "created_at": datetime.datetime.now(datetime.UTC),
            },
        )
    return event_id


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- through the worker --------------------------------------------------------------------


def test_each_sink_gets_the_events_it_wants(
    make_env: Any,
    db: Database,
    tenant: str,
    receiver: Receiver,
    inbox: tuple[Inbox, int],
    hook_secret: Path,
) -> None:
    """Global sinks get every event (the appliance's too), a tenant sink only its tenant's;
    min_severity and globs filter; each once; signed webhooks and readable mails."""
    box, smtp_port = inbox
    with db.transaction() as tx:
        tx.one("tenant_insert", {"name": "other", "status": "active"})
    hook = _hook(receiver, hook_secret)
    env: Env = make_env(
        worker=WORKER,
        deliveries=DELIVERIES,
        smtp=_smtp(smtp_port),
        notify=[
            {"name": "ops-mail", "email": ["ops@example.org"], "min_severity": "info"},
            {"name": "ops-hook", "webhook": hook},
            {
                "name": "acme-mail",
                "tenant": "acme",
                "email": ["it@acme.example"],
                "min_severity": "info",
            },
            {
                "name": "docs-hook",
                "webhook": hook,
                "events": ["document.*"],
                "min_severity": "error",
            },
        ],
    )
    for command in ("suspend", "activate"):
        proc = run_cli(env, "tenant", command, "acme")
        assert proc.returncode == 0, proc.stderr
    EventLog(db, env.config.paths.state_dir).emit(
        "sftp.banned",
        "warning",
        None,
        {"remote_ip": "203.0.113.9", "seconds": 1800, "ban_count": 1},
    )
    _insert_event(
        db,
        "document.needs_attention",
        "error",
        "other",
        {
            "job_id": 1,
            "kind": "analyze-document",
            "document_id": 42,
            "attempts": 1,
            "error": "the PDF is encrypted",
        },
        trace_id="tr-42",
    )
    _drain(env, db)

    def mails(address: str) -> list[tuple[str, str | None]]:
        got = [
            (m.message["X-Ingestd-Event"], m.message.get("X-Ingestd-Tenant"))
            for m in box.to(address)
        ]
        return sorted(got, key=str)

    def hooks(sink: str) -> list[tuple[str, str | None]]:
        bodies = [json.loads(r["body"]) for r in receiver.by_sink()[sink]]
        return sorted([(b["event"], b["tenant"]) for b in bodies], key=str)

    assert mails("ops@example.org") == sorted(
        [
            ("tenant.created", "acme"),
            ("tenant.created", "other"),
            ("tenant.suspended", "acme"),
            ("tenant.active", "acme"),
            ("sftp.banned", None),
            ("document.needs_attention", "other"),
        ],
        key=str,
    )
    assert hooks("ops-hook") == sorted(
        [
            ("tenant.suspended", "acme"),
            ("sftp.banned", None),
            ("document.needs_attention", "other"),
        ],
        key=str,
    )
    assert mails("it@acme.example") == sorted(
        [("tenant.created", "acme"), ("tenant.suspended", "acme"), ("tenant.active", "acme")],
        key=str,
    )
    assert hooks("docs-hook") == [("document.needs_attention", "other")]
    # Each (event, sink) exactly once; every event relayed; every notify job done.
    ids = [r["headers"]["X-Ingestd-Event-Id"] for r in receiver.requests]
    ids += [m.message["X-Ingestd-Event-Id"] for m in box.mails]
    assert len(ids) == len(set(ids)) == 6 + 3 + 3 + 1
    assert all(len(m.rcpt_tos) == 1 for m in box.mails)
    assert _one(db, "SELECT count(*) AS n FROM operator_events WHERE relayed_at IS NULL")["n"] == 0
    jobs = [j for js in _notify_jobs(db).values() for j in js]
    assert len(jobs) == 13 and {j["status"] for j in jobs} == {"done"}

    # The webhook: signed like workflow webhooks, deduplicable per event and sink.
    (request,) = receiver.by_sink()["docs-hook"]
    headers, body = request["headers"], request["body"]
    assert verify_signature(
        SECRET, headers["X-Ingestd-Timestamp"], body, headers["X-Ingestd-Signature"], max_age=300
    )
    assert not verify_signature(
        b"wrong", headers["X-Ingestd-Timestamp"], body, headers["X-Ingestd-Signature"]
    )
    payload = json.loads(body)
    assert set(payload) == {
        "event",
        "event_id",
        "severity",
        "tenant",
        "detail",
        "trace_id",
        "created_at",
        "text",
    }
    assert headers["X-Ingestd-Event-Id"] == f"{payload['event_id']}:docs-hook"
    assert (payload["severity"], payload["trace_id"], payload["detail"]["document_id"]) == (
        "error",
        "tr-42",
        42,
    )
    assert payload["text"] == "[ingestd] other: document 42 needs attention: the PDF is encrypted"
    assert headers["Content-Type"] == "application/json"

    # A mail: subject, From, To, the envelope, dates and ids, and a body that says what to do.
    (mail,) = [
        m for m in box.to("it@acme.example") if m.message["X-Ingestd-Event"] == "tenant.suspended"
    ]
    msg = mail.message
    assert msg["Subject"] == "[ingestd] tenant acme suspended"
    assert (msg["From"], msg["To"]) == (FROM, "it@acme.example")
    assert (mail.mail_from, mail.rcpt_tos) == ("ingestd@example.org", ["it@acme.example"])
    event = _one(
        db, "SELECT event_id, created_at FROM operator_events WHERE type = 'tenant.suspended'"
    )
    assert msg["Message-ID"] == f"<{event['event_id']}.acme-mail@example.org>"
    assert msg["X-Ingestd-Event-Id"] == f"{event['event_id']}:acme-mail"
    sent = parsedate_to_datetime(msg["Date"])
    assert abs((sent - datetime.datetime.now(datetime.UTC)).total_seconds()) < 600
    assert msg["Auto-Submitted"] == "auto-generated"
    body_text = msg.get_content()
    for part in (
        "Tenant acme was suspended (it was active)",
        "ingestd tenant activate acme",
        "tenant:    acme",
        "type:      tenant.suspended (warning)",
        f"event id:  {event['event_id']}",
        "from: active",
        "to:   suspended",
        event["created_at"].astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
    ):
        assert part in body_text, (part, body_text)
    (ban,) = [m for m in box.to("ops@example.org") if m.message["X-Ingestd-Event"] == "sftp.banned"]
    assert ban.message["Subject"] == (
        "[ingestd] SFTP: 203.0.113.9 banned for 30 min after failed logins"
    )
    assert "ingestd sftp unban 203.0.113.9" in ban.message.get_content()


def test_encrypted_pdf_tells_the_operator_what_to_do(
    make_env: Any, db: Database, tenant: str, inbox: tuple[Inbox, int]
) -> None:
    """An encrypted PDF ingested and analysed: one mail saying which document, why, its
    trace id and the commands to deal with it."""
    box, smtp_port = inbox
    env: Env = make_env(
        worker=WORKER,
        deliveries=DELIVERIES,
        smtp=_smtp(smtp_port),
        analysis={"jobs": 1, "thumbnail_width": 200},
        notify=[{"name": "ops", "email": ["ops@example.org"]}],
    )
    src = encrypted_pdf(env.root / "in" / "Rechnung.pdf")
    res = make_intake(env.config, db).ingest(IntakeItem(path=src, tenant="acme"))
    assert res.outcome is Outcome.ingested and res.document_id is not None
    _drain(env, db)
    doc = _one(
        db,
        "SELECT id, trace_id, attention_reason FROM documents WHERE id = %(id)s",
        {"id": res.document_id},
    )
    assert doc["attention_reason"] and "encrypted" in doc["attention_reason"]
    (mail,) = box.mails  # tenant.created is "info": below the default min_severity
    reason = doc["attention_reason"].splitlines()[0]
    assert mail.message["Subject"] == (
        f"[ingestd] acme: document {doc['id']} needs attention: {reason}"
    )
    text = mail.message.get_content()
    for part in (
        f"Document {doc['id']} of tenant acme is archived",
        "ingestd documents attention --tenant acme",
        f"ingestd documents analyze --tenant acme {doc['id']}",
        f"trace id:  {doc['trace_id']}",
        "kind:        analyze-document",
    ):
        assert part in text, (part, text)


def test_mail_commands_name_the_config_file_the_worker_runs_with(
    make_env: Any, db: Database, tenant: str, inbox: tuple[Inbox, int]
) -> None:
    """A worker started with --config PATH (not the default file) mails commands an admin
    can paste as they are: ``ingestd --config PATH ...``, no ``runuser`` (issue #30)."""
    box, smtp_port = inbox
    env: Env = make_env(
        worker=WORKER,
        deliveries=DELIVERIES,
        smtp=_smtp(smtp_port),
        notify=[{"name": "ops", "email": ["ops@example.org"]}],
    )
    proc = run_cli(env, "tenant", "suspend", "acme")
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 120
    while not box.mails and time.monotonic() < deadline:
        worker = run_cli(env, "worker", "--drain")  # a real worker process, --config PATH
        assert worker.returncode == 0, worker.stderr
    (mail,) = box.mails
    text = mail.message.get_content()
    assert f"      ingestd --config {env.config_path} tenant activate acme\n" in text, text
    assert f"      ingestd --config {env.config_path} tenant list\n" in text, text
    assert "runuser" not in text


def test_a_receiver_that_is_down_delays_only_its_own_notification(
    make_env: Any, db: Database, receiver: Receiver, inbox: tuple[Inbox, int], hook_secret: Path
) -> None:
    """The webhook receiver down: only its notify job retries, the mail goes out once; back
    up, the receiver gets the event exactly once."""
    box, smtp_port = inbox
    receiver.stop()
    env: Env = make_env(
        worker=WORKER,
        deliveries=DELIVERIES,
        smtp=_smtp(smtp_port),
        notify=[
            {"name": "mail", "email": ["ops@example.org"]},
            {"name": "hook", "webhook": _hook(receiver, hook_secret)},
        ],
    )
    event_id = EventLog(db, env.config.paths.state_dir).emit(
        "sftp.banned", "warning", None, {"remote_ip": "198.51.100.7", "seconds": 60}
    )
    _run_once(env, db)
    jobs = _notify_jobs(db)
    (hook_job,), (mail_job,) = jobs["hook"], jobs["mail"]
    assert mail_job["status"] == "done"
    assert hook_job["status"] == "queued" and hook_job["retry_count"] >= 1
    assert hook_job["error_message"].startswith(
        f"NotifyError: notify sink 'hook': webhook http://127.0.0.1:{receiver.port}/hooks/"
        "ingestd: no response"
    ), hook_job["error_message"]
    assert len(box.mails) == 1 and receiver.requests == []

    receiver.start()  # the same port
    _drain(env, db)
    jobs = _notify_jobs(db)
    assert [j["status"] for j in jobs["hook"]] == ["done"]
    assert [j["status"] for j in jobs["mail"]] == ["done"]
    (request,) = receiver.requests
    assert request["headers"]["X-Ingestd-Event-Id"] == f"{event_id}:hook"
    assert len(box.mails) == 1


def test_a_sink_removed_from_the_config_is_done_with_a_note(
    make_env: Any,
    db: Database,
    receiver: Receiver,
    inbox: tuple[Inbox, int],
    hook_secret: Path,
    worker_log: Path,
) -> None:
    """A notify job whose sink is gone from the config by the time it runs: done, not
    failed, with a note in its log line; the other sink still gets the event."""
    box, smtp_port = inbox
    sinks = [
        {"name": "gone", "webhook": _hook(receiver, hook_secret)},
        {"name": "stays", "email": ["ops@example.org"]},
    ]
    env: Env = make_env(worker=WORKER, deliveries=DELIVERIES, smtp=_smtp(smtp_port), notify=sinks)
    _insert_event(
        db, "job.failed", "error", None, {"job_id": 9, "kind": "analyze-document", "error": "boom"}
    )
    assert notify.relay(db, env.config) == 1
    env = make_env(worker=WORKER, deliveries=DELIVERIES, smtp=_smtp(smtp_port), notify=sinks[1:])
    _drain(env, db)
    jobs = _notify_jobs(db)
    assert [j["status"] for j in jobs["gone"]] == [j["status"] for j in jobs["stays"]] == ["done"]
    assert receiver.requests == [] and len(box.mails) == 1
    (done,) = [
        e for e in read_events(worker_log, "job.done") if e["job_id"] == jobs["gone"][0]["id"]
    ]
    assert done["result"]["note"] == "sink 'gone' is no longer in the config; not sent"


def test_relay_refusals_retry_or_fail_for_good(
    make_env: Any, db: Database, inbox: tuple[Inbox, int], worker_log: Path
) -> None:
    """451 from the relay: the job retries, then delivers once; 550 for the recipient: failed
    at once, one job.failed line naming the sink, and no operator event about itself."""
    box, smtp_port = inbox
    env: Env = make_env(
        worker=WORKER,
        deliveries=DELIVERIES,
        smtp=_smtp(smtp_port),
        notify=[
            {"name": "mail", "email": ["ops@example.org"], "events": ["sftp.*"]},
            {"name": "typo", "email": ["nobody@example.org"], "events": ["file.*"]},
        ],
    )
    box.data_reply = "451 4.3.0 try later"
    _insert_event(db, "sftp.banned", "warning", None, {"remote_ip": "192.0.2.1"})
    _run_once(env, db)
    (job,) = _notify_jobs(db)["mail"]
    assert job["status"] == "queued" and job["retry_count"] >= 1
    assert job["error_message"].startswith(
        f"NotifyError: notify sink 'mail': smtp 127.0.0.1:{smtp_port}: 451 4.3.0 try later"
    )
    box.data_reply = None
    _drain(env, db)
    assert [j["status"] for j in _notify_jobs(db)["mail"]] == ["done"]
    assert len(box.mails) == 1

    box.rcpt_replies["nobody@example.org"] = "550 5.1.1 <nobody@example.org>: no such user"
    _insert_event(db, "file.refused", "warning", "acme", {"filename": "x.docx"})
    _drain(env, db)
    (job,) = _notify_jobs(db)["typo"]
    assert (job["status"], job["retry_count"]) == ("failed", 0)
    assert job["error_message"] == (
        f"notify sink 'typo': smtp 127.0.0.1:{smtp_port}: recipients refused: "
        "nobody@example.org: 550 5.1.1 <nobody@example.org>: no such user"
    )
    failed = [e for e in read_events(worker_log, "job.failed") if e["job_id"] == job["id"]]
    assert len(failed) == 1 and failed[0]["permanent"] is True
    assert "notify sink 'typo'" in failed[0]["error"]
    assert (
        _one(
            db,
            "SELECT count(*) AS n FROM operator_events WHERE type IN "
            "('job.failed', 'delivery.failed')",
        )["n"]
        == 0
    )
    assert len(box.mails) == 1


# --- SMTP delivery on its own --------------------------------------------------------------


def _smtp_config(port: int, **kw: Any) -> SmtpConfig:
    cfg = parse_config({"smtp": _smtp(port, **kw)})
    assert cfg.smtp is not None
    return cfg.smtp


def _message(subject: str = "[ingestd] Prüfung: Grüße", body: str = "Größe ✓\n") -> EmailMessage:
    msg = EmailMessage(policy=email.policy.SMTP)
    msg["Subject"], msg["From"], msg["To"] = subject, FROM, "ops@example.org"
    msg.set_content(body, charset="utf-8")
    return msg


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "smtp-password"
    path.write_text("pässwort\n")
    path.chmod(0o640)
    return path


def test_starttls_with_auth_delivers_utf8(tls: Tls, password_file: Path) -> None:
    """STARTTLS verified against ca_file, AUTH with the password file, UTF-8 subject and
    body arrive intact."""
    box = Inbox()
    controller = _start_smtpd(
        box,
        tls_context=tls.server_context(),
        require_starttls=True,
        authenticator=box.authenticate,
        auth_require_tls=True,
    )
    try:
        smtp = _smtp_config(
            controller.port,
            security="starttls",
            ca_file=str(tls.ca_file),
            username="ingestd",
            password_file=str(password_file),
        )
        assert send_mail(smtp, ["ops@example.org"], _message()) == {}
        (mail,) = box.mails
        assert box.logins == [("ingestd", "pässwort")]
        assert mail.message["Subject"] == "[ingestd] Prüfung: Grüße"
        assert mail.message.get_content() == "Größe ✓\n"
        # A wrong password is worth a retry: fixing the file delivers what is pending.
        password_file.write_text("alt\n")
        with pytest.raises(SmtpError, match=r"^smtp 127\.0\.0\.1:\d+: 535 .*AUTH as 'ingestd'"):
            send_mail(smtp, ["ops@example.org"], _message())
        # No ca_file: the system's CAs do not know ours.
        untrusted = _smtp_config(controller.port, security="starttls")
        expected = r"TLS certificate not accepted: unable to get local issuer certificate \("
        with pytest.raises(SmtpError, match=expected):
            send_mail(untrusted, ["ops@example.org"], _message())
    finally:
        controller.stop()


def test_implicit_tls_and_a_relay_without_starttls(tls: Tls) -> None:
    """security = "tls" speaks TLS from the first byte; "starttls" refuses a relay that
    does not offer it rather than sending in clear."""
    box = Inbox()
    controller = _start_smtpd(box, ssl_context=tls.server_context())
    plain = _start_smtpd(box)
    try:
        smtp = _smtp_config(controller.port, security="tls", ca_file=str(tls.ca_file))
        assert send_mail(smtp, ["ops@example.org"], _message()) == {}
        assert len(box.mails) == 1
        with pytest.raises(SmtpError, match="does not offer STARTTLS"):
            send_mail(_smtp_config(plain.port, security="starttls"), ["a@example.org"], _message())
        assert len(box.mails) == 1
    finally:
        controller.stop()
        plain.stop()


def test_smtp_answers_map_to_retry_or_permanent(inbox: tuple[Inbox, int]) -> None:
    """4xx and a relay that is down: SmtpError naming the relay and its reply; 5xx for every
    recipient: permanent; 5xx for some: delivered to the rest, the refusals returned."""
    box, port = inbox
    smtp = _smtp_config(port)
    box.data_reply = "451 4.3.0 try later"
    with pytest.raises(SmtpError) as info:
        send_mail(smtp, ["ops@example.org"], _message())
    assert str(info.value) == f"smtp 127.0.0.1:{port}: 451 4.3.0 try later"
    box.data_reply = "554 5.6.0 message refused"
    with pytest.raises(SmtpRefused, match=r"message refused: 554 5\.6\.0 message refused"):
        send_mail(smtp, ["ops@example.org"], _message())
    box.data_reply = None
    box.rcpt_replies = {
        "a@example.org": "550 5.1.1 no such user",
        "b@example.org": "450 4.2.1 mailbox busy",
    }
    with pytest.raises(SmtpRefused) as refused:
        send_mail(smtp, ["a@example.org"], _message())
    assert isinstance(refused.value, PermanentError)
    with pytest.raises(SmtpError, match=r"recipients not taken: .*450 4\.2\.1 mailbox busy"):
        send_mail(smtp, ["a@example.org", "b@example.org"], _message())
    assert send_mail(smtp, ["a@example.org", "ops@example.org"], _message()) == {
        "a@example.org": "550 5.1.1 no such user"
    }
    assert [m.rcpt_tos for m in box.mails] == [["ops@example.org"]]
    with pytest.raises(SmtpError) as down:
        send_mail(_smtp_config(_closed_port()), ["ops@example.org"], _message())
    assert "connection refused" in str(down.value)


def test_smtp_timeout_bounds_the_whole_delivery() -> None:
    """A relay that trickles its greeting a byte at a time is cut off at smtp.timeout,
    however steadily it sends."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = server.accept()
        with conn:
            for byte in b"220-" + b"x" * 1000:
                if stop.wait(0.2):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        smtp = _smtp_config(server.getsockname()[1], timeout=1)
        t0 = time.monotonic()
        with pytest.raises(SmtpError, match=r"did not finish within 1 s"):
            send_mail(smtp, ["ops@example.org"], _message())
        assert time.monotonic() - t0 < 10  # a bound: 1 s plus scheduling, not 1000 × 0.2 s
    finally:
        stop.set()
        server.close()
        thread.join(10)


# --- EventLog: the daemon's events, Postgres or not ----------------------------------------


def test_event_log_buffers_while_postgres_is_down_and_inserts_once(
    db: Database, tmp_path: Path, worker_log: Path
) -> None:
    """With Postgres unreachable, events go to <state_dir>/events as whole files; flush()
    inserts them in order once it is back, exactly once, even if a file comes back."""
    state = tmp_path / "state"
    with Database(
        f"host=127.0.0.1 port={_closed_port()} dbname=nope user=nope", connect_timeout=1
    ) as down:
        events = EventLog(down, state)
        first = events.emit(
            "file.quarantined",
            "warning",
            "acme",
            {
                "filename": "Scan_0001.pdf",
                "reason": "unsupported type",
                "size": 12,
                "when": datetime.date(2026, 11, 3),
            },
            trace_id="tr-1",
        )
        t0 = time.monotonic()
        second = events.emit("sftp.banned", "warning", None, {"remote_ip": "203.0.113.9"})
        # Buffering already: the second does not wait for the database again.
        assert time.monotonic() - t0 < 1.0
        assert events.pending() == 2
        files = sorted((state / "events").iterdir())
        assert [json.loads(f.read_text())["event_id"] for f in files] == [first, second]
        assert not [f for f in files if f.name.startswith(".tmp")]
        assert events.flush() == 0 and events.pending() == 2  # still down: kept
    (buffering,) = read_events(worker_log, "events.buffering")
    assert "database unavailable" in buffering["error"]

    saved = tmp_path / "saved.json"
    shutil.copy(files[0], saved)
    up = EventLog(db, state)
    assert up.flush() == 2 and up.pending() == 0
    rows = _rows(
        db,
        "SELECT event_id::text AS id, type, tenant, detail, trace_id "
        "FROM operator_events WHERE type IN ('file.quarantined', 'sftp.banned') "
        "ORDER BY operator_events.id",
    )
    assert [r["id"] for r in rows] == [first, second]
    assert (rows[0]["tenant"], rows[0]["trace_id"], rows[0]["detail"]["when"]) == (
        "acme",
        "tr-1",
        "2026-11-03",
    )
    assert rows[1]["tenant"] is None
    # A crash between the COMMIT and the delete: the file is there again; nothing doubles.
    shutil.copy(saved, state / "events" / files[0].name)
    assert up.flush() == 0 and up.pending() == 0
    assert (
        len(_rows(db, "SELECT 1 FROM operator_events WHERE event_id = %(id)s::uuid", {"id": first}))
        == 1
    )
    # Back up: straight into the table.
    third = up.emit("file.refused", "warning", "acme", {"filename": "a.docx"})
    assert up.pending() == 0
    assert (
        _one(db, "SELECT type FROM operator_events WHERE event_id = %(id)s::uuid", {"id": third})[
            "type"
        ]
        == "file.refused"
    )


def test_event_log_is_bounded_and_its_thread_flushes(
    db: Database, tmp_path: Path, worker_log: Path
) -> None:
    """Past max_files the oldest buffered events are dropped with one warning line; the
    background thread inserts the rest once the database is reachable."""
    state = tmp_path / "state"
    with Database(
        f"host=127.0.0.1 port={_closed_port()} dbname=nope user=nope", connect_timeout=1
    ) as down:
        events = EventLog(down, state, max_files=3)
        ids = [
            events.emit("sftp.banned", "warning", None, {"remote_ip": f"192.0.2.{i}"})
            for i in range(6)
        ]
        assert events.pending() == 3
    assert len(read_events(worker_log, "events.buffer_full")) == 1
    with pytest.raises(ValueError, match="severity"):
        events.emit("sftp.banned", "fatal", None, {})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="event type"):
        events.emit("Banned", "warning", None, {})

    up = EventLog(db, state, flush_every=0.2)
    up.start()
    try:
        wait_until(lambda: up.pending() == 0, timeout=30)
    finally:
        up.stop()
    rows = _rows(
        db,
        "SELECT event_id::text AS id FROM operator_events "
        "WHERE type = 'sftp.banned' ORDER BY operator_events.id",
    )
    assert [r["id"] for r in rows] == ids[3:]
    flushed = read_events(worker_log, "events.flushed")
    assert flushed and flushed[-1]["inserted"] == 3


# --- untrusted text arrives literally ------------------------------------------------------

# What a mail for an operator event carries, and nothing else (a file name adds no header).
MAIL_HEADERS = {
    "Subject",
    "From",
    "To",
    "Date",
    "Message-ID",
    "X-Ingestd-Event-Id",
    "X-Ingestd-Event",
    "X-Ingestd-Severity",
    "X-Ingestd-Tenant",
    "Auto-Submitted",
    "Content-Type",
    "Content-Transfer-Encoding",
    "MIME-Version",
}


def _header_block(raw: bytes) -> list[bytes]:
    return raw.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0].split(b"\n")


def test_file_names_reach_mail_and_webhook_literally(
    make_env: Any,
    db: Database,
    tenant: str,
    receiver: Receiver,
    inbox: tuple[Inbox, int],
    hook_secret: Path,
) -> None:
    """Names holding an encoded word that decodes to CR/LF, a harmless encoded word, raw
    CR/LF, umlauts and 2,000 characters: each mail through a real SMTP server has exactly
    the expected headers, a subject that decodes to the literal name, its body intact, and
    the webhook's JSON holds the same literal text."""
    box, smtp_port = inbox
    env: Env = make_env(
        worker=WORKER,
        deliveries=DELIVERIES,
        smtp=_smtp(smtp_port),
        notify=[
            {"name": "mail", "email": ["ops@example.org"], "events": ["file.*"]},
            {"name": "hook", "webhook": _hook(receiver, hook_secret), "events": ["file.*"]},
        ],
    )
    names = {
        "crlf-word": "=?utf-8?q?x=0D=0ABcc:_a@evil.test?=.pdf",
        "body-word": "=?utf-8?q?x=0D=0A=0D=0Aforged_body?=.pdf",
        "harmless-word": "=?utf-8?q?Rechnung_bezahlt?=.pdf",
        "raw-crlf": "bad\r\nBcc: b@evil.test\r\n\r\nforged.pdf",
        "umlauts": "Grüße aus Köln – Überweisung.pdf",
        "long": "Ä" + "x" * 1995 + ".pdf",
    }
    events = EventLog(db, env.config.paths.state_dir)
    ids = {
        key: events.emit(
            "file.quarantined",
            "warning",
            "acme",
            {"filename": name, "source": "watch:/srv/hot/acme", "reason": "bad_type"},
        )
        for key, name in names.items()
    }
    _drain(env, db)
    assert len(box.mails) == len(names) and len(receiver.requests) == len(names)
    assert {j["status"] for js in _notify_jobs(db).values() for j in js} == {"done"}
    mails = {m.message["X-Ingestd-Event-Id"].partition(":")[0]: m for m in box.mails}
    hooks = {json.loads(r["body"].decode("utf-8"))["event_id"]: r for r in receiver.requests}
    for key, name in names.items():
        mail = mails[ids[key]]
        msg = mail.message
        shown = name.replace("\r", "\\r").replace("\n", "\\n")
        expected = f"[ingestd] acme: file {shown} quarantined: bad_type"
        assert sorted(msg.keys()) == sorted(MAIL_HEADERS), (key, msg.keys())  # each once
        assert mail.rcpt_tos == ["ops@example.org"]
        subject = str(msg["Subject"])
        if key == "long":
            assert subject.endswith("…") and len(subject) < 200, (key, subject)
            assert expected.startswith(subject[:-1]), (key, subject)
        else:
            assert subject == expected, (key, subject)
        assert "\r" not in subject and "\n" not in subject
        # Folded on the wire: every header line within 78 characters, plain ASCII.
        for line in _header_block(mail.raw):
            assert len(line) <= 78 and line.isascii(), (key, line)
        # The body: one plain-text part, the summary first, the whole name in the details.
        assert not msg.is_multipart() and msg.get_content_type() == "text/plain"
        body = msg.get_content()
        assert body.startswith(f"acme: file {shown if key != 'long' else shown[:20]}")
        assert f"filename: {shown}" in body, (key, body[:500])
        assert "forged body" not in body.splitlines()
        assert "What to do" in body and "ingestd on " in body
        # The webhook: the same literal text, valid UTF-8 JSON, the name as it was.
        payload = json.loads(hooks[ids[key]]["body"].decode("utf-8"))
        assert payload["detail"]["filename"] == name
        assert payload["text"] == subject


def _count_events(db: Database, type_: str) -> int:
    row = _one(db, "SELECT count(*) AS n FROM operator_events WHERE type = %(t)s", {"t": type_})
    return int(row["n"])


def test_a_non_utf8_file_name_is_quarantined_recorded_and_notified(
    make_env: Any,
    db: Database,
    tenant: str,
    tmp_path: Path,
    receiver: Receiver,
    inbox: tuple[Inbox, int],
    hook_secret: Path,
) -> None:
    """A file whose name is not UTF-8 dropped into a real hot folder: quarantined with its
    note, its file.quarantined event in the database, and the webhook and the mail
    delivered, the name escaped as ``\\xNN`` everywhere."""
    box, smtp_port = inbox
    folder, failed = tmp_path / "hot", tmp_path / "failed"
    folder.mkdir()
    env: Env = make_env(
        worker=WORKER,
        deliveries=DELIVERIES,
        smtp=_smtp(smtp_port),
        watch=[{"path": str(folder), "tenant": tenant, "failed": str(failed)}],
        hotfolders={"stable_seconds": 0.5, "rescan_interval": 60, "poll_interval": 0.3},
        notify=[
            {"name": "mail", "email": ["ops@example.org"], "events": ["file.*"]},
            {"name": "hook", "webhook": _hook(receiver, hook_secret), "events": ["file.*"]},
        ],
    )
    hot_db = Database(env.db_url, max_size=4).open()
    hot = HotFolders(
        env.config,
        make_intake(env.config, hot_db),
        events=EventLog(hot_db, env.config.paths.state_dir),
    )
    hot.start()
    try:
        raw_name = b"Scan_\xff\xfe.pdf"
        with open(os.path.join(os.fsencode(folder), raw_name), "wb") as f:
            f.write(pdf_bytes(seed=29))
        escaped_name = "Scan_\\xff\\xfe.pdf"
        note = failed / f"{escaped_name}.error.txt"
        wait_until(note.exists, timeout=60)
        wait_until(lambda: _count_events(db, "file.quarantined") == 1, timeout=60)
    finally:
        hot.stop()
        hot_db.close()
    text = note.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0].startswith("file: ") and lines[0].endswith(f"/{escaped_name}"), lines
    assert "reason: bad_filename" in lines
    assert (failed / escaped_name).read_bytes() == pdf_bytes(seed=29)
    assert os.listdir(os.fsencode(folder)) == []
    event = _one(db, "SELECT tenant, detail FROM operator_events WHERE type = 'file.quarantined'")
    assert event["tenant"] == "acme" and event["detail"]["filename"] == escaped_name
    assert event["detail"]["reason"] == "bad_filename"
    assert not (env.config.paths.state_dir / "events").exists() or not any(
        (env.config.paths.state_dir / "events").iterdir()
    )

    _drain(env, db)
    (request,) = receiver.requests
    payload = json.loads(request["body"].decode("utf-8"))
    assert payload["event"] == "file.quarantined"
    assert payload["detail"]["filename"] == escaped_name
    assert escaped_name in payload["text"]
    (mail,) = box.mails
    assert str(mail.message["Subject"]) == (
        f"[ingestd] acme: file {escaped_name} quarantined: bad_filename"
    )
    assert f"filename: {escaped_name}" in mail.message.get_content()
