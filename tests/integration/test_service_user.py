"""``ingestd`` run as root becomes the service user (the state directory's owner, or
INGESTD_USER) before it touches anything, says so once, and works for every command,
`status` during an outage included; a user that does not exist is a clear error."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fixtures.service_user import ServiceInstall, as_root_prefix


def _cli(inst: ServiceInstall, *args: str, env: dict[str, str] | None = None) -> Any:
    """``ingestd ARGS`` as root (INGESTD_USER only when ``env`` sets it), from a working
    directory the service user cannot enter."""
    closed = inst.root / "root-only"
    closed.mkdir(mode=0o700, exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if k != "INGESTD_USER"} | (env or {})
    cli = [sys.executable, "-m", "ingestd.cli", "--config", str(inst.config_path)]
    return subprocess.run(
        [*as_root_prefix(inst.root), *cli, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=closed,
        env=environ,
        check=False,
    )


def _switch_lines(stderr: str) -> list[str]:
    found = []
    for line in stderr.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            if "running as" in line:
                found.append(line)
            continue
        if event.get("event") == "cli.service_user":
            found.append(str(event["message"]))
    return found


def _owners(root: Path) -> set[str]:
    names = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            st = os.lstat(os.path.join(dirpath, name))
            names.add(pwd.getpwuid(st.st_uid).pw_name)
    return names


def test_root_runs_migrate_as_the_owner_of_the_state_directory(
    service_install: ServiceInstall,
) -> None:
    """`ingestd migrate` as root on an embedded database: one line says whom it runs as,
    and everything it made (the cluster, the sealing key) belongs to the service user."""
    inst = service_install
    inst.write({})
    done = _cli(inst, "migrate")
    assert done.returncode == 0, done.stdout + done.stderr
    name = inst.user.pw_name
    assert _switch_lines(done.stderr) == [f"running as {name} (owner of {inst.state_dir})"]
    assert (inst.state_dir / "pgdata" / "PG_VERSION").exists()
    assert (inst.state_dir / "audit" / "seal-ed25519.key").exists()
    assert _owners(inst.state_dir) == {name}


def test_status_as_root_during_an_outage_runs_as_the_service_user(
    service_install: ServiceInstall,
) -> None:
    """With the database down, `ingestd status` as root still reports what is on disk and
    exits 9 (degraded), as the service user, saying so once."""
    inst = service_install
    inst.owned(inst.root / "nopg")
    inst.write(
        {"database": {"url": f"host={inst.root / 'nopg'} port=5999 dbname=x connect_timeout=2"}}
    )
    done = _cli(inst, "status", "--json")
    assert done.returncode == 9, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["database"]["up"] is False
    assert _switch_lines(done.stderr) == [
        f"running as {inst.user.pw_name} (owner of {inst.state_dir})"
    ]


def test_ingestd_user_names_the_user_and_an_unknown_one_is_refused(
    service_install: ServiceInstall,
) -> None:
    """INGESTD_USER wins over a root-owned state directory; a user that does not exist
    ends the command with exit 3 and a message naming it, before anything is made."""
    inst = service_install
    os.chown(inst.state_dir, 0, 0)
    inst.owned(inst.root / "nopg")
    inst.write({"database": {"url": f"host={inst.root / 'nopg'} port=5999 dbname=x"}})
    quiet = _cli(inst, "status", "--json")
    assert _switch_lines(quiet.stderr) == []  # root's state directory: root stays root
    named = _cli(inst, "status", "--json", env={"INGESTD_USER": inst.user.pw_name})
    assert named.returncode == 9, named.stderr
    assert _switch_lines(named.stderr) == [
        f"running as {inst.user.pw_name} (INGESTD_USER={inst.user.pw_name})"
    ]
    before = sorted(os.listdir(inst.state_dir))
    missing = _cli(inst, "migrate", env={"INGESTD_USER": "no-such-user-30"})
    assert missing.returncode == 3, missing.stderr
    assert "INGESTD_USER=no-such-user-30: no such user" in missing.stderr
    assert sorted(os.listdir(inst.state_dir)) == before


def test_check_config_as_root_names_a_hot_folder_the_service_user_cannot_reach(
    service_install: ServiceInstall,
) -> None:
    """check-config as root runs as the service user: a hot folder below a directory
    closed to that user is a warning naming the user and the reason (exit 0), never an
    internal error (exit 15)."""
    inst = service_install
    locked = inst.root / "root-only-hot"
    (locked / "einkauf").mkdir(parents=True)
    locked.chmod(0o700)
    inst.write({})
    text = inst.config_path.read_text()
    inst.config_path.write_text(
        text + f'\n[[watch]]\npath = "{locked / "einkauf"}"\ntenant = "acme"\n'
    )
    done = _cli(inst, "check-config")
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert f"cannot be reached by {inst.user.pw_name}: Permission denied" in said


def test_documents_get_as_root_into_a_directory_the_service_user_cannot_write_says_whom(
    service_install: ServiceInstall,
) -> None:
    """`documents get -o DIR` as root runs as the service user: a directory closed to that
    user (root's own, or below one) is refused at once naming the user and the way out
    (-o -), never "no such directory" and never an internal error; nothing is asked of
    the database and nothing is written."""
    inst = service_install
    inst.write({})
    closed = inst.root / "root-only"  # the 0700 working directory _cli runs in
    name = inst.user.pw_name
    for target in (str(closed), f"{closed}/sub/", f"{closed}/letter.pdf", None):
        args = ["documents", "get", "1"] + (["-o", target] if target else [])
        done = _cli(inst, *args)
        assert done.returncode == 1, (target, done.stdout + done.stderr)
        assert f"this command runs as the user {name}" in done.stderr, done.stderr
        assert "no such directory" not in done.stderr
        assert "-o -" in done.stderr
    assert sorted(os.listdir(closed)) == []
    assert not (inst.state_dir / "pgdata").exists()
