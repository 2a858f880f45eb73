"""Config models for telling someone: ``[smtp]`` (the mail relay) and ``[[notify]]`` sinks.

Operator events (``operator_events``, migration 0008) go to every ``[[notify]]`` sink
that wants them: an e-mail through the ``[smtp]`` relay, or a signed webhook (the same
``WebhookConfig`` and signature as workflow webhooks). A sink without ``tenant`` is
global and gets every event, the appliance's own included (an SFTP ban has no tenant);
a sink with ``tenant`` gets only that tenant's. ``worker/notify.py`` matches, renders and
delivers; each delivery is a ``notify`` job with the [deliveries] retry ladder.

Secrets live in files (mode 0600 or 0640), never in the config file; they are read at
each delivery, so a rotated password takes effect for pending notifications too.

This module must not import ``ingestd.config.settings``: that one imports these models.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from collections.abc import Sequence
from email.utils import parseaddr
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from ingestd.config.filemodes import GROUP_READABLE, read_secret_file
from ingestd.config.rules import (
    SECONDS,
    TENANT_NAME,
    AbsolutePath,
    ConfigModel,
    Shown,
    WebhookConfig,
)
from ingestd.errors import ConfigError

Severity = Literal["info", "warning", "error"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}

# Every operator event type ingestd writes; a sink's `events` glob must match one of them
# (a typo like "document.need_attention" would otherwise silently match nothing).
EVENT_TYPES: tuple[str, ...] = (
    "document.needs_attention",  # analysis cannot handle a document (job_fail)
    "job.failed",  # a job failed for good (job_fail, jobs_rescue)
    "delivery.failed",  # a workflow webhook was not delivered for good
    "tenant.created",  # the tenants trigger (migration 0008)
    "tenant.active",
    "tenant.suspended",
    "tenant.deleting",
    "tenant.deleted",
    "file.quarantined",  # the daemon (ingestd.events.outbox.EventLog)
    "file.refused",
    "file.not_removable",  # archived, but the hot folder will not let it go (stuck)
    "folder.gone",  # a hot folder vanished or was replaced (unmounted share, rm -rf)
    "folder.back",
    "folder.unreadable",  # the daemon may not list a hot folder (owner, mode, its groups)
    "sftp.banned",
)

# A sink's name: in job payloads, log lines and the X-Ingestd-Event-Id / Message-ID of
# what it sends, so kept to characters that are safe in all of them.
SINK_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_GLOB = re.compile(r"^[a-z_.*?\[\]!-]+$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_][A-Za-z0-9_-]{0,62}(\.[A-Za-z0-9_-]{1,63})*\.?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_MAX_PASSWORD = 4096


class _Section(ConfigModel):
    """Like ingestd.config.settings._Section: unknown keys are errors, values are immutable, a
    boolean is never a number."""


def mail_address(value: str) -> str:
    """``value`` if it is one e-mail address (``a@b.example`` or ``Name <a@b.example>``)."""
    if _CONTROL.search(value) or not value.strip():
        raise ValueError("must be an e-mail address like ops@example.org")
    if "," in value or ";" in value:
        # parseaddr() of "a@x, b@y" quietly returns a@x on some Python versions.
        raise ValueError(f"{value!r}: one address per list entry")
    _, addr = parseaddr(value)
    local, at, domain = addr.rpartition("@")
    if not at or not local or not domain or any(c.isspace() for c in addr) or "@" in local:
        raise ValueError(f"{value!r} is not an e-mail address like ops@example.org")
    if not _HOSTNAME.match(domain) and not re.match(r"^\[[0-9A-Fa-f:.]+\]$", domain):
        raise ValueError(f"{value!r}: {domain!r} is not a mail domain")
    return value.strip()


def address_of(value: str) -> str:
    """The bare address (the SMTP envelope's) of a validated ``mail_address``."""
    return parseaddr(value)[1]


MailAddress = Annotated[str, Field(min_length=3, max_length=320)]


def _is_loopback(host: str) -> bool:
    if host.rstrip(".").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class SmtpConfig(_Section):
    """The mail relay that e-mail sinks send through (a local MTA, or the site's relay).

    ``security``: ``starttls`` (upgrade a plain connection; refused if the relay does not
    offer it), ``tls`` (TLS from the first byte, usually port 465) or ``none``. Without
    it: ``none`` for a relay on this machine (localhost, 127.0.0.1, ::1: nothing leaves
    the host, and a local MTA's STARTTLS certificate is usually the self-signed snakeoil
    one, which could not be verified), ``tls`` on port 465, else ``starttls``: mail and a
    password never cross the network in clear unless you say so. Certificates are
    verified against the system's CAs (or ``ca_file``) and the host name.
    """

    host: str
    """Host name or IP address of the relay (its port goes in `port`)."""
    port: Annotated[
        int, Field(ge=1, le=65535), Shown(default='`465` with `security = "tls"`, else `25`')
    ] = 25
    """The relay's port."""
    security: Annotated[
        Literal["none", "starttls", "tls"],
        Shown(default="`none` for a relay on this host, `tls` on port 465, else `starttls`"),
    ] = "starttls"
    """`starttls` (upgrade a plain connection; refused if the relay does not offer it),
    `tls` (TLS from the first byte) or `none` (plain; refused with AUTH to another host)."""
    username: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """The AUTH user name: with `password_file`, or neither."""
    password_file: AbsolutePath | None = None
    """A file (mode 0600 or 0640) holding the AUTH password, read at each delivery."""
    ca_file: AbsolutePath | None = None
    """CA certificate(s) (PEM) to verify the relay with instead of the system's (an
    internal CA)."""
    from_address: MailAddress
    """The `From:` of every notification, also the envelope sender."""
    # At most 120, well inside worker.timeouts.notify.
    timeout: Annotated[float, Field(gt=0, le=120), SECONDS] = 30.0
    """Seconds for the whole delivery (lookup, connect, TLS, AUTH, sending), not per
    read."""
    helo: Annotated[
        Annotated[str, Field(min_length=1, max_length=253)] | None,
        Shown(default="this host's fully qualified name"),
    ] = None
    """The name sent in EHLO/HELO."""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        # The defaults of port and security depend on each other and on the host.
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "security" not in data:
            port, host = data.get("port"), data.get("host")
            if port == 465:
                data["security"] = "tls"
            elif isinstance(host, str) and _is_loopback(host):
                data["security"] = "none"
        if "port" not in data and data.get("security") == "tls":
            data["port"] = 465
        return data

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if ":" in v and not _is_ip(v.strip("[]")):
            raise ValueError("must be a host name or IP address; put the port in smtp.port")
        if not _is_ip(v.strip("[]")) and not _HOSTNAME.match(v):
            raise ValueError(
                "must be a host name or IP address, e.g. 'localhost' or 'mail.example.org'"
            )
        return v.strip("[]")

    @field_validator("from_address")
    @classmethod
    def _from(cls, v: str) -> str:
        return mail_address(v)

    @field_validator("helo")
    @classmethod
    def _helo(cls, v: str | None) -> str | None:
        if v is not None and not _HOSTNAME.match(v) and not re.match(r"^\[[0-9A-Fa-f:.]+\]$", v):
            raise ValueError("must be a host name (this machine's FQDN) or an [address literal]")
        return v

    @model_validator(mode="after")
    def _auth(self) -> SmtpConfig:
        if (self.username is None) != (self.password_file is None):
            raise ValueError(
                "username and password_file go together (AUTH needs both; "
                "no passwords in the config file)"
            )
        if self.username is not None and self.security == "none" and not _is_loopback(self.host):
            raise ValueError(
                f'security = "none" would send the password for '
                f'{self.host} in clear over the network; use "starttls" or '
                '"tls"'
            )
        return self

    @property
    def relay(self) -> str:
        """``host:port`` for logs and errors."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def password(self) -> str:
        """The AUTH password from ``password_file``; ConfigError if missing, empty or
        readable by others (0600, or 0640 for a service group)."""
        assert self.password_file is not None
        what = f"smtp password_file {self.password_file}"
        data = read_secret_file(self.password_file, what, GROUP_READABLE, _MAX_PASSWORD)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{what}: not UTF-8") from None


def _is_ip(v: str) -> bool:
    try:
        ipaddress.ip_address(v)
    except ValueError:
        return False
    return True


EventGlob = Annotated[str, Field(min_length=1, max_length=100)]
EVENT_GLOBS = Shown(kind="list of globs over " + ", ".join(f"`{t}`" for t in EVENT_TYPES))


class NotifySink(_Section):
    """Where operator events go: exactly one of ``email`` or ``webhook``.

    ``tenant`` omitted: a global sink, every event (the appliance's own included);
    set: only that tenant's events. ``events``: globs over event types
    (``["document.*", "job.failed"]``); ``min_severity``: info < warning < error.
    """

    name: Annotated[str, Field(pattern=SINK_NAME)]
    """The sink's name, unique: it is in job payloads, log lines and the event id and
    Message-ID of what the sink sends."""
    tenant: Annotated[str, Field(pattern=TENANT_NAME)] | None = None
    """Only this tenant's events; absent: a global sink, which gets every event (the
    appliance's own included)."""
    events: Annotated[list[EventGlob], Field(min_length=1), EVENT_GLOBS] = Field(
        default_factory=lambda: ["*"]
    )
    """The events the sink wants (`["document.*", "job.failed"]`); each glob must match
    one event type."""
    min_severity: Severity = "warning"
    """The least severity the sink wants: info < warning < error."""
    email: Annotated[list[MailAddress], Field(min_length=1, max_length=100)] | None = None
    """E-mail addresses (one per entry) to send the events to through `[smtp]`; exactly one
    of `email` and `webhook`."""
    webhook: WebhookConfig | None = None
    """POST the events as signed JSON, as workflow webhooks do; exactly one of `email` and
    `webhook`."""

    @field_validator("events")
    @classmethod
    def _globs(cls, v: list[str]) -> list[str]:
        for glob in v:
            if not _GLOB.match(glob):
                raise ValueError(
                    f"{glob!r} is not a glob over event types "
                    "(lower-case letters, '_', '.', '*', '?', [...])"
                )
            if not any(fnmatch.fnmatchcase(t, glob) for t in EVENT_TYPES):
                raise ValueError(f"{glob!r} matches no event type; known: {', '.join(EVENT_TYPES)}")
        return v

    @field_validator("email")
    @classmethod
    def _addresses(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        out = [mail_address(a) for a in v]
        bare = [address_of(a).lower() for a in out]
        dup = next((a for i, a in enumerate(bare) if a in bare[:i]), None)
        if dup is not None:
            raise ValueError(f"{dup!r} is listed twice")
        return out

    @model_validator(mode="after")
    def _one_channel(self) -> NotifySink:
        if (self.email is None) == (self.webhook is None):
            raise ValueError(
                f"notify sink {self.name!r} needs exactly one of email = [...] "
                "or webhook = {url, secret_file | secret_env}"
            )
        return self

    def wants(self, event_type: str, severity: str, tenant: str | None) -> bool:
        """True if this sink is to be told about such an event."""
        if self.tenant is not None and tenant != self.tenant:
            return False
        if SEVERITY_RANK.get(severity, 2) < SEVERITY_RANK[self.min_severity]:
            return False
        return any(fnmatch.fnmatchcase(event_type, glob) for glob in self.events)

    @property
    def target(self) -> str:
        """What the sink sends to, for logs: the addresses or the webhook's redacted URL."""
        if self.webhook is not None:
            return self.webhook.display_url
        return ", ".join(self.email or ())


def check_notify(smtp: SmtpConfig | None, sinks: Sequence[NotifySink]) -> list[str]:
    """Problems between sinks and [smtp] (for ``Config``'s validator), with key paths."""
    problems = []
    seen: dict[str, int] = {}
    for i, sink in enumerate(sinks):
        if sink.email is not None and smtp is None:
            problems.append(f"notify[{i}]: email needs an [smtp] section (host, from_address)")
        if sink.name in seen:
            first = seen[sink.name]
            problems.append(
                f"notify[{i}].name: {sink.name!r} is used twice (also "
                f"notify[{first}]), but a sink is found by its name"
            )
        seen.setdefault(sink.name, i)
    return problems


def secret_files(smtp: SmtpConfig | None, sinks: Sequence[NotifySink]) -> list[tuple[str, Path]]:
    """(key path, file) of every secret file these sections name."""
    out: list[tuple[str, Path]] = []
    if smtp is not None and smtp.password_file is not None:
        out.append(("smtp.password_file", smtp.password_file))
    for i, sink in enumerate(sinks):
        if sink.webhook is not None and sink.webhook.secret_file is not None:
            out.append((f"notify[{i}].webhook.secret_file", sink.webhook.secret_file))
    return out


def secret_envs(sinks: Sequence[NotifySink]) -> list[tuple[str, str]]:
    """(key path, variable) of every secret environment variable these sinks name."""
    return [
        (f"notify[{i}].webhook.secret_env", sink.webhook.secret_env)
        for i, sink in enumerate(sinks)
        if sink.webhook is not None and sink.webhook.secret_env is not None
    ]
