"""Webhooks: their config and secrets, signatures, and signed delivery to a real HTTP server."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ingestd import __version__
from ingestd.config.load import parse_config
from ingestd.config.rules import WebhookConfig, redact_url
from ingestd.errors import ConfigError
from tests.unit.test_workflows import FACTS
from worker.analysis.workflows import event_payload
from worker.webhooks import WebhookError, deliver_webhook, event_body, sign, verify_signature

# --- webhook config and secrets -------------------------------------------------------


def secret_file(tmp_path: Path, content: str = "s3cret\n", mode: int = 0o600) -> Path:
    path = tmp_path / "hook.secret"
    path.write_text(content)
    path.chmod(mode)
    return path


def test_secret_from_file_strips_the_newline(tmp_path: Path) -> None:
    """secret_file (0600) is read on use; the trailing newline of `echo` is not secret."""
    hook = WebhookConfig(url="https://example.org/hook", secret_file=secret_file(tmp_path))
    assert hook.secret() == b"s3cret"


def test_group_readable_secret_file_is_fine(tmp_path: Path) -> None:
    """0640 (root:ingestd) is how a service user gets a root-owned secret."""
    path = secret_file(tmp_path, mode=0o640)
    assert WebhookConfig(url="http://h/", secret_file=path).secret() == b"s3cret"


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        pytest.param("s3cret", 0o644, "too open", id="world-readable"),
        pytest.param("s3cret", 0o660, "too open", id="group-writable"),
        pytest.param("\n", 0o600, "empty", id="empty"),
    ],
)
def test_unsafe_or_empty_secret_file_is_refused(
    tmp_path: Path, content: str, mode: int, message: str
) -> None:
    """A secret others can read, or an empty one, is a clear error, never used."""
    hook = WebhookConfig(url="http://h/", secret_file=secret_file(tmp_path, content, mode))
    with pytest.raises(ConfigError, match=message):
        hook.secret()


def test_missing_secret_file_is_a_clear_error(tmp_path: Path) -> None:
    """A missing secret file names the file."""
    hook = WebhookConfig(url="http://h/", secret_file=tmp_path / "nope")
    with pytest.raises(ConfigError, match=r"nope: no such file"):
        hook.secret()


def test_secret_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """secret_env reads the variable on use; an unset one is a clear error."""
    hook = WebhookConfig(url="http://h/", secret_env="INGESTD_TEST_HOOK_SECRET")
    monkeypatch.setenv("INGESTD_TEST_HOOK_SECRET", "from-env")
    assert hook.secret() == b"from-env"
    monkeypatch.delenv("INGESTD_TEST_HOOK_SECRET")
    with pytest.raises(ConfigError, match="INGESTD_TEST_HOOK_SECRET is not set"):
        hook.secret()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param({}, "exactly one of secret_file or secret_env", id="neither"),
        pytest.param({"secret_file": "/etc/s", "secret_env": "S"}, "exactly one", id="both"),
        pytest.param({"secret": "plain", "secret_env": "S"}, "Extra inputs", id="plaintext"),
        pytest.param({"secret_file": "rel/s"}, "absolute", id="relative-file"),
        pytest.param({"secret_env": "1-BAD"}, "pattern", id="bad-env-name"),
        pytest.param({"secret_env": "S", "url": "ftp://h/x"}, "http", id="ftp"),
        pytest.param({"secret_env": "S", "url": "https://u:pw@h/x"}, "password", id="password"),
        pytest.param({"secret_env": "S", "url": "https:///x"}, "host", id="no-host"),
        pytest.param({"secret_env": "S", "url": "https://h:99999/"}, "port", id="bad-port"),
        pytest.param({"secret_env": "S", "timeout": 0}, "greater than 0", id="zero-timeout"),
        pytest.param({"secret_env": "S", "timeout": 121}, "less than or equal", id="long"),
    ],
)
def test_bad_webhook_configs_are_refused(fields: dict[str, Any], message: str) -> None:
    """No plaintext secrets, exactly one secret source, http(s) URLs, sane timeouts."""
    with pytest.raises(ValidationError, match=message):
        WebhookConfig.model_validate({"url": "https://example.org/hook"} | fields)


def test_webhook_without_secret_is_a_config_problem() -> None:
    """check-config names the workflow's webhook when its secret is missing."""
    bad = {"tenant": "acme", "name": "wf", "then": {"webhook": {"url": "https://h/x"}}}
    with pytest.raises(ConfigError) as exc:
        parse_config({"workflows": [bad]})
    [problem] = exc.value.problems
    assert problem.startswith("workflows[0].then.webhook:") and "secret_env" in problem


def test_urls_are_redacted_for_logs() -> None:
    """Errors show no user info, query, fragment or token-like path segment."""
    url = "https://user@hooks.example.org:8443/services/T0/B0/abcdefghijklmnopqrstuvwx?key=1#f"
    assert redact_url(url) == "https://hooks.example.org:8443/services/T0/B0/…"


# --- signatures -----------------------------------------------------------------------


