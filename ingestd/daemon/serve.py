"""``ingestd serve``: the long-running ingest daemon: SFTP server, spool intake, hot folders.

Signal handlers only set flags; the main loop reads them. SIGTERM/SIGINT stop
gracefully (running intakes finish: each is one short transaction), SIGHUP reloads the
config (a broken new config is logged and the old one kept).

Under systemd (Type=notify) the daemon reports READY=1 once the SFTP listener and the hot
folders run, RELOADING=1 ... READY=1 around a reload, WATCHDOG=1 from the main loop at half
of WatchdogSec, and STOPPING=1 when it begins to stop (ingestd/runtime/sdnotify.py; a no-op
without $NOTIFY_SOCKET).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ingestd import log
from ingestd.archive import sealkey
from ingestd.archive.export_check import fingerprint
from ingestd.archive.verify import LAST_RUN_DIR
from ingestd.config.load import load_config
from ingestd.config.settings import Config
from ingestd.daemon import lock as daemonlock
from ingestd.daemon.reload_request import record_reload
from ingestd.daemon.state import DaemonState
from ingestd.daemon.wiring import make_intake, open_database
from ingestd.db.database import Database
from ingestd.db.schema import migrate
from ingestd.errors import (
    AddressInUse,
    ConfigError,
    DatabaseError,
    DatabaseUnavailable,
    IngestdError,
    StateUnusable,
)
from ingestd.events.outbox import EventLog
from ingestd.intake import policy_backfill
from ingestd.log import Logger
from ingestd.ops import preflight
from ingestd.ops.metrics_server import (
    DaemonCollector,
    MetricsEndpoint,
    QueueCollector,
    register_queue_collector,
    unregister,
)
from ingestd.runtime import health, statedir
from ingestd.runtime.sdnotify import Notifier
from ingestd.runtime.signals import Flags
from ingestd.sources.hotfolders import HotFolders
from ingestd.sources.sftp import hostkeys
from ingestd.sources.sftp.bans import UNBAN_DIR
from ingestd.sources.sftp.in_progress import uploads_in_progress
from ingestd.sources.sftp.service import SftpService
from ingestd.sources.sftp.spool import Spool
from ingestd.sources.sftp.tenant_status import TenantStatusCache


class _SchemaWhenReachable(threading.Thread):
    """Migrate now, or as soon as the database answers.

    The daemon must come up with Postgres down: SFTP uploads go to the spool and hot-folder
    files stay put, both retried by their loops. This thread keeps trying the (idempotent)
    migration meanwhile, so a database that returns empty gets its schema.
    """

    def __init__(
        self, db: Database, stop: threading.Event, then: Callable[[], None] | None = None
    ) -> None:
        super().__init__(name="schema", daemon=True)
        self.db, self.stop, self.then = db, stop, then
        self.log = log.get_logger(component="daemon")

    def run(self) -> None:
        delay = 1.0
        while not self.stop.is_set():
            try:
                migrate(self.db)
                if self.then is not None:  # what needs the database answering
                    self.then()
                return
            except DatabaseUnavailable as exc:
                self.log.warning("daemon.database_unavailable", detail=exc.message, retry_in=delay)
            except DatabaseError as exc:
                self.log.error("daemon.migrate_failed", detail=exc.message, retry_in=delay)
            self.stop.wait(delay)
            delay = min(delay * 2, 30.0)


def _after_migrate(config: Config, db: Database, logger: Logger) -> None:
    """Once the database answers: the config's tenants checked, and the sealing key made
    if none was ever made (so the first backup holds it; ``sealkey.ensure_key``)."""
    preflight.after_migrate(config, db, logger)
    filled = policy_backfill.backfill(config, db)  # once after the upgrade to 0024
    if filled:
        logger.info("documents.date_policy_filled", documents=filled)
    try:
        made = sealkey.ensure_key(db, config.paths.state_dir)
    except IngestdError as exc:  # a key file it cannot write: the first seal says so again
        logger.warning("daemon.seal_key_not_made", detail=exc.message)
        return
    if made is not None:
        logger.info("daemon.seal_key_made", fingerprint=fingerprint(made))


def _status(config: Config, sftp: SftpService) -> str:
    """The STATUS= line systemctl shows: what the daemon serves right now."""
    if sftp.server is None:
        where = "off (no accounts)"
    else:
        host, port = sftp.server.address
        where = f"on [{host}]:{port}" if ":" in host else f"on {host}:{port}"
    return f"serving: {len(config.watch)} hot folders, sftp {where}"


class _Metrics(MetricsEndpoint):
    collector: QueueCollector


def _health(config: Config, sftp: SftpService, state: DaemonState) -> health.Health:
    """/healthz: the loops of serve turn (the SFTP accept loop while SFTP is on).
    /readyz: the database as the state thread's probe last saw it (no second probe), the
    spool's directories and the archive writable."""
    spool = sftp.spool

    def database() -> str | None:
        age, limit = checks.loop_age("daemon.state")
        if age > limit:
            return f"the database probe has not run for {age:.0f} s"
        if state.database_up is None:
            return "not probed yet"
        if not state.database_up:
            return f"unreachable since {state.down_since}: {state.last_error}"
        return None

    def sftp_processes() -> str | None:
        procs = sftp.server.processes if sftp.server is not None else None
        if procs is None or procs.alive() > 0:
            return None
        return f"none of the {procs.count} SFTP processes is running"

    checks = health.Health(
        [
            health.Loop("daemon"),
            health.Loop("daemon.state"),
            health.Loop("watch.settle"),
            health.Loop("watch.folders"),
            health.Loop("spool.intake"),
            health.Loop("sftp.accept", lambda: sftp.server is not None),
            health.Loop(
                "sftp.processes",
                lambda: sftp.server is not None and sftp.server.processes is not None,
            ),
        ],
        {
            "database": database,
            "spool": health.writable(spool.partial_dir, spool.queue_dir, spool.inbox_root),
            "sftp": sftp_processes,
            "archive": health.writable(config.paths.archive_dir),
        },
    )
    return checks


