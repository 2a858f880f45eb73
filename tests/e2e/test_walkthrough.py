"""The README's "Getting started", run as a new sysadmin would run it.

Every ``sh`` block between ``<!-- walkthrough:begin -->`` and ``<!-- walkthrough:end -->``
runs, in order and as written, in one root shell on a pseudo-terminal, on this machine:
the package built from this checkout, the machine's own PostgreSQL cluster (started
for the test if it is down), the real OpenSSH, lftp and curl clients. What the test
changes, and nothing else:

- the ports: 2222 in the blocks becomes a free loopback port, and ``sftp.listen``/
  ``metrics`` (defaults the packaged config leaves alone) are set to free loopback ports
  in a drop-in of the test's own, ``conf.d/00-test-ports.toml`` (the README's scanner
  listens on every address);
- the password prompts (``ingestd account add``, ssh, lftp, curl) are answered
  on the terminal, as the reader types them;
- ``systemctl`` and ``journalctl`` are tests/fixtures/standin_systemd.py where no systemd
  runs: it starts the installed units' ``ExecStart`` as their ``User=``;
- ``<!-- test: ... -->`` comments wait where a reader waits (for OCR to finish, for the
  daemon to see a suspended tenant), through ``walkthrough-wait`` on PATH;
- the working directory is a throwaway one; root's ``~/.ssh`` (OpenSSH reads the home
  directory from the password database, not from $HOME) is put back as it was.

Afterwards everything is put back: services stopped, the package purged (tests/fixtures/
deb.py), the database and role dropped, /srv/hot and the group removed.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pty
import pwd
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.deb import REPO, free_port, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200), pytest.mark.xdist_group("dpkg")]

README = REPO / "README.md"
STANDIN = REPO / "tests" / "fixtures" / "standin_systemd.py"
PASSWORD = "walkthrough-scanner-pw-1"
HOT = Path("/srv/hot")
GROUP = "scans-acme"
SCRIPT_TIMEOUT = 900.0
# A prompt for a password: ingestd's "Password: "/"Again: ", OpenSSH's "user@host's
# password: ", lftp's "Password: ", curl's "Enter host password for user 'scanner1':".
PROMPT = re.compile(rb"(?i)(password[^\n]*|again):\s*$")
# An unknown host key: answered "no" (the walkthrough's known_hosts step failed), so the
# command fails at once instead of waiting for a reader.
HOST_KEY_PROMPT = re.compile(rb"\(yes/no(/\[fingerprint\])?\)\?\s*$")
HOOK = re.compile(r"<!--\s*test:\s*(.+?)\s*-->")


@dataclass
class Step:
    """One command block of the walkthrough, and the waits written before it."""

    line: int
    hooks: list[list[str]]
    text: str


def walkthrough_steps(readme: str) -> list[Step]:
    """The ``sh`` blocks of the walkthrough section, with their line numbers."""
    lines = readme.splitlines()
    begin = lines.index("<!-- walkthrough:begin -->")
    end = lines.index("<!-- walkthrough:end -->")
    steps: list[Step] = []
    hooks: list[list[str]] = []
    i = begin
    while i < end:
        line = lines[i]
        if m := HOOK.fullmatch(line.strip()):
            hooks.append(m.group(1).split())
        if line.startswith("```"):
            lang = line[3:].strip()
            j = lines.index("```", i + 1)
            if lang == "sh":
                steps.append(Step(i + 1, hooks, "\n".join(lines[i + 1 : j])))
                hooks = []
            i = j
        i += 1
    return steps


def test_walkthrough_blocks_are_found() -> None:
    """The walkthrough section has its markers and every step the issue asks for."""
    steps = walkthrough_steps(README.read_text())
    text = "\n".join(s.text for s in steps)
    assert len(steps) >= 10
    for needed in (
        "apt-get install -y ./dist/ingestd_",  # where `make deb` writes it (issue #30)
        "createuser ingestd",
        "systemctl enable --now",
        "tenant create acme",
        "ingestd account add scanner1 --tenant acme",  # a drop-in account (issue #30)
        "ingestd account add scanner2 --tenant acme --key",
        "ingestd watch add /srv/hot/acme",
        "sftp -P 2222 scanner1@127.0.0.1",
        "lftp -u scanner1",
        "curl -sS -u scanner1",
        "sftp -b - -i scanner2_key",
        "/srv/hot/acme",
        "documents list",
        "search",
        "journalctl",
        "tenant suspend",
        "ingestd documents find",  # the helpdesk's commands (issue #30)
        "ingestd trace",
        "ingestd documents get",
    ):
        assert needed in text, f"the walkthrough lost its {needed!r} step"
    assert "sudo" not in text  # a minimal Debian has none


# -- the machine's PostgreSQL ---------------------------------------------------------------
def _psql(sql: str) -> str:
    result = run("runuser", "-u", "postgres", "--", "psql", "-AtXc", sql)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture
def system_postgres() -> Iterator[None]:
    """Debian's own cluster running (as after `apt-get install postgresql`), without an
    ingestd role or database; afterwards both dropped and the cluster as it was."""
    if not shutil.which("pg_lsclusters"):
        pytest.skip("no postgresql-common (pg_lsclusters)")
    clusters = run("pg_lsclusters", "--no-header").stdout.split("\n")
    mine = [c.split() for c in clusters if c.strip()]
    created = started = False
    if not mine:
        made = run("pg_createcluster", "15", "main", timeout=300)
        assert made.returncode == 0, made.stderr
        created = True
        mine = [c.split() for c in run("pg_lsclusters", "--no-header").stdout.split("\n") if c]
    version, name, status = mine[0][0], mine[0][1], mine[0][3]
    if status != "online":
        up = run("pg_ctlcluster", version, name, "start", timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        started = True
    if _psql("SELECT count(*) FROM pg_roles WHERE rolname = 'ingestd'") != "0":
        pytest.skip("the machine's PostgreSQL has an ingestd role; the test does not replace it")
    try:
        yield
    finally:
        _psql("DROP DATABASE IF EXISTS ingestd WITH (FORCE)")
        _psql("DROP ROLE IF EXISTS ingestd")
        if created:
            run("pg_dropcluster", version, name, "--stop", timeout=120)
        elif started:
            run("pg_ctlcluster", version, name, "stop", timeout=120)


# -- the shell on a terminal ----------------------------------------------------------------
def _hook_script(bin_dir: Path, state: Path) -> None:
    """``walkthrough-wait``: the waits a reader does by looking (see the module docstring).

    ``mark`` (run before every block) notes how long each unit's log is; ``log UNIT EVENT
    [key=value ...]`` waits for a matching line written since the previous block began,
    so a line from before (an earlier status change) does not count."""
    (bin_dir / "walkthrough-wait").write_text(
        f"""#!{sys.executable}
