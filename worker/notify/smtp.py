"""Sending an e-mail through the ``[smtp]`` relay (stdlib ``smtplib``), the whole exchange
bounded by ``smtp.timeout``; the relay's answers mapped to a retry or a refusal."""

from __future__ import annotations

import base64
import contextlib
import functools
import re
import smtplib
import socket
import ssl
import threading
from collections.abc import Sequence
from email.message import EmailMessage
from typing import Any

from ingestd.config.notify import SmtpConfig, address_of
from ingestd.errors import ConfigError, IngestdError
from worker.deadline import Deadline
from worker.jobs import PermanentError
from worker.notify.rendering import one_line

_WHITESPACE = re.compile(r"\s+")


class SmtpError(IngestdError):
    """The relay did not take the message (down, 4xx, TLS, AUTH ...); worth a retry."""

    transient = True

    def __init__(self, relay: str, code: int | None, reply: str) -> None:
        super().__init__(f"smtp {relay}: " + (f"{code} {reply}" if code is not None else reply))
        self.relay = relay
        self.code = code
        self.reply = reply


class SmtpRefused(PermanentError):
    """The relay refused this message or all its recipients for good (5xx)."""


@functools.cache
def _fqdn() -> str:
    # What EHLO says by default. socket.getfqdn() may wait for a DNS server: bounded.
    found: list[str] = []
    thread = threading.Thread(
        target=lambda: found.append(socket.getfqdn()), daemon=True, name="smtp-fqdn"
    )
    thread.start()
    thread.join(2.0)
    name = found[0] if found else socket.gethostname()
    return name if name and name.isascii() and " " not in name else "localhost"


class _Client(smtplib.SMTP):
    """smtplib's client, connecting (at once) within the delivery's deadline."""

    def __init__(self, deadline: Deadline, host: str, port: int, **kwargs: Any) -> None:
        self.deadline = deadline
        super().__init__(host, port, **kwargs)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        # No source_address: the config has none to give.
        return self.deadline.connect((host, port), timeout)


class _ClientTLS(smtplib.SMTP_SSL, _Client):
    # SMTP_SSL._get_socket wraps what _Client._get_socket connected in TLS.
    def __init__(self, deadline: Deadline, host: str, port: int, **kwargs: Any) -> None:
        self.deadline = deadline
        smtplib.SMTP_SSL.__init__(self, host, port, **kwargs)


def _tls_context(smtp: SmtpConfig) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(
            cafile=str(smtp.ca_file) if smtp.ca_file is not None else None
        )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"smtp ca_file {smtp.ca_file}: cannot load: {exc}") from None