def _state_turned(period: float) -> dict[str, float]:
    """A provider of the state thread, called once per turn: that loop's heartbeat; the
    state file shows the seconds since each loop's last turn."""
    health.beat("daemon.state", period)
    return health.HEARTBEATS.ages()


def _start_metrics(
    config: Config, db: Database, logger: Logger, checks: health.Health, spool: Spool
) -> _Metrics | None:
    """/metrics, /healthz and /readyz on metrics.listen, with the queue, spool and verify
    gauges; a taken port is logged, not fatal (ingesting matters more than being
    watched). Changes need a restart."""
    # Where `ingestd verify` records its runs: made here, so that a sandboxed verify unit
    # (ProtectSystem=strict) can be given this directory, and nothing else, to write.
    with contextlib.suppress(OSError, StateUnusable):
        statedir.make_dirs(config.paths.state_dir, config.paths.state_dir / LAST_RUN_DIR, 0o750)
    if not config.metrics.enabled:
        return None
    try:
        endpoint = _Metrics(config.metrics.listen, health=checks)
    except OSError as exc:
        logger.error("daemon.metrics_failed", listen=config.metrics.listen, error=str(exc))
        return None
    # The queue and, from [worker] pools, each pool's backlog and live lanes on all hosts.
    endpoint.collector = register_queue_collector(db, config.worker)
    endpoint.add_collector(DaemonCollector(spool.snapshot, config.paths.state_dir))
    host, port = endpoint.address
    logger.info("daemon.metrics", listen=f"{host}:{port}")
    return endpoint


def check_state(config: Config) -> None:
    """StateUnusable unless this process can use every directory and file ``ingestd
    serve`` needs: the state directory, its host keys (with SFTP accounts), unban
    requests and failed folder, the spool, the archive."""
    p = config.paths
    dirs = [p.state_dir, p.state_dir / "failed", p.spool, *statedir.subdirs(p.spool), p.archive_dir]
    files: list[Path] = []
    if config.sftp.accounts:
        dirs += [hostkeys.key_dir(p.state_dir), p.state_dir / UNBAN_DIR]
        files += hostkeys.key_paths(p.state_dir)
    statedir.check_usable(dirs, files)


def serve(config: Config, config_path: Path | None, notifier: Notifier | None = None) -> int:
    """Run the daemon until SIGTERM; one per state directory and spool: a second one ends
    at once with AlreadyRunning (exit 12), whatever its ports (ingestd/daemon/lock.py)."""
    with daemonlock.held(config.paths.state_dir, config.paths.spool):
        return _serve(config, config_path, notifier)


