"""`make demo` is one of the README's two commands: its script runs to the end on this
machine (embedded PostgreSQL, SFTP, hot folders, workers, search) and ends by showing the
web console's address and a login that works. It had broken unnoticed once (a sample
password under the 8-character rule); now the suite runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_demo_runs_to_the_end_and_shows_the_console() -> None:
    """scripts/demo.py (not on a terminal: it stops the console after showing it) exits
    0, prints the console's address with the demo login, and the mapped drive's."""
    try:
        done = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "demo.py")],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=1100,
            cwd=REPO,
            check=False,
        )
    finally:
        _stop_the_demo_cluster()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"the web console:  http://127\.0\.0\.1:\d+/   log in as demo / ", done.stdout)
    assert "the mapped drive: http://127.0.0.1:" in done.stdout
    assert "$ ingestd search --tenant acme" in done.stdout
    # The XRechnung and the ZUGFeRD PDF dropped for accounting, read from their XML.
    assert "$ ingestd invoices list --tenant acme" in done.stdout
    assert "RE-2026-0815" in done.stdout and "RE-2026-0816" in done.stdout


def _stop_the_demo_cluster() -> None:
    """The demo leaves its embedded PostgreSQL running for the reader to explore with the
    CLI; a test must not leave a server behind: stopped as its owner."""
    import pwd

    from ingestd.db.pgcluster import find_bindir

    pgdata = REPO / ".demo" / "state" / "pgdata"
    if not (pgdata / "postmaster.pid").exists():
        return
    owner = pwd.getpwuid(pgdata.stat().st_uid).pw_name
    pg_ctl = str(find_bindir() / "pg_ctl")
    subprocess.run(
        ["runuser", "-u", owner, "--", pg_ctl, "-D", str(pgdata), "stop", "-m", "fast"],
        capture_output=True,
        timeout=120,
        check=False,
    )
