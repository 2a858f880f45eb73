"""The systemd units in systemd/ and `ingestd serve` under a real sd_notify socket.

``systemd-analyze verify`` and ``security --offline=true`` run against a throwaway file
system root (``--root``): our units in etc/systemd/system, this host's own units
(sysinit.target, postgresql.service, ...) in usr/lib/systemd/system, and the programs the
units start, as the real files (hard links, or copies where linking is not allowed):
/opt/ingestd/bin/ingestd is this checkout's `ingestd` console script, /bin/kill the
host's. No running systemd is needed. Without systemd-analyze these tests fail: install
the Debian package `systemd`.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestd.config.settings import WorkerConfig
from ingestd.passwords import hash_password

UNIT_DIR = Path(__file__).resolve().parents[2] / "systemd"
EXPECTED_UNITS = {
    "ingestd.target",
    "ingestd.service",
    "ingestd-worker@.service",
    "ingestd-migrate.service",
    "ingestd-verify.service",
    "ingestd-verify.timer",
    "ingestd-audit-seal.service",
    "ingestd-audit-seal.timer",
    "ingestd-web.service",  # issue 31: the web console
}
MAX_EXPOSURE = 2.5
HOST_UNIT_DIRS = (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))


def unit_files() -> list[Path]:
    return sorted(p for p in UNIT_DIR.iterdir() if p.suffix in (".service", ".timer", ".target"))


def instance(name: str) -> str:
    """What to load for a unit file: a template as its instance 1."""
    return name.replace("@.", "@1.")


SERVICES = [instance(p.name) for p in unit_files() if p.suffix == ".service"]


def systemd_analyze(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("systemd-analyze") or shutil.which("systemd-analyze", path="/usr/bin")
    if exe is None:
        pytest.fail(
            "systemd-analyze is not installed; the unit tests need it (no running systemd): "
            "apt-get install systemd (it belongs in the Makefile's APT_PACKAGES)",
            pytrace=False,
        )
    return subprocess.run(
        [exe, "--no-pager", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _place(real: Path, target: Path) -> None:
    """The real file at ``target``: a hard link, or a copy (mode kept) across file systems
    or where protected_hardlinks forbids linking another user's file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(real, target)
    except OSError:
        shutil.copy2(real, target)