def _serve(config: Config, config_path: Path | None, notifier: Notifier | None) -> int:
    logger = log.get_logger(component="daemon")
    # Before anything starts: a state directory this user cannot use (root-owned host
    # keys, a read-only mount) needs an operator, not a restart loop (exit 10).
    check_state(config)
    # An S3 archive that cannot work (no bucket, no Object Lock) refuses the start (exit
    # 3); missing hot folders and kinds no pool serves are logged (config.warning).
    preflight.at_start(config, logger)
    notifier = notifier or Notifier()
    flags = Flags()
    flags.install()
    # For the threads that wait for the stop (the schema thread): set by this loop, never
    # by a handler (ingestd/runtime/signals.py).
    stopping = threading.Event()
    # A database that refuses us (no such role or database) ends the start (exit 3); one
    # that is down does not: uploads are spooled until it answers.
    with open_database(config, migrate_schema=False, require_server=False) as db:
        schema = _SchemaWhenReachable(db, stopping, lambda: _after_migrate(config, db, logger))
        schema.start()
        intake = make_intake(config, db)
        # Operator events decided here (quarantines, refused uploads, bans); buffered on
        # disk while the database is down, flushed into the outbox when it is back.
        events = EventLog(db, config.paths.state_dir)
        events.start()
        hot = HotFolders(config, intake, events=events)
        sftp = SftpService(
            config,
            intake,
            tenant_status=TenantStatusCache(
                db,
                interval=config.sftp.tenant_status_refresh,
                max_age=config.sftp.tenant_status_max_age,
            ),
            events=events,
        )
        # The spool first: uploads acknowledged before a crash are ingested at once.
        try:
            sftp.start()
            hot.start()
        except (OSError, AddressInUse) as exc:  # what the check at start could not foresee
            problem = exc if isinstance(exc, AddressInUse) else statedir.unusable(exc)
            if problem is None:
                raise
            hot.stop()
            sftp.stop()
            events.stop()
            raise problem from None
        # For `ingestd status` while Postgres is down: since when, and what waits.
        # A turn of the state thread: its 2 s pause, and a probe of a database that is
        # down waits for the pool, then for one direct connection.
        turn = 2.0 + 2 * config.database.connect_timeout
        state = DaemonState(
            db,
            config.paths.state_dir,
            {
                "hotfolders": hot.status_snapshot,
                "spool": sftp.spool.snapshot,
                "sftp": sftp.snapshot,
                "uploads": lambda: uploads_in_progress(config.paths.spool, config.sftp.temp_names),
                "loops": lambda: _state_turned(turn),
            },
        )
        state.start()
        endpoint = _start_metrics(config, db, logger, _health(config, sftp, state), sftp.spool)
        notifier.ready(_status(config, sftp))
        logger.info(
            "daemon.ready", hot_folders=len(config.watch), sftp_accounts=len(config.sftp.accounts)
        )
        ping_every = notifier.watchdog_interval
        next_ping = time.monotonic()
        reloads = 0
        try:
            while not flags.stop.is_set():
                health.beat("daemon", 1.0)
                if ping_every is not None and time.monotonic() >= next_ping:
                    notifier.watchdog()
                    next_ping = time.monotonic() + ping_every
                wait = 1.0 if ping_every is None else min(1.0, next_ping - time.monotonic())
                flags.sleep(max(0.0, wait))
                if flags.reload.is_set():
                    flags.reload.clear()  # SIGHUPs meanwhile: this reload reads their config
                    notifier.reloading()
                    reloads += 1  # #30 (confd): `account add` & co. wait for the record
                    try:
                        new = load_config(config_path)
                    except ConfigError as exc:
                        logger.error(
                            "daemon.reload_failed", error=exc.message, problems=exc.problems
                        )
                        notifier.ready(f"{_status(config, sftp)}; reload failed, old config kept")
                        record_reload(
                            config.paths.state_dir, reloads, exc.problems or [exc.message]
                        )
                        continue
                    log.configure(new.log.level, new.log.format)
                    new_intake = make_intake(new, db)
                    hot.intake = new_intake
                    hot.reload(new)
                    sftp.reload(new, new_intake)
                    config = new
                    if endpoint is not None:
                        endpoint.collector.worker = new.worker  # pools added or changed
                    notifier.ready(_status(config, sftp))
                    logger.info("daemon.reloaded", hot_folders=len(new.watch))
                    record_reload(config.paths.state_dir, reloads, None)
        finally:
            stopping.set()
            notifier.stopping("stopping" if flags.stop.is_set() else "stopping (error)")
            logger.info("daemon.stopping")
            schema.join(5)
            state.stop()
            sftp.stop_listening()
            hot.stop()
            sftp.stop()
            events.stop()
            if endpoint is not None:
                endpoint.close()
                unregister(endpoint.collector)
    logger.info("daemon.stopped")
    notifier.close()
    flags.close()
    return 0