import json, pathlib, subprocess, sys, time
STATE = pathlib.Path({str(state)!r})
kind, args = sys.argv[1], sys.argv[2:]
marks = STATE / "walkthrough-marks.json"
if kind == "mark":
    old = json.loads(marks.read_text()) if marks.exists() else {{"current": {{}}}}
    now = {{p.name: p.stat().st_size for p in STATE.glob("*.log")}}
    marks.write_text(json.dumps({{"previous": old["current"], "current": now}}))
    sys.exit(0)
deadline = time.monotonic() + 600
while time.monotonic() < deadline:
    if kind == "documents_done":
        tenant, count = args[0], int(args[1])
        out = subprocess.run(
            ["runuser", "-u", "ingestd", "--", "ingestd", "documents", "list",
             "--tenant", tenant, "--json"], capture_output=True, text=True).stdout
        try:
            docs = json.loads(out or "[]")
        except ValueError:
            docs = []
        states = [d.get("processing_status") for d in docs]
        if states.count("done") >= count:
            sys.exit(0)
        if "failed" in states:
            sys.exit(f"walkthrough-wait: a document failed: {{out}}")
    elif kind == "log":
        unit, event, fields = args[0], args[1], dict(a.split("=", 1) for a in args[2:])
        since = json.loads(marks.read_text())["previous"].get(unit + ".log", 0)
        path = STATE / (unit + ".log")
        with open(path, "rb") as f:
            f.seek(since)
            lines = f.read().decode(errors="replace").splitlines()
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == event and all(
                str(record.get(k)) == v for k, v in fields.items()
            ):
                sys.exit(0)
    else:
        sys.exit(f"walkthrough-wait: unknown wait {{kind}}")
    time.sleep(0.5)
