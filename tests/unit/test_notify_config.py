"""[smtp] and [[notify]]: validation with key paths, defaults, which sinks want an event,
and what each event type says (subjects a sysadmin reads at a glance)."""

from __future__ import annotations

import tomllib
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ingestd.config.load import parse_config
from ingestd.config.notify import EVENT_TYPES, SmtpConfig, secret_envs, secret_files
from ingestd.config.settings import Config
from ingestd.errors import ConfigError
from worker.notify import matching_sinks
from worker.notify.events import Event
from worker.notify.mail import build_message, email_body
from worker.notify.rendering import render

SMTP = {"host": "mail.example.org", "from_address": "ingestd <ingestd@example.org>"}
HOOK = {"url": "https://hooks.example.org/ingestd", "secret_env": "HOOK_SECRET"}

# docs/notifications.md's [smtp] / [[notify]] example, with a webhook sink added.
README_EXAMPLE = """
[smtp]
host = "mail.example.org"
port = 587
security = "starttls"
username = "ingestd"
password_file = "/etc/ingestd/secrets/smtp-password"
from_address = "ingestd <ingestd@example.org>"
timeout = 30

[[notify]]
name = "ops-mail"
email = ["ops@example.org"]

[[notify]]
name = "ops-chat"
events = ["document.*", "job.failed", "delivery.failed", "sftp.banned"]
min_severity = "warning"
[notify.webhook]
url = "https://chat.example.org/hooks/ingestd"
secret_file = "/etc/ingestd/secrets/chat-hook"
timeout = 10

[[notify]]
name = "acme-admins"
tenant = "acme"
min_severity = "info"
email = ["it@acme.example", "Jane Doe <jane@acme.example>"]
"""


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return info.value.problems


def _config(**data: Any) -> Config:
    return parse_config(data)


def _event(
    type_: str, severity: str = "warning", tenant: str | None = "acme", **detail: Any
) -> Event:
    return Event(
        event_id=str(uuid.uuid4()),
        type=type_,
        severity=severity,
        tenant=tenant,
        detail=detail,
        trace_id="t-1",
        created_at=datetime(2026, 11, 3, 14, 15, 22, tzinfo=UTC),
    )


def test_readme_example_is_valid() -> None:
    """The documented example, with a webhook sink, parses into the sinks it describes."""
    cfg = parse_config(tomllib.loads(README_EXAMPLE))
    assert cfg.smtp is not None and (cfg.smtp.port, cfg.smtp.security) == (587, "starttls")
    assert [s.name for s in cfg.notify] == ["ops-mail", "ops-chat", "acme-admins"]
    assert cfg.notify[0].min_severity == "warning" and cfg.notify[0].events == ["*"]