def test_signature_round_trip() -> None:
    """verify_signature accepts our signature and refuses any change to body or time."""
    body = event_body(event_payload(FACTS, "wf"))
    header = sign(b"k", "1700000000", body)
    assert header.startswith("sha256=") and len(header) == 7 + 64
    assert verify_signature(b"k", "1700000000", body, header)
    assert not verify_signature(b"other", "1700000000", body, header)
    assert not verify_signature(b"k", "1700000001", body, header)
    assert not verify_signature(b"k", "1700000000", body + b" ", header)
    assert not verify_signature(b"k", "17e8", body, header)
    assert verify_signature(b"k", "1700000000", body, header, max_age=300, now=1700000100)
    assert not verify_signature(b"k", "1700000000", body, header, max_age=300, now=1700000400)


# --- delivery to a real HTTP server ---------------------------------------------------


@dataclass
class Receiver:
    url: str
    status: int = 204
    body: bytes = b""
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    calls: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


@pytest.fixture(autouse=True)
def _no_proxy_for_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    # deliver_webhook honours http_proxy; the test receiver is on this host.
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


class _Server(http.server.ThreadingHTTPServer):
    # server_close() joins the handler threads (ThreadingMixIn): none outlives its test.
    daemon_threads = False
    block_on_close = True


@contextlib.contextmanager
def _serving(server: _Server, release: threading.Event) -> Iterator[None]:
    """Run ``server`` in a thread; afterwards set ``release`` and join all its threads."""
    thread = threading.Thread(target=server.serve_forever, name="test-receiver")
    thread.start()
    try:
        yield
    finally:
        release.set()  # handlers still waiting or dripping end now
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A real HTTP server on 127.0.0.1 recording each POST and answering as told."""
    server = _Server(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    rec = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hook")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            rec.calls.append({"path": self.path, "headers": dict(self.headers), "body": body})
            if rec.delay:
                rec.release.wait(rec.delay)
            self.send_response(rec.status)
            for name, value in rec.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(rec.body)))
            self.end_headers()
            self.wfile.write(rec.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server.RequestHandlerClass = Handler
    with _serving(server, rec.release):
        yield rec


@dataclass
class Dripper:
    url: str
    head: bytes = b""  # sent at once, after reading the request
    pieces: list[bytes] = field(default_factory=list)  # then one every 0.2 s
    tail: bytes = b""  # after the last piece
    sent: int = 0  # pieces sent
    hung_up: bool = False  # a send failed: the client had closed the connection
    done: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def dripper() -> Iterator[Dripper]:
    """A real HTTP server on 127.0.0.1 answering slowly, noting whether the client hung up."""
    server = _Server(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    drip = Dripper(url=f"http://127.0.0.1:{server.server_address[1]}/hook")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.close_connection = True
            try:
                self.wfile.write(drip.head)
                for piece in drip.pieces:
                    if drip.release.wait(0.2):
                        return  # the test is over
                    self.wfile.write(piece)
                    drip.sent += 1
                self.wfile.write(drip.tail)
            except (BrokenPipeError, ConnectionResetError):
                drip.hung_up = True
            finally:
                drip.done.set()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server.RequestHandlerClass = Handler
    with _serving(server, drip.release):
        yield drip


def test_webhook_delivers_one_signed_post(receiver: Receiver, tmp_path: Path) -> None:
    """One POST with JSON body, version, event id, timestamp and a signature that verifies
    with the secret from the 0600 secret file."""
    hook = WebhookConfig(url=receiver.url, secret_file=secret_file(tmp_path, "k3y\n"))
    event = event_payload(FACTS, "wf")
    before = int(time.time())
    assert deliver_webhook(hook, event, event_id="acme:42:wf") == 204
    [call] = receiver.calls
    headers = {k.lower(): v for k, v in call["headers"].items()}
    assert call["path"] == "/hook"
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == f"ingestd/{__version__}"
    assert headers["x-ingestd-event-id"] == "acme:42:wf"
    assert before <= int(headers["x-ingestd-timestamp"]) <= time.time()
    assert verify_signature(
        b"k3y",
        headers["x-ingestd-timestamp"],
        call["body"],
        headers["x-ingestd-signature"],
        max_age=60,
    )
    assert json.loads(call["body"]) == event
    assert call["body"] == event_body(event)  # sorted keys, compact: reproducible bytes


def test_webhook_with_secret_from_environment(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """secret_env signs the request with the variable's value."""
    monkeypatch.setenv("INGESTD_TEST_HOOK_SECRET", "env-k3y")
    hook = WebhookConfig(url=receiver.url, secret_env="INGESTD_TEST_HOOK_SECRET")
    receiver.status = 200
    assert deliver_webhook(hook, {"event": "x"}, event_id="e1") == 200
    [call] = receiver.calls
    headers = {k.lower(): v for k, v in call["headers"].items()}
    ts, sig = headers["x-ingestd-timestamp"], headers["x-ingestd-signature"]
    assert verify_signature(b"env-k3y", ts, call["body"], sig)


