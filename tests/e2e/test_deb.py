"""The Debian package: built, installed with dpkg, used end to end, removed and purged.

Needs root and dpkg; it changes the machine (/opt/ingestd, /etc/ingestd, the ingestd user)
and puts it back as it was (tests/fixtures/deb.py). It refuses to run where ingestd is
already installed.
"""

from __future__ import annotations

import hashlib
import pwd
import signal
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ingestd.config.dropin_files import slug
from ingestd.db.database import Database
from ingestd.passwords import hash_password
from tests.conftest import read_events, wait_until, write_config
from tests.fixtures.deb import (
    CLEAN_ENV,
    ETC,
    PREFIX,
    REPO,
    SPOOL,
    STATE,
    dpkg,
    free_port,
    installed,
    run,
)
from tests.fixtures.files import pdf_bytes
from tests.fixtures.sftp import sftp_upload

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("dpkg")]


def _documents(db_url: str) -> list[dict[str, Any]]:
    with Database(db_url) as db, db.transaction() as tx:
        return list(tx.raw("SELECT processing_status, sha256 FROM documents ORDER BY id"))


def test_deb_installs_ingests_and_removes_without_touching_data(
    built_deb: Path, machine: None, tmp_path: Path, db_url: str
) -> None:
    """The .deb installs with dpkg, its ingestd takes an SFTP scan to a done document, and
    dpkg -r / -P remove the program but keep the archive and /var/lib/ingestd."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    install = dpkg("--install", str(built_deb))
    if install.returncode != 0:
        pytest.fail(
            f"dpkg -i failed (missing Depends? `make deps` installs them):\n"
            f"{install.stdout}{install.stderr}"
        )
    assert "nothing has been started or enabled" in install.stdout

    # The relocated venv runs from its final path, also through /usr/bin.
    assert run(PREFIX / "bin" / "ingestd", "--version").stdout.strip() == f"ingestd {version}"
    assert Path("/usr/bin/ingestd").resolve() == PREFIX / "bin" / "ingestd"
    assert "ingestd-deb." not in (PREFIX / "pyvenv.cfg").read_text()
    check = run("ingestd", "check-config")  # the packaged /etc/ingestd/ingestd.toml
    assert check.returncode == 0 and "/etc/ingestd/ingestd.toml: OK" in check.stdout, check
    config = ETC / "ingestd.toml"
    assert (config.stat().st_mode & 0o777, config.stat().st_gid) == (
        0o640,
        pwd.getpwnam("ingestd").pw_gid,
    )
    for state in (STATE, SPOOL):
        assert (state.stat().st_mode & 0o777, state.stat().st_uid) == (
            0o750,
            pwd.getpwnam("ingestd").pw_uid,
        )

    # The installed program against the test database, as the test's user.
    port = free_port()
    cfg = tmp_path / "ingestd.toml"
    archive = tmp_path / "archive"
    write_config(
        cfg,
        {
            "database": {"url": db_url},
            "paths": {
                "state_dir": str(tmp_path / "state"),
                "spool": str(tmp_path / "spool"),
                "archive": str(archive),
                "derived": str(tmp_path / "derived"),
            },
            "log": {"format": "json"},
            "metrics": {"enabled": False},
            "sftp": {"listen": f"127.0.0.1:{port}", "retry_max_delay": 1},
            "sftp.accounts": [
                {
                    "username": "scan1",
                    "tenant": "acme",
                    "password_hash": hash_password("pw-deb-1", rounds=4),
                }
            ],
        },
    )

    def ingestd(command: str, *args: str, timeout: float = 120) -> None:
        result = run(PREFIX / "bin" / "ingestd", command, "--config", cfg, *args, timeout=timeout)
        assert result.returncode == 0, result.stdout + result.stderr

    ingestd("tenant", "create", "acme")
    ingestd("worker", "--drain")  # provision-tenant: creating -> active
    log_path = tmp_path / "serve.log"
    with open(log_path, "ab") as log:
        serve = subprocess.Popen(
            [str(PREFIX / "bin" / "ingestd"), "serve", "--config", str(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=CLEAN_ENV,
            stdin=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: read_events(log_path, "daemon.ready"), timeout=60)
            scan = pdf_bytes("Rechnung deb", pad_to=30_000, seed=4711)
            sftp_upload(port, "scan1", "pw-deb-1", "Rechnung_2026.pdf", scan)
            wait_until(lambda: len(_documents(db_url)) == 1, timeout=60, interval=0.2)
        finally:
            if serve.poll() is None:
                serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=60) == 0
    ingestd("worker", "--drain", timeout=300)  # analyze-document: OCR, title, date
    docs = _documents(db_url)
    assert [d["processing_status"] for d in docs] == ["done"]
    archived = [p for p in archive.rglob("*.pdf") if p.is_file()]
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in archived] == [docs[0]["sha256"]]

    # dpkg -r: the program goes; the archive, state, spool and config stay.
    removed = dpkg("--remove", "ingestd")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert not PREFIX.exists() and not Path("/usr/bin/ingestd").is_symlink()
    assert STATE.is_dir() and SPOOL.is_dir() and config.is_file()
    assert hashlib.sha256(archived[0].read_bytes()).hexdigest() == docs[0]["sha256"]
    # dpkg -P: the config goes too; /var/lib/ingestd never.
    purged = dpkg("--purge", "ingestd")
    assert purged.returncode == 0, purged.stdout + purged.stderr
    assert not ETC.exists() and STATE.is_dir() and not installed()


def _etc_snapshot() -> dict[str, tuple[bytes, int, int, int]]:
    """Every file and directory under /etc/ingestd: content, mode, owner, group."""
    snap: dict[str, tuple[bytes, int, int, int]] = {}
    for path in sorted([ETC, *ETC.rglob("*")]):
        st = path.lstat()
        data = path.read_bytes() if path.is_file() else b""
        snap[str(path)] = (data, st.st_mode, st.st_uid, st.st_gid)
    return snap


# Two package builds (the session's and the next release's) before the test itself.
@pytest.mark.timeout(1800)
def test_upgrade_of_a_configured_system_asks_nothing(
    built_deb: Path, next_deb: Path, machine: None, tmp_path: Path
) -> None:
    """The package ships a minimal ingestd.toml, an empty conf.d/ and the full example under
    /usr/share/doc; accounts and a hot folder added with `ingestd account add` / `watch add`
    are drop-ins, and `dpkg -i` of the next release (stdin closed, noninteractive, no
    --force-conf*) asks nothing and leaves /etc/ingestd byte for byte as it was."""
    install = dpkg("--install", str(built_deb))
    assert install.returncode == 0, install.stdout + install.stderr
    config = ETC / "ingestd.toml"
    shipped = [line for line in config.read_text().splitlines() if not line.startswith("#")]
    assert [line for line in shipped if line.strip()] == [
        "[database]",
        'url = "postgresql:///ingestd"',
    ]
    conf_d = ETC / "conf.d"
    assert conf_d.is_dir() and not any(conf_d.iterdir())
    assert (conf_d.stat().st_mode & 0o777, conf_d.stat().st_gid) == (
        0o750,
        pwd.getpwnam("ingestd").pw_gid,
    )
    example = Path("/usr/share/doc/ingestd/examples/ingestd.toml")
    assert "[[sftp.accounts]]" in example.read_text()

    # The administrator's day: two scanners, a hot folder (each checked, not running).
    hot = tmp_path / "hot" / "einkauf"
    hot.mkdir(parents=True)
    key = tmp_path / "scanner2.pub"
    key.write_text(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq3Mo4Z0bC1W3xOa1E0mJc5Qm3FQmC9ycFqJ1rQd2Zr s2\n"
    )
    for argv, stdin in (
        (("account", "add", "scanner1", "--tenant", "acme", "--password-stdin"), "pw-deb-up-1\n"),
        (("account", "add", "scanner2", "--tenant", "acme", "--key", str(key)), None),
        (("watch", "add", str(hot), "--tenant", "acme", "--tag", "Einkauf"), None),
    ):
        added = run("ingestd", *argv, stdin=stdin)
        assert added.returncode == 0, added.stdout + added.stderr
        assert "not running; the change takes effect at its start" in added.stdout
    assert sorted(p.name for p in conf_d.iterdir()) == [
        "account-scanner1.toml",
        "account-scanner2.toml",
        f"watch-{slug(hot)}.toml",
    ]
    before = _etc_snapshot()

    upgrade = dpkg("--install", str(next_deb), env={"DEBIAN_FRONTEND": "noninteractive"})
    output = upgrade.stdout + upgrade.stderr
    assert upgrade.returncode == 0, output
    assert "Configuration file" not in output and "conffile" not in output.lower(), output
    version = run("dpkg-query", "-W", "-f=${Version}", "ingestd").stdout
    assert version.endswith(".post1"), version
    assert example.read_text().startswith("# (changed in the next release")
    assert _etc_snapshot() == before
    assert not [p for p in ETC.rglob("*") if ".dpkg-" in p.name]
    check = run("ingestd", "check-config")
    assert check.returncode == 0, check.stdout + check.stderr
    listed = run("ingestd", "check-config", "--json")
    assert '"ok": true' in listed.stdout
