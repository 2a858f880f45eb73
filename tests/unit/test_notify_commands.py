"""The commands a notification tells an admin to run: plain ``ingestd ...`` for the default
config file, ``ingestd --config PATH ...`` for any other, never ``runuser``
(worker/notify/rendering.py ``admin_cli``; the path comes from ``load_config``)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingestd.config.load import DEFAULT_CONFIG_PATH, load_config, parse_config
from worker.notify.events import Event
from worker.notify.mail import email_body
from worker.notify.rendering import admin_cli, render

SMTP = {"host": "127.0.0.1", "port": 25, "from_address": "ingestd@example.org"}


def _event(type_: str, **detail: Any) -> Event:
    return Event(
        event_id=str(uuid.uuid4()),
        type=type_,
        severity="error",
        tenant="acme",
        detail=detail,
        trace_id="t-1",
        created_at=datetime(2026, 12, 3, 14, 15, 22, tzinfo=UTC),
    )


def test_default_config_gives_plain_commands() -> None:
    """The default file, and a config built in memory, need no --config."""
    assert admin_cli(DEFAULT_CONFIG_PATH) == "ingestd"
    assert admin_cli(None) == "ingestd"


def test_other_config_is_named_quoted_for_a_shell() -> None:
    """Any other file is passed with --config, quoted where a shell needs it."""
    assert admin_cli(Path("/srv/ingestd/ingestd.toml")) == (
        "ingestd --config /srv/ingestd/ingestd.toml"
    )
    assert admin_cli(Path("/srv/my configs/i.toml")) == "ingestd --config '/srv/my configs/i.toml'"


def test_load_config_remembers_the_absolute_file(tmp_path: Path, monkeypatch: Any) -> None:
    """load_config records where it read the config (absolute, whatever the working
    directory); parse_config (in memory) records nothing."""
    state = tmp_path / "state"
    config = tmp_path / "ingestd.toml"
    config.write_text(f'[paths]\nstate_dir = "{state}"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config(Path("ingestd.toml")).source_path == config
    assert parse_config({}).source_path is None


def test_mail_steps_start_with_the_admin_command() -> None:
    """Every step's command in the mail starts with the given command; prose is kept."""
    cfg = parse_config({"smtp": SMTP, "notify": [{"name": "ops", "email": ["ops@x.example"]}]})
    event = _event(
        "document.needs_attention", job_id=7, kind="analyze-document", document_id=42, attempts=1
    )
    cli = admin_cli(Path("/srv/ingestd/ingestd.toml"))
    body = email_body(event, render(event, cli), cfg.notify[0])
    for command in (
        "documents attention --tenant acme",
        "documents analyze --tenant acme 42",
        "documents mark-done --tenant acme 42",
    ):
        assert f"      ingestd --config /srv/ingestd/ingestd.toml {command}\n" in body, body
    assert "runuser" not in body
    plain = email_body(event, render(event), cfg.notify[0])
    assert "      ingestd documents attention --tenant acme\n" in plain
    assert "--config" not in plain


def test_steps_without_a_command_are_left_alone() -> None:
    """Advice that names ingestd in prose (no command to copy) is not rewritten."""
    event = _event("folder.gone", folder="/srv/hot/acme", reason="gone")
    assert render(event, admin_cli(Path("/x.toml"))).todo == render(event).todo
    assert all("--config" not in step for step in render(event, "ingestd --config /x").todo)
