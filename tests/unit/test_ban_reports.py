"""Failed logins reported by the web console and WebDAV (issue 31) are counted by the
SFTP server's ban list: each report once, whatever else lies in the folder."""

from __future__ import annotations

from pathlib import Path

from ingestd.config.settings import SftpBansConfig
from ingestd.sources.sftp.bans import REPORT_DIR, BanList, read_bans, report_failure


def test_reports_are_counted_once_and_ban_the_address(tmp_path: Path) -> None:
    """Three reports reach the threshold of 3: the address is banned; the reports are
    gone; absorbing again counts nothing."""
    bans = BanList(SftpBansConfig(threshold=3), tmp_path)
    for _ in range(3):
        report_failure(tmp_path, "203.0.113.7")
    assert bans.absorb_reports() == 3
    assert [b["ip"] for b in read_bans(tmp_path)] == ["203.0.113.7"]
    assert list((tmp_path / REPORT_DIR).iterdir()) == []
    assert bans.absorb_reports() == 0


def test_what_is_not_a_report_is_left_alone_and_an_unknown_user_scores_more(tmp_path: Path) -> None:
    """A file whose name is no address is neither read nor removed; `unknown` lines
    score as an unknown user (2 by default), so two of them reach a threshold of 4."""
    folder = tmp_path / REPORT_DIR
    folder.mkdir()
    (folder / "not-an-address").write_text("wrong\n" * 10)
    report_failure(tmp_path, "2001:db8::1", unknown_user=True)
    report_failure(tmp_path, "2001:0db8:0::1", unknown_user=True)  # the same address
    bans = BanList(SftpBansConfig(threshold=4), tmp_path)
    assert bans.absorb_reports() == 2
    assert [b["ip"] for b in read_bans(tmp_path)] == ["2001:db8::1"]
    assert (folder / "not-an-address").exists()


def test_a_report_of_something_that_is_not_an_address_is_refused(tmp_path: Path) -> None:
    """report_failure takes addresses only: a path or a name is a ValueError."""
    import pytest

    for bad in ("../etc/passwd", "host.example", ""):
        with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
            report_failure(tmp_path, bad)


def test_a_report_taken_but_not_read_is_counted_at_the_next_tick(tmp_path: Path) -> None:
    """A tick that took a report (renamed it) but could not read it (no descriptor free)
    leaves it taken; the next tick counts it, once."""
    folder = tmp_path / REPORT_DIR
    folder.mkdir()
    (folder / ".taken-203.0.113.8-999").write_bytes(b"wrong\nwrong\n")
    bans = BanList(SftpBansConfig(threshold=2), tmp_path)
    assert bans.absorb_reports() == 2
    assert [b["ip"] for b in read_bans(tmp_path)] == ["203.0.113.8"]
    assert list(folder.iterdir()) == []