def _reply(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return one_line(_WHITESPACE.sub(" ", text), 400)


def send_mail(smtp: SmtpConfig, recipients: Sequence[str], message: EmailMessage) -> dict[str, str]:
    """Hand ``message`` to the relay for ``recipients``; the recipients it refused while
    taking it for the others ({address: "code reply"}, usually empty).

    ``smtp.timeout`` bounds the whole delivery (lookup, connect, TLS, EHLO, AUTH, the
    message); SmtpError (retry) or SmtpRefused (permanent) otherwise.
    """
    relay = smtp.relay
    password = smtp.password() if smtp.username is not None else None
    context = _tls_context(smtp) if smtp.security != "none" else None
    sender = address_of(smtp.from_address)
    to = [address_of(r) for r in recipients]
    failure: BaseException | None = None
    refused: dict[str, tuple[int, bytes]] = {}
    helo = smtp.helo or _fqdn()
    with Deadline(smtp.timeout) as deadline:
        client: _Client | None = None
        try:
            # Connects and reads the greeting (smtplib keeps the host for TLS's SNI and
            # certificate check).
            if smtp.security == "tls":
                client = _ClientTLS(
                    deadline,
                    smtp.host,
                    smtp.port,
                    local_hostname=helo,
                    timeout=smtp.timeout,
                    context=context,
                )
            else:
                client = _Client(
                    deadline, smtp.host, smtp.port, local_hostname=helo, timeout=smtp.timeout
                )
            if smtp.security == "starttls":
                client.ehlo()
                if not client.has_extn("starttls"):
                    raise SmtpError(
                        relay,
                        None,
                        "does not offer STARTTLS (security = "
                        '"starttls"); set security = "none" only for a relay on a '
                        "network you trust",
                    )
                client.starttls(context=context)
                client.ehlo()
            if smtp.username is not None:
                assert password is not None
                _login(client, relay, smtp.username, password)
            refused = client.send_message(message, from_addr=sender, to_addrs=to)
        except (smtplib.SMTPException, OSError) as exc:
            failure = exc
        else:
            # Taken: whatever QUIT says does not undo that (a retry would send it twice).
            with contextlib.suppress(smtplib.SMTPException, OSError):
                client.quit()
        finally:
            if client is not None:
                client.close()
    if failure is not None:
        raise _smtp_error(failure, smtp, expired=deadline.expired)
    return {addr: f"{code} {_reply(text)}" for addr, (code, text) in refused.items()}


def _login(client: smtplib.SMTP, relay: str, username: str, password: str) -> None:
    if username.isascii() and password.isascii():
        client.login(username, password)  # CRAM-MD5, PLAIN or LOGIN, as offered
        return
    # smtplib encodes AUTH data as ASCII; PLAIN is UTF-8 (RFC 4616): send it ourselves.
    client.ehlo_or_helo_if_needed()
    if "PLAIN" not in client.esmtp_features.get("auth", "").upper().split():
        raise SmtpError(
            relay, None, "offers no AUTH PLAIN, which a password that is not ASCII needs"
        )
    token = base64.b64encode(b"\0" + username.encode() + b"\0" + password.encode()).decode()
    code, reply = client.docmd("AUTH", f"PLAIN {token}")
    if code != 235:
        raise smtplib.SMTPAuthenticationError(code, reply)


def _smtp_error(exc: BaseException, smtp: SmtpConfig, *, expired: bool) -> Exception:
    relay = smtp.relay
    late = SmtpError(relay, None, f"did not finish within {smtp.timeout:g} s")
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        answers = {a: (int(c), _reply(t)) for a, (c, t) in exc.recipients.items()}
        shown = "; ".join(f"{a}: {c} {t}" for a, (c, t) in answers.items())
        if answers and all(c >= 500 for c, _ in answers.values()):
            return SmtpRefused(f"smtp {relay}: recipients refused: {shown}")
        return SmtpError(relay, None, f"recipients not taken: {shown}")
    if isinstance(exc, smtplib.SMTPDataError) and exc.smtp_code >= 500:
        return SmtpRefused(
            f"smtp {relay}: message refused: {exc.smtp_code} {_reply(exc.smtp_error)}"
        )
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return SmtpError(
            relay,
            exc.smtp_code,
            f"{_reply(exc.smtp_error)} (AUTH as "
            f"{smtp.username!r}; check smtp.username and password_file)",
        )
    if isinstance(exc, smtplib.SMTPSenderRefused):
        return SmtpError(
            relay,
            exc.smtp_code,
            f"{_reply(exc.smtp_error)} (sender {exc.sender}; check smtp.from_address)",
        )
    if isinstance(exc, smtplib.SMTPResponseException):
        # A real answer (a 4xx anywhere, a 5xx greeting): it stands, even if late.
        return SmtpError(relay, exc.smtp_code, _reply(exc.smtp_error))
    if expired or isinstance(exc, TimeoutError):
        return late
    if isinstance(exc, smtplib.SMTPNotSupportedError):
        return SmtpError(
            relay,
            None,
            f"{exc} (smtp.username is set, but the relay offers no AUTH on this connection)",
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return SmtpError(
            relay,
            None,
            f"TLS certificate not accepted: {exc.verify_message} "
            "(smtp.ca_file names a CA to trust)",
        )
    if isinstance(exc, ssl.SSLError):
        return SmtpError(relay, None, f"TLS failed: {exc.reason or exc}")
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return SmtpError(relay, None, f"closed the connection ({exc or 'no reason'})")
    if isinstance(exc, socket.gaierror):
        return SmtpError(relay, None, f"cannot look up {smtp.host}: {exc.strerror or exc}")
    if isinstance(exc, OSError):
        return SmtpError(relay, None, (exc.strerror or str(exc) or type(exc).__name__).lower())
    return SmtpError(relay, None, str(exc) or type(exc).__name__)
