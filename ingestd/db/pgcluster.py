"""An embedded private PostgreSQL cluster, started from the system's server binaries.

Used when ``database.url`` is not configured, by ``make demo`` and by the test suite.
The server listens on a Unix socket only, in a directory that only its owner (and
root) can enter, so ``trust`` authentication on that socket admits nobody else.
A cluster can also be copied into a streaming replica (``replica``) that is later
promoted (``promote``): the failover tests and a demo of the HA recipe use that.
When ingestd runs as root the server runs as an unprivileged user, because
PostgreSQL refuses to run as root and should not be given root anyway.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from ingestd.errors import DatabaseError

SUPERUSER = "ingestd"
_SOCKET_NAME_MAX = 100  # sun_path is 108 bytes including ".s.PGSQL.5432" and the NUL


def find_bindir() -> Path:
    """Locate initdb/pg_ctl: $INGESTD_PG_BINDIR, the newest /usr/lib/postgresql/N/bin, PATH."""
    env = os.environ.get("INGESTD_PG_BINDIR")
    if env:
        return Path(env)
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise DatabaseError(
        "no PostgreSQL server binaries found (initdb); install them with "
        "'apt-get install postgresql' or set database.url"
    )


def _pick_server_user() -> pwd.struct_passwd | None:
    """None when not root (run as ourselves); else the first unprivileged user we find."""
    if os.geteuid() != 0:
        return None
    for name in ("ingestd", "postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise DatabaseError("running as root and no unprivileged user (ingestd, postgres) exists")


class EmbeddedPostgres:
    """A private cluster in ``datadir``; ``start()`` is a no-op when it already runs."""

    def __init__(
        self,
        datadir: Path,
        *,
        durable: bool = True,
        socket_dir: Path | None = None,
        port: int = 5432,
        dbname: str = "ingestd",
    ) -> None:
        self.datadir = Path(datadir).absolute()
        self.durable = durable
        self.port = port
        self.dbname = dbname
        self.bindir = find_bindir()
        self.user = _pick_server_user()
        self.socket_dir = socket_dir or self._default_socket_dir()
        self.logfile = self.datadir.parent / (self.datadir.name + ".log")
        self._owned = False

    def _default_socket_dir(self) -> Path:
        preferred = self.datadir.parent / "pgrun"
        if len(str(preferred)) <= _SOCKET_NAME_MAX - 20:
            return preferred
        # Deep state dirs (tests) overflow sun_path; a stable short name per datadir.
        digest = hashlib.sha256(str(self.datadir).encode()).hexdigest()[:12]
        return Path("/tmp") / f"ingestd-pg-{digest}"  # noqa: S108 - dir is created 0700

    # -- helpers -------------------------------------------------------------------
    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if self.user is not None:
            kwargs = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        try:
            result: subprocess.CompletedProcess[str] = subprocess.run(
                argv,
                check=True,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd="/",
                env={**os.environ, "LC_ALL": "C.UTF-8", "TZ": "UTC"},
                **kwargs,  # type: ignore[call-overload]
            )
            return result
        except subprocess.CalledProcessError as exc:
            raise DatabaseError(
                f"{Path(argv[0]).name} failed ({exc.returncode}): {exc.stderr.strip()[-2000:]}"
            ) from None
        except subprocess.TimeoutExpired:
            raise DatabaseError(f"{Path(argv[0]).name} timed out after {timeout:.0f}s") from None

    def _own(self, path: Path, mode: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)
        os.chmod(path, mode)

    @property
    def conninfo(self) -> str:
        return self.conninfo_for(self.dbname)

    def conninfo_for(self, dbname: str) -> str:
        return f"host={self.socket_dir} port={self.port} user={SUPERUSER} dbname={dbname}"

    def initialized(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def running(self) -> bool:
        res = subprocess.run(
            [
                str(self.bindir / "pg_isready"),
                "-q",
                "-h",
                str(self.socket_dir),
                "-p",
                str(self.port),
            ],
            check=False,
            timeout=10,
        )
        return res.returncode == 0

    # -- lifecycle -------------------------------------------------------------------
    def _check_reachable(self) -> None:
        if self.user is None:
            return
        if not self.datadir.parent.exists():
            # Traversable but not listable by others: the server user must reach pgdata.
            self.datadir.parent.mkdir(mode=0o711, parents=True)
        for parent in self.datadir.parents:
            st = parent.stat()
            searchable = st.st_mode & 0o001 or (
                st.st_uid == self.user.pw_uid and st.st_mode & 0o100
            )
            if not searchable:
                raise DatabaseError(
                    f"the embedded PostgreSQL runs as user {self.user.pw_name!r}, which cannot "
                    f"enter {parent}; make it searchable (chmod o+x) or set database.url"
                )

    def init(self) -> None:
        if self.initialized():
            return
        self._check_reachable()
        self._own(self.datadir, 0o700)
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.datadir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
        )
        settings = {
            # No TCP at all: the socket directory's permissions are the access control.
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "unix_socket_permissions": "0700",
            "port": str(self.port),
            "max_connections": "200",
            "shared_buffers": "'128MB'",
            "log_min_messages": "warning",
            "timezone": "'UTC'",
        }
        if not self.durable:
            # Throwaway test clusters only: crash safety of the *server* is not under test.
            settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        conf = self.datadir / "postgresql.conf"
        with conf.open("a", encoding="utf-8") as fh:
            fh.write("\n# --- set by ingestd (embedded cluster) ---\n")
            fh.writelines(f"{k} = {v}\n" for k, v in settings.items())

    @contextlib.contextmanager
    def _startup_lock(self) -> Iterator[None]:
        # `ingestd serve` and several `ingestd worker`s may start at the same moment; one
        # of them initialises and starts the cluster, the others find it running.
        self.datadir.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.datadir.parent / ".pgcluster.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def start(self) -> None:
        """Initialise if needed and start; remember whether we own the running server."""
        with self._startup_lock():
            self._start_locked()

    def _start_locked(self) -> None:
        self.init()
        self._own(self.socket_dir, 0o700)
        if self.running():
            return
        self.logfile.touch(exist_ok=True)
        if self.user is not None:
            os.chown(self.logfile, self.user.pw_uid, self.user.pw_gid)
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.datadir),
            "-l",
            str(self.logfile),
            "-w",
            "-t",
            "60",
            "start",
        )
        self._owned = True
        self._ensure_database()

    def _ensure_database(self) -> None:
        from ingestd.db.database import connect_once  # only db.py speaks psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                conn = connect_once(self.conninfo_for("postgres"))
                break
            except DatabaseError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.dbname,)
            ).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.dbname}"')

    def stop(self, mode: str = "fast") -> None:
        if not self.initialized() or not self.running():
            return
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "stop")
        self._owned = False

    def stop_if_owned(self) -> None:
        """Stop the server this process started, unless other processes still use it."""
        if self._owned and not self._others_connected():
            self.stop()

    def _others_connected(self) -> bool:
        from ingestd.db.database import connect_once

        try:
            with connect_once(self.conninfo_for("postgres")) as conn:
                row = conn.execute(
                    "SELECT count(*) AS n FROM pg_stat_activity "
                    "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                ).fetchone()
        except DatabaseError:
            return False
        return bool(row and row["n"])

    # -- streaming replication (failover tests, the HA demo) ---------------------------
    def replica(self, datadir: Path, *, port: int, via: Path | None = None) -> EmbeddedPostgres:
        """A streaming replica of this running cluster in ``datadir`` (not started).

        ``pg_basebackup -R`` copies the cluster over the replication protocol and writes
        standby.signal and primary_conninfo; a physical replication slot keeps on the
        primary every WAL segment the replica has not received yet. The copy's own port
        and socket directory are set after the primary's settings, so they win. ``via``:
        another socket directory that leads to this server (a relay), which the replica
        then streams through."""
        standby = EmbeddedPostgres(datadir, durable=self.durable, port=port, dbname=self.dbname)
        if standby.initialized():
            return standby
        standby._check_reachable()
        standby._own(standby.datadir, 0o700)
        slot = f"ingestd_{port}"
        self._run(
            str(self.bindir / "pg_basebackup"),
            "-D",
            str(standby.datadir),
            "-h",
            str(via or self.socket_dir),
            "-p",
            str(self.port),
            "-U",
            SUPERUSER,
            "-X",
            "stream",
            "-c",
            "fast",
            "-R",
            "-C",
            "-S",
            slot,
        )
        conf = standby.datadir / "postgresql.conf"
        with conf.open("a", encoding="utf-8") as fh:
            fh.write("\n# --- set by ingestd (streaming replica) ---\n")
            fh.write(f"port = {port}\n")
            fh.write(f"unix_socket_directories = '{standby.socket_dir}'\n")
        return standby

    def in_recovery(self) -> bool:
        """True while this server is a standby (replaying WAL, read-only)."""
        from ingestd.db.database import connect_once

        with connect_once(self.conninfo_for("postgres")) as conn:
            row = conn.execute("SELECT pg_is_in_recovery() AS r").fetchone()
        return bool(row and row["r"])

    def promote(self) -> None:
        """Make this standby a primary that accepts writes; returns once it does."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-w", "-t", "60", "promote")
        self._owned = True

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_if_owned()