@pytest.fixture(scope="module")
def unit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("root")
    etc = root / "etc" / "systemd" / "system"
    etc.mkdir(parents=True)
    for unit in unit_files():
        shutil.copy2(unit, etc / unit.name)
    host_units = next((d for d in HOST_UNIT_DIRS if (d / "sysinit.target").exists()), None)
    if host_units is None:
        pytest.fail(
            "no systemd unit directory with sysinit.target on this host (install "
            "the Debian package `systemd`)",
            pytrace=False,
        )
    shutil.copytree(host_units, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    (root / "bin").symlink_to("usr/bin")  # merged /usr, as on Debian 12
    kill = Path("/bin/kill").resolve()
    script = Path(sys.executable).parent / "ingestd"
    for real, hint in ((kill, "apt-get install procps"), (script, "pip install -e .")):
        if not os.access(real, os.X_OK):
            pytest.fail(f"{real} is missing ({hint})", pytrace=False)
    _place(kill, root / "usr" / "bin" / "kill")
    _place(script, root / "opt" / "ingestd" / "bin" / "ingestd")
    return root


# -- the unit files ------------------------------------------------------------------------
def test_the_unit_files_are_all_there() -> None:
    """systemd/ holds exactly the target, daemon, worker template, migrate, verify + timer,
    audit seal + timer, web console."""
    assert {p.name for p in unit_files()} == EXPECTED_UNITS
    assert (UNIT_DIR / "sysusers.d" / "ingestd.conf").is_file()
    assert (UNIT_DIR / "tmpfiles.d" / "ingestd.conf").is_file()


@pytest.mark.parametrize("name", [instance(n) for n in sorted(EXPECTED_UNITS)])
def test_systemd_analyze_verify_passes(unit_root: Path, name: str) -> None:
    """`systemd-analyze verify` loads the unit (and what it pulls in) without a word."""
    result = systemd_analyze("verify", "--man=no", f"--root={unit_root}", name)
    # verify exits 0 on unknown keys and bad values (it only warns): silence is the pass.
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@pytest.mark.parametrize("name", ["ingestd-worker@acme.service", "ingestd-worker@acme-2.service"])
def test_a_pools_worker_instance_verifies(unit_root: Path, name: str) -> None:
    """A pool's worker is an instance of the same template: it verifies as cleanly."""
    result = systemd_analyze("verify", "--man=no", f"--root={unit_root}", name)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def _worker_exec_start(config: Path, instance: str) -> list[str]:
    """The worker unit's ExecStart for ``instance``, with this checkout's ingestd and
    ``config`` in place of the installed paths (systemd's %i and %H filled in)."""
    text = (UNIT_DIR / "ingestd-worker@.service").read_text()
    line = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    argv = line.removeprefix("ExecStart=").split()
    argv[0] = str(Path(sys.executable).with_name("ingestd"))
    argv = [str(config) if a == "/etc/ingestd/ingestd.toml" else a for a in argv]
    return [a.replace("%i", instance).replace("%H", socket.gethostname()) for a in argv]


def test_the_units_exec_start_serves_the_pool_its_instance_names(make_env: Any, db: Any) -> None:
    """ExecStart of ingestd-worker@acme runs pool acme's worker: it runs acme's jobs only,
    as <host>-acme; an instance naming no pool exits 3 and lists the pools."""
    from tests.fixtures.queue import count, make_jobs

    env = make_env(worker={"poll_interval": 0.2, "pools": [{"name": "acme", "tenants": ["acme"]}]})
    make_jobs(db, "acme", 3, kind="test-noop")
    make_jobs(db, "beta", 2, kind="test-noop")
    argv = _worker_exec_start(env.config_path, "acme")
    ran = subprocess.run(
        [*argv, "--drain", "--plugin", "tests.fixtures.jobs"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=UNIT_DIR.parent,
        env={**os.environ, "PYTHONPATH": str(UNIT_DIR.parent)},  # the test kinds' module
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    done = (
        "SELECT count(*) AS n FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id "
        "WHERE t.name = %(t)s AND j.status = 'done' AND j.pool = %(p)s AND j.worker_id = %(w)s"
    )
    host = socket.gethostname()
    assert count(db, done, {"t": "acme", "p": "acme", "w": f"{host}-acme"}) == 3
    assert count(db, "SELECT count(*) AS n FROM processing_jobs WHERE status = 'queued'") == 2
    wrong = subprocess.run(
        _worker_exec_start(env.config_path, "acne"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert wrong.returncode == 3
    assert "acne" in wrong.stderr and "acme, default" in wrong.stderr


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (("NoNewPrivileges=yes", "NoNewPrivilege=yes"), "Unknown key 'NoNewPrivilege'"),
        (
            ("/opt/ingestd/bin/ingestd --config", "/opt/ingestd/bin/ingestd-gone --config"),
            "is not executable",
        ),
    ],
    ids=["misspelled-key", "missing-program"],
)
def test_verify_would_catch_a_broken_unit(
    unit_root: Path, edit: tuple[str, str], complaint: str
) -> None:
    """The verify check is not vacuous: a misspelled key or a missing program is reported."""
    text = (UNIT_DIR / "ingestd.service").read_text()
    assert edit[0] in text
    broken = unit_root / "etc" / "systemd" / "system" / "ingestd-broken.service"
    broken.write_text(text.replace(edit[0], edit[1]))
    try:
        result = systemd_analyze("verify", "--man=no", f"--root={unit_root}", broken.name)
    finally:
        broken.unlink()
    assert complaint in result.stdout + result.stderr


def test_exposure_of_every_service_is_at_most_2_5(unit_root: Path) -> None:
    """`systemd-analyze security --offline=true` rates every service <= 2.5 (printed)."""
    scores: dict[str, float] = {}
    for name in SERVICES:
        result = systemd_analyze("security", "--offline=true", f"--root={unit_root}", name)
        found = re.search(
            rf"Overall exposure level for {re.escape(name)}: (\d+\.\d+)", result.stdout
        )
        assert found, f"{name}: no exposure level in\n{result.stdout}\n{result.stderr}"
        scores[name] = float(found.group(1))
    table = "\n".join(f"{name:<28} exposure {score:.1f}" for name, score in scores.items())
    print(f"\nsystemd-analyze security --offline=true (max {MAX_EXPOSURE}):\n{table}")
    assert set(scores) == {
        "ingestd.service",
        "ingestd-worker@1.service",
        "ingestd-migrate.service",
        "ingestd-verify.service",
        "ingestd-audit-seal.service",
        "ingestd-web.service",
    }
    assert all(score <= MAX_EXPOSURE for score in scores.values()), table


def test_worker_stop_timeout_exceeds_the_shutdown_grace() -> None:
    """The worker gets SIGKILL only after its shutdown grace (default 30 s) has run out."""
    text = (UNIT_DIR / "ingestd-worker@.service").read_text()
    assert re.search(r"^KillMode=mixed$", text, re.M)
    found = re.search(r"^TimeoutStopSec=(\d+)s$", text, re.M)
    assert found and int(found.group(1)) > WorkerConfig().shutdown_grace


def test_services_have_resource_limits() -> None:
    """Daemon and workers cap memory, tasks and descriptors; the daemon's descriptor
    limit covers every session holding its maximum of handles (invariant 10)."""
    from ingestd.config.settings import SftpConfig

    for name in ("ingestd.service", "ingestd-worker@.service"):
        text = (UNIT_DIR / name).read_text()
        for key in ("MemoryMax", "TasksMax", "LimitNOFILE"):
            assert re.search(rf"^{key}=\S+$", text, re.M), (name, key)
    daemon = (UNIT_DIR / "ingestd.service").read_text()
    found = re.search(r"^LimitNOFILE=(\d+)$", daemon, re.M)
    sftp = SftpConfig()
    handles = sftp.max_connections * sftp.max_handles_per_session
    assert found and int(found.group(1)) >= 2 * handles


def test_sysusers_and_tmpfiles_make_user_and_directories(tmp_path: Path) -> None:
    """sysusers.d makes the system user ingestd; tmpfiles.d its directories, modes, owners."""
    for kind in ("sysusers.d", "tmpfiles.d"):
        target = tmp_path / "usr" / "lib" / kind
        target.mkdir(parents=True)
        shutil.copy2(UNIT_DIR / kind / "ingestd.conf", target / "ingestd.conf")
    (tmp_path / "etc").mkdir()
    tools = {t: shutil.which(t) for t in ("systemd-sysusers", "systemd-tmpfiles")}
    if not all(tools.values()):
        pytest.fail(f"missing {tools} (apt-get install systemd)", pytrace=False)
    users = subprocess.run(
        [str(tools["systemd-sysusers"]), f"--root={tmp_path}", "ingestd.conf"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert users.returncode == 0, users.stderr
    passwd = (tmp_path / "etc" / "passwd").read_text().splitlines()
    entry = next(line.split(":") for line in passwd if line.startswith("ingestd:"))
    uid, gid, home, shell = int(entry[2]), int(entry[3]), entry[5], entry[6]
    assert uid < 1000 and (home, shell) == ("/var/lib/ingestd", "/usr/sbin/nologin")

    dirs = subprocess.run(
        [str(tools["systemd-tmpfiles"]), "--create", f"--root={tmp_path}", "ingestd.conf"],
        capture_output=True,
        text=True,
        check=False,
    )
    expected = {
        "var/lib/ingestd": (0o750, uid, gid),
        "var/lib/ingestd/archive": (0o750, uid, gid),
        "var/lib/ingestd/derived": (0o750, uid, gid),
        "var/spool/ingestd": (0o750, uid, gid),
        "etc/ingestd": (0o750, 0, gid),
        "etc/ingestd/conf.d": (0o750, 0, gid),  # drop-ins (docs/config-dropins.md)
    }
    seen = {}
    for rel in expected:
        st = (tmp_path / rel).stat()
        seen[rel] = (st.st_mode & 0o7777, st.st_uid, st.st_gid)
    if os.geteuid() == 0:
        assert dirs.returncode == 0, dirs.stderr
        assert seen == expected
    else:  # only root may give the directories away: the modes are checked, chown refused
        assert all(
            " failed: Operation not permitted" in line and "fchownat" in line
            for line in dirs.stderr.splitlines()
        ), dirs.stderr
        assert {k: v[0] for k, v in seen.items()} == {k: v[0] for k, v in expected.items()}


# -- `ingestd serve` and sd_notify -------------------------------------------------------------
@contextlib.contextmanager
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    """An AF_UNIX datagram socket like systemd's, at a short path (sun_path is 108 bytes)."""
    tmp = tempfile.mkdtemp(prefix="sdn-")
    path = os.path.join(tmp, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(path)
        yield sock, path
    finally:
        sock.close()
        shutil.rmtree(tmp, ignore_errors=True)


class Serve:
    """`ingestd serve` as a real process with $NOTIFY_SOCKET. Like systemd, a thread reads
    the socket all the time: a full datagram queue would block the daemon's sends."""

    def __init__(
        self, config: Path, sock: socket.socket, address: str, watchdog_usec: int | None
    ) -> None:
        self.log_path = config.parent / "serve.log"
        env = {k: v for k, v in os.environ.items() if k not in ("WATCHDOG_USEC", "WATCHDOG_PID")}
        env["NOTIFY_SOCKET"] = address
        if watchdog_usec is not None:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        self.seen: list[str] = []
        self._messages: queue.Queue[str] = queue.Queue()
        self._closed = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(sock,), daemon=True)
        self._reader.start()
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ingestd.cli", "serve", "--config", str(config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def _read(self, sock: socket.socket) -> None:
        sock.settimeout(0.1)
        while not self._closed.is_set():
            with contextlib.suppress(TimeoutError):
                self._messages.put(sock.recv(4096).decode())

    def receive(self, until: Callable[[list[str]], Any], timeout: float = 30.0) -> list[str]:
        """Messages from now on, until ``until(new)`` holds; fail after ``timeout``."""
        new: list[str] = []
        deadline = time.monotonic() + timeout
        while not until(new):
            left = deadline - time.monotonic()
            exited = self.proc.poll() is not None
            if left <= 0:
                pytest.fail(
                    f"waited for sd_notify messages; got {new!r}, "
                    f"exit {self.proc.poll()}, log:\n{self.tail()}"
                )
            try:
                new.append(self._messages.get(timeout=min(left, 0.5)))
            except queue.Empty:
                if exited:  # and nothing came for 0.5 s after the exit
                    pytest.fail(
                        f"serve exited ({self.proc.returncode}) after {new!r}; log:\n{self.tail()}"
                    )
        self.seen += new
        return new

    def rest(self) -> list[str]:
        """After the exit: whatever was still on its way."""
        new = []
        with contextlib.suppress(queue.Empty):
            while True:
                new.append(self._messages.get(timeout=0.5))
        self.seen += new
        return new

    def tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._closed.set()
        self._reader.join(5)
        self.log.close()


def _has(prefix: str, count: int = 1) -> Callable[[list[str]], bool]:
    return lambda msgs: sum(m.startswith(prefix) for m in msgs) >= count


def _serve_env(make_env: Any, tmp_path: Path, folders: int) -> Any:
    hot = [tmp_path / f"hot-{i}" for i in range(folders)]
    for path in hot:
        path.mkdir(exist_ok=True)
    return make_env(
        sftp={"listen": "127.0.0.1:0"},
        **{
            "sftp.accounts": [
                {
                    "username": "scan1",
                    "tenant": "acme",
                    "password_hash": hash_password("pw-1", rounds=4),
                }
            ]
        },
        watch=[{"path": str(p), "tenant": "acme"} for p in hot],
        metrics={"listen": "127.0.0.1:0"},
    )


STATUS = re.compile(r"STATUS=serving: (\d+) hot folders, sftp on 127\.0\.0\.1:(\d+)")


def test_serve_speaks_sd_notify(make_env: Any, tmp_path: Path) -> None:
    """READY once SFTP listens, WATCHDOG pings, RELOADING/READY on SIGHUP, STOPPING on SIGTERM."""
    env = _serve_env(make_env, tmp_path, folders=1)
    with notify_socket() as (sock, address):
        serve = Serve(env.config_path, sock, address, watchdog_usec=200_000)  # a ping every 0.1 s
        try:
            first = serve.receive(_has("READY=1"), timeout=60)
            assert first[0].startswith("READY=1\n"), first  # nothing before READY
            status = STATUS.fullmatch(first[0].split("\n")[1])
            assert status and status.group(1) == "1", first
            port = int(status.group(2))
            # READY came after the listener: an SSH client is greeted at once.
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                assert client.recv(64).startswith(b"SSH-2.0-")

            serve.receive(_has("WATCHDOG=1", 3), timeout=60)

            _serve_env(make_env, tmp_path, folders=2)  # rewrites the config: 2 hot folders
            serve.proc.send_signal(signal.SIGHUP)
            reload = serve.receive(_has("READY=1"))
            reloading = [m for m in reload if m.startswith("RELOADING=1")]
            assert len(reloading) == 1 and reload.index(reloading[0]) < len(reload) - 1
            usec = reloading[0].split("\n")[1].removeprefix("MONOTONIC_USEC=")
            now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            assert 0 <= now - int(usec) < 30_000_000  # the same clock systemd reads
            assert reload[-1] == f"READY=1\nSTATUS=serving: 2 hot folders, sftp on 127.0.0.1:{port}"

            # A broken config: the reload still ends with READY=1 (else systemd would wait
            # in "reloading"), and says the old config is kept.
            broken = env.config_path.read_text() + "\n[intake]\nduplicates = 'keep'\n"
            env.config_path.write_text(broken)
            serve.proc.send_signal(signal.SIGHUP)
            failed = serve.receive(_has("READY=1"))
            assert any(m.startswith("RELOADING=1") for m in failed)
            assert failed[-1].endswith("; reload failed, old config kept"), failed
            serve.receive(_has("WATCHDOG=1", 2), timeout=60)  # still pinging

            serve.proc.send_signal(signal.SIGTERM)
            assert serve.proc.wait(timeout=60) == 0
            rest = serve.rest()
            assert rest and rest[-1] == "STOPPING=1\nSTATUS=stopping", rest
        finally:
            serve.close()


def test_serve_without_watchdog_usec_sends_no_pings(make_env: Any, tmp_path: Path) -> None:
    """No WATCHDOG_USEC (WatchdogSec= unset): READY and STOPPING only, no WATCHDOG=1."""
    env = _serve_env(make_env, tmp_path, folders=1)
    with notify_socket() as (sock, address):
        serve = Serve(env.config_path, sock, address, watchdog_usec=None)
        try:
            serve.receive(_has("READY=1"), timeout=60)
            time.sleep(2.5)  # the main loop has woken twice meanwhile
            serve.proc.send_signal(signal.SIGTERM)
            assert serve.proc.wait(timeout=60) == 0
            serve.rest()
        finally:
            serve.close()
    assert [m.split("\n")[0] for m in serve.seen] == ["READY=1", "STOPPING=1"]


def test_serve_survives_a_burst_of_sighups(make_env: Any, tmp_path: Path) -> None:
    """SIGHUPs in quick succession never hang the main loop: SIGTERM still stops it at once."""
    env = _serve_env(make_env, tmp_path, folders=1)
    with notify_socket() as (sock, address):
        serve = Serve(env.config_path, sock, address, watchdog_usec=20_000)
        try:
            serve.receive(_has("READY=1"), timeout=60)
            end = time.monotonic() + 3
            while time.monotonic() < end:
                serve.proc.send_signal(signal.SIGHUP)
                time.sleep(0.0005)
            serve.receive(_has("WATCHDOG=1", 3), timeout=60)  # the loop runs on
            serve.proc.send_signal(signal.SIGTERM)
            assert serve.proc.wait(timeout=30) == 0
            assert serve.rest()[-1] == "STOPPING=1\nSTATUS=stopping"
        finally:
            serve.close()