sys.exit(f"walkthrough-wait: {{kind}} {{args}} not reached within 600 s")
"""
    )
    (bin_dir / "walkthrough-wait").chmod(0o755)


def _standins(bin_dir: Path) -> None:
    for name in ("systemctl", "journalctl"):
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN} {name} "$@"\n')
        path.chmod(0o755)


def build_script(steps: list[Step], port: int, web_port: int = 8088) -> str:
    """One bash script: each block as written (the ports moved), its waits before it."""
    parts = ["set -euo pipefail"]
    for n, step in enumerate(steps, 1):
        parts.append("set +x")
        parts.append(f"printf '\\n### walkthrough block {n} (README.md line {step.line})\\n'")
        parts.append("walkthrough-wait mark")
        parts += ["walkthrough-wait " + " ".join(h) for h in step.hooks]
        parts.append("set -x")  # the transcript shows each command before its output
        parts.append(step.text.replace("2222", str(port)).replace("8088", str(web_port)))
    parts.append("set +x")
    parts.append("printf '\\n### walkthrough finished\\n'")
    return "\n".join(parts) + "\n"


def run_on_terminal(script: Path, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """``bash script`` on a pseudo-terminal; every password prompt is answered."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a login-like root shell on the terminal
        os.chdir(cwd)
        os.execve("/bin/bash", ["bash", str(script)], env)  # noqa: S606 - the script is the test
    out = bytearray()
    answered = 0  # out[answered:] is what came since the last answer
    deadline = time.monotonic() + SCRIPT_TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the shell exited and the terminal closed
                break
            if not chunk:
                break
            out += chunk
            since = bytes(out[answered:])[-200:]
            if PROMPT.search(since):
                os.write(fd, PASSWORD.encode() + b"\n")
                answered = len(out)
            elif HOST_KEY_PROMPT.search(since):
                os.write(fd, b"no\n")
                answered = len(out)
        else:
            os.kill(pid, signal.SIGKILL)
            out += f"\n### killed: the walkthrough ran longer than {SCRIPT_TIMEOUT:g} s".encode()
    finally:
        _, wait_status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(wait_status), out.decode(errors="replace")


@pytest.fixture
def walkthrough_machine(machine: None, system_postgres: None) -> Iterator[Path]:
    """No /srv/hot and no scans-acme group before; both removed again afterwards, and
    every unit the walkthrough started stopped before the package is purged."""
    if HOT.exists():
        pytest.skip(f"{HOT} exists on this machine; the walkthrough would write into it")
    with contextlib.suppress(KeyError):
        grp.getgrnam(GROUP)
        pytest.skip(f"the group {GROUP} exists on this machine")
    ssh_dir = Path(pwd.getpwuid(0).pw_dir) / ".ssh"
    saved = None
    if ssh_dir.exists():
        saved = Path(tempfile.mkdtemp(prefix="walkthrough-ssh-")) / "ssh"
        shutil.copytree(ssh_dir, saved, symlinks=True)
    # Reachable by the service user: the notify sockets are in it.
    state = Path(tempfile.mkdtemp(prefix="walkthrough-systemd-"))
    state.chmod(0o711)
    try:
        yield state
    finally:
        env = {"STANDIN_SYSTEMD_STATE": str(state), "PATH": os.environ["PATH"]}
        for unit in state.glob("*.json"):
            subprocess.run(
                [sys.executable, STANDIN, "systemctl", "stop", unit.name[: -len(".json")]],
                env=env,
                timeout=120,
                check=False,
            )
        shutil.rmtree(HOT, ignore_errors=True)  # /srv itself is Debian's: kept
        run("gpasswd", "-d", "ingestd", GROUP)
        run("groupdel", GROUP)
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(ssh_dir, ignore_errors=True)
        if saved is not None:
            shutil.copytree(saved, ssh_dir, symlinks=True)
            shutil.rmtree(saved.parent, ignore_errors=True)


def journal(state: Path) -> str:
    """The last lines each started unit wrote, for a failure's report."""
    out = []
    for log in sorted(state.glob("*.log")):
        out.append(f"\n### {log.name} (last 40 lines)")
        out += log.read_text(errors="replace").splitlines()[-40:]
    return "\n".join(out)


