"""The fail2ban filter matches exactly the failed-login lines the SFTP server writes.

The lines come from the server's own authentication code (``ServerPolicy``) rendered by
``ingestd.log``'s JSON set-up, so a renamed event or key breaks this test, not fail2ban
in production.
"""

from __future__ import annotations

import configparser
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestd import log
from ingestd.config.load import parse_config
from ingestd.passwords import hash_password
from ingestd.sources.sftp.auth import ServerPolicy
from ingestd.sources.sftp.bans import BanList
from ingestd.sources.sftp.connections import Connection
from ingestd.sources.sftp.server import SftpServer
from ingestd.sources.sftp.spool import Spool

CONFIG = Path(__file__).parents[2] / "config" / "fail2ban"
FILTER = CONFIG / "filter.d" / "ingestd-sftp.conf"
JAIL = CONFIG / "jail.d" / "ingestd-sftp.conf"
# fail2ban's own <HOST> is more thorough; this is enough for IPv4 and IPv6 literals.
HOST = r"(?P<host>[0-9a-fA-F.:]+)"


def _read(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(path.read_text())
    return parser


def _failregex() -> list[re.Pattern[str]]:
    raw = _read(FILTER)["Definition"]["failregex"]
    lines = [line.strip() for line in raw.splitlines() if line.strip()]
    assert len(lines) == 2  # one per key order
    return [re.compile(line.replace("<HOST>", HOST)) for line in lines]


def _host(line: str) -> str | None:
    """What fail2ban would ban for ``line``: the host of the first matching failregex."""
    for rx in _failregex():
        m = rx.search(line)
        if m:
            return m.group("host")
    return None


@pytest.fixture
def server_lines(tmp_path: Path) -> Iterator[list[str]]:
    """Real log lines: the server's login code answering good and bad logins."""
    stream = io.StringIO()
    log.configure("info", "json", stream=stream)
    try:
        config = parse_config(
            {
                "paths": {"state_dir": str(tmp_path / "state"), "spool": str(tmp_path / "spool")},
                "sftp": {
                    "bans": {"threshold": 3},
                    "accounts": [
                        {
                            "username": "scan1",
                            "tenant": "acme",
                            "password_hash": hash_password("right", rounds=4),
                        }
                    ],
                },
            }
        )
        bans = BanList(config.sftp.bans, None)
        server = SftpServer(config, Spool(tmp_path / "spool", []), [], bans)

        def policy(ip: str) -> ServerPolicy:
            assert server.host is not None  # sftp.processes = 1: the host is the server's
            return ServerPolicy(server.host.login_context, Connection(f"c-{ip}", ip, 40000))

        p = policy("192.0.2.7")
        p.check_auth_password("nobody", "x")  # unknown_user
        p.check_auth_password("scan1", "wrong")  # wrong_password, then the ban
        policy("2001:db8::5").check_auth_password("scan1", "wrong")
        policy("192.0.2.8").check_auth_password('x", "remote_ip": "6.6.6.6', "x")
        policy("192.0.2.9").check_auth_password("scan1", "right")  # sftp.login
        # What the accept loop writes for a banned address.
        server.log.info("sftp.banned_connection_closed", remote_ip="192.0.2.7")
        yield stream.getvalue().splitlines()
    finally:
        log.configure("debug", "json")


def _by_event(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in lines:
        out.setdefault(json.loads(line)["event"], []).append(line)
    return out


def test_filter_matches_failed_logins(server_lines: list[str]) -> None:
    """Every sftp.auth_failed line matches and yields its remote_ip, IPv4 and IPv6."""
    events = _by_event(server_lines)
    failed = events["sftp.auth_failed"]
    assert len(failed) == 4
    assert [_host(line) for line in failed] == [json.loads(line)["remote_ip"] for line in failed]
    assert {_host(line) for line in failed} == {"192.0.2.7", "2001:db8::5", "192.0.2.8"}


def test_filter_ignores_other_events(server_lines: list[str]) -> None:
    """Logins, ingestd's own ban lines and closed banned connections do not count."""
    events = _by_event(server_lines)
    assert {"sftp.login", "sftp.banned", "sftp.banned_connection_closed"} <= events.keys()
    for event, lines in events.items():
        if event != "sftp.auth_failed":
            assert all(_host(line) is None for line in lines), event


def test_user_name_cannot_forge_the_address(server_lines: list[str]) -> None:
    """A user name containing '"remote_ip": "6.6.6.6"' does not make fail2ban ban 6.6.6.6."""
    [forged] = [line for line in server_lines if "6.6.6.6" in line]
    assert json.loads(forged)["event"] == "sftp.auth_failed"
    assert _host(forged) == "192.0.2.8"


@pytest.mark.parametrize("order", ["reversed", "sorted"])
def test_filter_does_not_depend_on_key_order(server_lines: list[str], order: str) -> None:
    """Failed-login lines match in any key order and behind a journal prefix."""
    for line in _by_event(server_lines)["sftp.auth_failed"]:
        rec: dict[str, Any] = json.loads(line)
        items = list(rec.items())
        items = items[::-1] if order == "reversed" else sorted(items)
        moved = json.dumps(dict(items))
        assert _host(moved) == rec["remote_ip"]
        assert _host(f"scanhost ingestd[4711]: {moved}") == rec["remote_ip"]
        login = dict(items, event="sftp.login")
        assert _host(json.dumps(login)) is None


def test_jail_uses_the_journal_of_the_service() -> None:
    """The jail reads ingestd.service's journal with this filter, for the SFTP port."""
    jail = _read(JAIL)["ingestd-sftp"]
    assert jail["filter"] == "ingestd-sftp"
    assert jail["backend"] == "systemd"
    assert jail["journalmatch"] == "_SYSTEMD_UNIT=ingestd.service"
    assert jail["port"] == "2222"
    assert jail.getboolean("enabled")