def test_docs_example_is_valid() -> None:
    """The ``toml`` block of docs/notifications.md parses, its sinks as the text names them."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "notifications.md").read_text()
    block = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    cfg = parse_config(tomllib.loads(block))
    assert cfg.smtp is not None and cfg.smtp.password_file is not None
    assert [s.name for s in cfg.notify] == ["ops-mail", "acme-admins"]


def test_security_and_port_defaults() -> None:
    """A relay on this machine defaults to plain SMTP, port 465 to TLS, anything else to
    STARTTLS on 25."""

    def smtp(**kw: Any) -> SmtpConfig:
        cfg = _config(smtp={"from_address": "a@example.org", **kw})
        assert cfg.smtp is not None
        return cfg.smtp

    assert (smtp(host="localhost").security, smtp(host="localhost").port) == ("none", 25)
    assert smtp(host="127.0.0.1").security == "none"
    assert smtp(host="::1").security == "none"
    assert (smtp(host="mail.example.org").security, smtp(host="mail.example.org").port) == (
        "starttls",
        25,
    )
    assert smtp(host="mail.example.org", port=465).security == "tls"
    assert smtp(host="mail.example.org", security="tls").port == 465
    assert smtp(host="localhost", security="starttls").security == "starttls"
    assert smtp(host="mail.example.org", port=2525).relay == "mail.example.org:2525"


def test_smtp_problems_name_their_keys() -> None:
    """Bad [smtp] values are refused with the key path and the fix."""
    problems = _problems(
        {
            "smtp": {
                "host": "mail.example.org:587",
                "from_address": "nobody",
                "passwd": "x",
                "timeout": 0,
            }
        }
    )
    text = "\n".join(problems)
    assert "smtp.host: must be a host name or IP address; put the port in smtp.port" in text
    assert "smtp.from_address: 'nobody' is not an e-mail address" in text
    assert "smtp.passwd: unknown key" in text
    assert "smtp.timeout:" in text
    (p,) = _problems({"smtp": {**SMTP, "username": "ingestd"}})
    assert p.startswith("smtp: username and password_file go together")
    (p,) = _problems(
        {
            "smtp": {
                **SMTP,
                "host": "10.1.2.3",
                "security": "none",
                "username": "u",
                "password_file": "/etc/pw",
            }
        }
    )
    assert "in clear over the network" in p
    (p,) = _problems({"smtp": {**SMTP, "username": "u", "password_file": "pw"}})
    assert p.startswith("smtp.password_file: must be an absolute path")
    (p,) = _problems({"smtp": {**SMTP, "port": True}})
    assert p == "smtp.port: must be an integer, not true/false (got True)"
    # On this machine a plain AUTH is fine: nothing crosses the network.
    _config(smtp={**SMTP, "host": "localhost", "username": "u", "password_file": "/etc/pw"})


def test_notify_problems_name_their_keys() -> None:
    """A sink needs exactly one channel, e-mail needs [smtp], names are unique, globs must
    match a known event type, addresses must be addresses."""
    problems = _problems(
        {
            "notify": [
                {"name": "ok", "webhook": HOOK},
                {"name": "mail", "email": ["ops@example.org"]},
                {"name": "ok", "webhook": HOOK},
            ]
        }
    )
    assert problems == [
        "notify[1]: email needs an [smtp] section (host, from_address)",
        "notify[2].name: 'ok' is used twice (also notify[0]), but a sink is found by its name",
    ]
    problems = _problems(
        {
            "smtp": SMTP,
            "notify": [
                {"name": "both", "email": ["a@example.org"], "webhook": HOOK},
                {"name": "none"},
                {"name": "typo", "webhook": HOOK, "events": ["document.need_attention"]},
                {"name": "addr", "email": ["ops@example.org", "not an address", "ops@example.org"]},
                {"name": "sev", "webhook": HOOK, "min_severity": "critical"},
                {"name": "bad name!", "webhook": HOOK},
                {"name": "t", "webhook": HOOK, "tenant": "Acme"},
                {"name": "list", "email": ["a@example.org, b@example.org"]},
            ],
        }
    )
    text = "\n".join(problems)
    assert "notify[0]: notify sink 'both' needs exactly one of email" in text
    assert "notify[1]: notify sink 'none' needs exactly one of email" in text
    assert "notify[2].events: 'document.need_attention' matches no event type" in text
    assert "notify[3].email: 'not an address' is not an e-mail address" in text
    assert "notify[4].min_severity:" in text
    assert "notify[5].name:" in text
    assert "notify[6].tenant:" in text
    assert "notify[7].email: 'a@example.org, b@example.org': one address per list entry" in text
    (p,) = _problems(
        {
            "smtp": SMTP,
            "notify": [{"name": "dup", "email": ["ops@example.org", "Ops <OPS@example.org>"]}],
        }
    )
    assert p.startswith("notify[0].email: 'ops@example.org' is listed twice")


def test_secret_files_are_listed() -> None:
    """The SMTP password file and webhook secret files, with their key paths."""
    hook = {"url": "https://x.example/h", "secret_file": "/etc/ingestd/hook"}
    cfg = _config(
        smtp={**SMTP, "username": "u", "password_file": "/etc/ingestd/smtp"},
        notify=[{"name": "m", "email": ["a@example.org"]}, {"name": "h", "webhook": hook}],
    )
    assert secret_files(cfg.smtp, cfg.notify) == [
        ("smtp.password_file", Path("/etc/ingestd/smtp")),
        ("notify[1].webhook.secret_file", Path("/etc/ingestd/hook")),
    ]
    assert cfg.secret_files()[-2:] == secret_files(cfg.smtp, cfg.notify)
    env = _config(notify=[{"name": "h", "webhook": HOOK}])
    assert secret_envs(env.notify) == [("notify[0].webhook.secret_env", "HOOK_SECRET")]


def test_password_file_must_be_private(tmp_path: Path) -> None:
    """The SMTP password is read from its file at each use, and only from a private file."""
    pw = tmp_path / "pw"
    pw.write_text("s3cret ä\n")
    cfg = _config(smtp={**SMTP, "username": "u", "password_file": str(pw)})
    assert cfg.smtp is not None
    pw.chmod(0o644)
    with pytest.raises(ConfigError, match=r"mode 0644 is too open"):
        cfg.smtp.password()
    pw.chmod(0o640)
    assert cfg.smtp.password() == "s3cret ä"
    pw.write_text("rotated\n")
    assert cfg.smtp.password() == "rotated"
    pw.unlink()
    with pytest.raises(ConfigError, match="no such file"):
        cfg.smtp.password()


def test_matching_sinks_by_tenant_severity_and_glob() -> None:
    """Global sinks see every tenant and the appliance; tenant sinks only their tenant;
    min_severity and event globs filter."""
    cfg = _config(
        smtp=SMTP,
        notify=[
            {"name": "all", "email": ["a@example.org"], "min_severity": "info"},
            {"name": "default", "webhook": HOOK},
            {"name": "acme", "tenant": "acme", "email": ["b@example.org"], "min_severity": "info"},
            {"name": "docs", "webhook": HOOK, "events": ["document.*"], "min_severity": "error"},
            {"name": "bans", "webhook": HOOK, "events": ["sftp.banned", "file.*"]},
        ],
    )

    def sinks(type_: str, severity: str, tenant: str | None) -> list[str]:
        return matching_sinks(cfg, {"type": type_, "severity": severity, "tenant": tenant})

    assert sinks("tenant.active", "info", "acme") == ["all", "acme"]
    assert sinks("tenant.suspended", "warning", "acme") == ["all", "default", "acme"]
    assert sinks("tenant.suspended", "warning", "other") == ["all", "default"]
    assert sinks("sftp.banned", "warning", None) == ["all", "default", "bans"]
    assert sinks("document.needs_attention", "error", "acme") == ["all", "default", "acme", "docs"]
    assert sinks("file.refused", "info", "other") == ["all"]
    assert (
        matching_sinks(_config(), {"type": "job.failed", "severity": "error", "tenant": "acme"})
        == []
    )


@pytest.mark.parametrize(
    ("event", "subject"),
    [
        (
            _event(
                "document.needs_attention",
                "error",
                job_id=7,
                kind="analyze-document",
                document_id=42,
                attempts=1,
                error="the PDF is encrypted (password-protected); ingestd cannot OCR it",
            ),
            "[ingestd] acme: document 42 needs attention: the PDF is encrypted "
            "(password-protected); ingestd cannot OCR it",
        ),
        (
            _event(
                "job.failed",
                "error",
                job_id=17,
                kind="analyze-document",
                document_id=42,
                attempts=6,
                error="OcrError: tesseract crashed\n  at worker/analysis/ocr.py:10 in run",
            ),
            "[ingestd] acme: job 17 (analyze-document) of document 42 failed after 6 attempts: "
            "OcrError: tesseract crashed",
        ),
        (
            _event(
                "delivery.failed",
                "error",
                job_id=18,
                kind="deliver-webhook",
                document_id=42,
                attempts=13,
                error="webhook https://erp.example.com/hooks: HTTP 503",
            ),
            "[ingestd] acme: webhook for document 42 not delivered after 13 attempts: "
            "webhook https://erp.example.com/hooks: HTTP 503",
        ),
        (_event("tenant.created", "info", status="creating"), "[ingestd] tenant acme created"),
        (
            _event("tenant.active", "info", **{"from": "creating", "to": "active"}),
            "[ingestd] tenant acme is active",
        ),
        (
            _event("tenant.active", "info", **{"from": "suspended", "to": "active"}),
            "[ingestd] tenant acme is active again",
        ),
        (
            _event("tenant.suspended", **{"from": "active", "to": "suspended"}),
            "[ingestd] tenant acme suspended",
        ),
        (
            _event("tenant.deleting", **{"from": "suspended", "to": "deleting"}),
            "[ingestd] tenant acme is being deleted",
        ),
        (_event("tenant.deleted", status="deleting"), "[ingestd] tenant acme deleted"),
        (
            _event(
                "file.quarantined",
                filename="Scan_0001.pdf",
                source="sftp:scanner-2og",
                reason="unsupported type",
                detail="a Word document, not a scan",
                moved_to="/var/lib/ingestd/failed/acme/Scan_0001.pdf",
            ),
            "[ingestd] acme: file Scan_0001.pdf quarantined: unsupported type",
        ),
        (
            _event("file.refused", filename="big.tiff", reason="too large"),
            "[ingestd] acme: file big.tiff refused: too large",
        ),
        (
            _event("sftp.banned", tenant=None, remote_ip="203.0.113.9", seconds=1800, ban_count=1),
            "[ingestd] SFTP: 203.0.113.9 banned for 30 min after failed logins",
        ),
        (
            _event("disk.full", "error", tenant=None, error="archive at 99 %"),
            "[ingestd] disk.full: archive at 99 %",
        ),
    ],
    ids=lambda v: v.type if isinstance(v, Event) else None,
)
def test_subjects(event: Event, subject: str) -> None:
    """Each event type has a subject that says what happened, to what, and why."""
    assert render(event).subject == subject


def test_every_known_type_has_its_own_text() -> None:
    """No known event type falls back to the generic rendering."""
    for type_ in EVENT_TYPES:
        assert render(_event(type_)).what != f"ingestd recorded the event {type_} (warning)."


def test_body_has_context_details_and_next_steps() -> None:
    """The body names the tenant, the time, the trace id, every detail field and the
    commands to run; a long subject is cut, the body keeps everything."""
    cfg = _config(smtp=SMTP, notify=[{"name": "ops", "email": ["ops@example.org"]}])
    assert cfg.smtp is not None
    reason = "the PDF is encrypted " + "x" * 300
    event = _event(
        "document.needs_attention",
        "error",
        job_id=7,
        kind="analyze-document",
        document_id=42,
        attempts=1,
        error=reason,
    )
    rendered = render(event)
    assert len(rendered.subject) <= 200 and rendered.subject.endswith("…")
    body = email_body(event, rendered, cfg.notify[0])
    for part in (
        "tenant:    acme",
        "time:      2026-11-03 14:15:22 UTC",
        "trace id:  t-1",
        f"event id:  {event.event_id}",
        "document_id: 42",
        "kind:        analyze",
        "ingestd documents attention --tenant acme",
        "ingestd documents analyze --tenant acme 42",
        "notify sink 'ops'",
    ):
        assert part in body, part
    msg = build_message(cfg.smtp, cfg.notify[0], event, rendered)
    assert msg["Message-ID"] == f"<{event.event_id}.ops@example.org>"
    assert msg["X-Ingestd-Event-Id"] == f"{event.event_id}:ops"
    assert msg["Auto-Submitted"] == "auto-generated" and msg["Date"]