def _move_ports(config: Path, port: int, web_port: int) -> None:
    """The listeners onto free loopback ports, in a drop-in beside the installed config
    (see the docstring): the packaged ingestd.toml leaves them at their defaults."""
    assert "listen" not in config.read_text(), "the packaged config sets a listener now"
    dropin = config.parent / "conf.d" / "00-test-ports.toml"
    dropin.write_text(
        f'[sftp]\nlisten = "127.0.0.1:{port}"\n\n[web]\nlisten = "127.0.0.1:{web_port}"\n\n'
        f'[metrics]\nlisten = "127.0.0.1:{free_port()}"\n'
        f'worker_listen = "127.0.0.1:{free_port()}"\nweb_listen = "127.0.0.1:{free_port()}"\n'
    )
    os.chown(dropin, 0, grp.getgrnam("ingestd").gr_gid)
    dropin.chmod(0o640)


def test_getting_started_runs_as_written(
    built_deb: Path, walkthrough_machine: Path, tmp_path: Path
) -> None:
    """Every command of the README's walkthrough works: the package installs, scans sent
    by OpenSSH (password and key), lftp, curl and a hot folder are ingested and found,
    and a suspended tenant's scanner reads why it is refused."""
    steps = walkthrough_steps(README.read_text())
    # The reader's working directory: other users (postgres, ingestd) may enter it, as
    # they may enter root's usual one.
    work = Path(tempfile.mkdtemp(prefix="walkthrough-work-"))
    work.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Where `make deb` leaves it, relative to the checkout the reader stands in.
    (work / "dist").mkdir()
    shutil.copy(built_deb, work / "dist")
    _standins(bin_dir)
    _hook_script(bin_dir, walkthrough_machine)
    port, web_port = free_port(), free_port()

    # The install block first, alone: the ports move in the config it installs.
    install, rest = steps[0], steps[1:]
    assert "apt-get install" in install.text
    env = {
        "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": pwd.getpwuid(0).pw_dir,
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "DEBIAN_FRONTEND": "noninteractive",
        "STANDIN_SYSTEMD_STATE": str(walkthrough_machine),
    }
    started = time.monotonic()
    script = tmp_path / "install.sh"
    script.write_text(build_script([install], port))
    code, transcript = run_on_terminal(script, work, env)
    assert code == 0, transcript + journal(walkthrough_machine)
    _move_ports(Path("/etc/ingestd/ingestd.toml"), port, web_port)

    script = tmp_path / "walkthrough.sh"
    script.write_text(build_script(rest, port, web_port))
    code, out = run_on_terminal(script, work, env)
    transcript += out
    print(transcript)  # shown with -s, and kept in the report of a failure
    print(f"walkthrough: {time.monotonic() - started:.0f} s of machine time")
    shutil.rmtree(work, ignore_errors=True)
    assert code == 0 and "### walkthrough finished" in transcript, transcript + journal(
        walkthrough_machine
    )

    # What the reader was promised.
    docs = json.loads(
        run(
            "runuser",
            "-u",
            "ingestd",
            "--",
            "ingestd",
            "documents",
            "list",
            "--tenant",
            "acme",
            "--json",
        ).stdout
    )
    names = sorted(d["original_filename"] for d in docs)
    scans = [f"invoice-{n}.pdf" for n in range(1, 6)]
    assert names == sorted([*scans, "xrechnung-4711.xml", "zugferd-4712.pdf"]), transcript
    assert {d["processing_status"] for d in docs} == {"done"}
    # The two e-invoices were read from their XML (the Factur-X PDF's embedded one).
    listed = transcript.split("invoices list --tenant acme", 1)[1]
    assert "RE-2026-4711" in listed and "RE-2026-4712" in listed
    assert "ingestd: tenant acme is suspended; uploads are refused" in transcript
    assert '"sftp.refused"' in transcript and "notes.txt" in transcript
    assert '"intake.ingested"' in transcript
    assert "Rechnung" in transcript.split("search --tenant acme Rechnung", 1)[1]
    assert not list(Path("/srv/hot/acme").iterdir())  # the hot folder's file was taken
    # The console answered and the mapped drive listed the archive by year.
    assert "\n200\n" in transcript.replace("\r\n", "\n")
    assert re.search(r"<D:href>/dav/acme/\d{4}/</D:href>", transcript), transcript