def test_server_error_raises_webhook_error(receiver: Receiver, tmp_path: Path) -> None:
    """A 500 raises WebhookError with status, body excerpt and a URL without secrets."""
    receiver.status, receiver.body = 500, b"database\non fire " + b"x" * 1000
    hook = WebhookConfig(url=receiver.url + "?token=hunter2", secret_file=secret_file(tmp_path))
    with pytest.raises(WebhookError) as exc:
        deliver_webhook(hook, {"event": "x"}, event_id="e1")
    err = exc.value
    assert err.status == 500 and err.url == receiver.url
    assert "HTTP 500" in err.message and "database on fire" in err.message
    assert "hunter2" not in err.message and len(err.detail) <= 201
    assert len(receiver.calls) == 1


def test_redirect_is_not_followed(receiver: Receiver, tmp_path: Path) -> None:
    """A 3xx is an error: a signed POST is never sent on to another URL."""
    receiver.status, receiver.headers = 307, {"Location": "http://127.0.0.1:9/elsewhere"}
    hook = WebhookConfig(url=receiver.url, secret_file=secret_file(tmp_path))
    with pytest.raises(WebhookError) as exc:
        deliver_webhook(hook, {"event": "x"}, event_id="e1")
    assert exc.value.status == 307 and len(receiver.calls) == 1


def test_slow_receiver_times_out(receiver: Receiver, tmp_path: Path) -> None:
    """A receiver that does not answer within the timeout raises WebhookError."""
    receiver.delay = 10
    hook = WebhookConfig(url=receiver.url, secret_file=secret_file(tmp_path), timeout=5)
    with pytest.raises(WebhookError, match=r"did not answer within 0\.3 s") as exc:
        deliver_webhook(hook, {"event": "x"}, event_id="e1", timeout=0.3)
    assert exc.value.status is None


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n", id="content-length"),
        pytest.param(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", id="until-close"),
    ],
)
def test_receiver_dripping_its_body_is_cut_off_at_the_timeout(
    dripper: Dripper, tmp_path: Path, head: bytes
) -> None:
    """A 200 whose body comes a byte per 0.2 s is a deadline error, and we hang up early."""
    dripper.head, dripper.pieces = head, [b"x"] * 50  # 10 s in all; each read takes 0.2 s
    hook = WebhookConfig(url=dripper.url, secret_file=secret_file(tmp_path), timeout=1)
    with pytest.raises(WebhookError) as exc:
        deliver_webhook(hook, {"event": "x"}, event_id="e1")
    assert exc.value.message == f"webhook {dripper.url}: no response: did not answer within 1 s"
    assert exc.value.status is None
    dripper.done.wait(15)  # the handler ends at its next send (after 10 s at the latest)
    assert dripper.hung_up and dripper.sent < 50, (dripper.hung_up, dripper.sent)


@pytest.mark.parametrize(
    ("head", "pieces", "tail"),
    [
        pytest.param(
            b"HTTP/1.1 200 OK\r\n",
            [b"X-Drip-%02d: x\r\n" % i for i in range(50)],
            b"Content-Length: 0\r\n\r\n",
            id="header-lines",
        ),
        pytest.param(
            b"", [bytes([c]) for c in b"HTTP/1.1 204 No Content\r\n"], b"\r\n", id="status-line"
        ),
    ],
)
def test_receiver_dripping_its_headers_is_cut_off_at_the_timeout(
    dripper: Dripper, tmp_path: Path, head: bytes, pieces: list[bytes], tail: bytes
) -> None:
    """Status line or headers coming a piece per 0.2 s: a deadline error, and we hang up early."""
    dripper.head, dripper.pieces, dripper.tail = head, pieces, tail
    hook = WebhookConfig(url=dripper.url, secret_file=secret_file(tmp_path), timeout=1)
    with pytest.raises(WebhookError) as exc:
        deliver_webhook(hook, {"event": "x"}, event_id="e1")
    assert exc.value.message == f"webhook {dripper.url}: no response: did not answer within 1 s"
    assert exc.value.status is None
    dripper.done.wait(15)  # the handler ends at its next send (after 10 s at the latest)
    assert dripper.hung_up and dripper.sent < len(pieces), (dripper.hung_up, dripper.sent)


def test_connection_refused_raises_webhook_error(tmp_path: Path) -> None:
    """Nobody listening is a (retryable) WebhookError too."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hook = WebhookConfig(url=f"http://127.0.0.1:{port}/", secret_file=secret_file(tmp_path))
    with pytest.raises(WebhookError, match="no response") as exc:
        deliver_webhook(hook, {"event": "x"}, event_id="e1")
    assert exc.value.status is None


def test_missing_secret_is_not_sent_unsigned(receiver: Receiver, tmp_path: Path) -> None:
    """Without a readable secret nothing is sent."""
    hook = WebhookConfig(url=receiver.url, secret_file=tmp_path / "gone")
    with pytest.raises(ConfigError):
        deliver_webhook(hook, {"event": "x"}, event_id="e1")
    assert receiver.calls == []
