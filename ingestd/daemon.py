"""``ingestd serve``: the long-running ingest daemon: SFTP server, spool intake, hot folders.

Signal handlers only set flags; the main loop reads them. SIGTERM/SIGINT stop
gracefully (running intakes finish: each is one short transaction), SIGHUP reloads the
config (a broken new config is logged and the old one kept).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

from ingestd import log
from ingestd.config import Config, load_config
from ingestd.db import Database
from ingestd.errors import ConfigError, DatabaseError, DatabaseUnavailable
from ingestd.runtime import make_intake, open_database
from ingestd.schema import migrate
from ingestd.sftp.service import SftpService
from ingestd.watch import HotFolders


class Flags:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.reload = threading.Event()
        self.wake = threading.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_reload)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop.set()
        self.wake.set()

    def _on_reload(self, signum: int, frame: FrameType | None) -> None:
        self.reload.set()
        self.wake.set()


class _SchemaWhenReachable(threading.Thread):
    """Migrate now, or as soon as the database answers.

    The daemon must come up with Postgres down: SFTP uploads go to the spool and hot-folder
    files stay put, both retried by their loops. This thread keeps trying the (idempotent)
    migration meanwhile, so a database that returns empty gets its schema.
    """

    def __init__(self, db: Database, stop: threading.Event) -> None:
        super().__init__(name="schema", daemon=True)
        self.db, self.stop = db, stop
        self.log = log.get_logger(component="daemon")

    def run(self) -> None:
        delay = 1.0
        while not self.stop.is_set():
            try:
                migrate(self.db)
                return
            except DatabaseUnavailable as exc:
                self.log.warning("daemon.database_unavailable", detail=exc.message,
                                 retry_in=delay)  # fmt: skip
            except DatabaseError as exc:
                self.log.error("daemon.migrate_failed", detail=exc.message, retry_in=delay)
            self.stop.wait(delay)
            delay = min(delay * 2, 30.0)


def serve(config: Config, config_path: Path | None) -> int:
    logger = log.get_logger(component="daemon")
    flags = Flags()
    flags.install()
    with open_database(config, migrate_schema=False) as db:
        schema = _SchemaWhenReachable(db, flags.stop)
        schema.start()
        intake = make_intake(config, db)
        hot = HotFolders(config, intake)
        sftp = SftpService(config, intake)
        # The spool first: uploads acknowledged before a crash are ingested at once.
        sftp.start()
        hot.start()
        logger.info("daemon.ready", hot_folders=len(config.watch),
                    sftp_accounts=len(config.sftp.accounts))  # fmt: skip
        try:
            while not flags.stop.is_set():
                flags.wake.wait(1.0)
                flags.wake.clear()
                if flags.reload.is_set():
                    flags.reload.clear()
                    try:
                        new = load_config(config_path)
                    except ConfigError as exc:
                        logger.error(
                            "daemon.reload_failed", error=exc.message, problems=exc.problems
                        )
                        continue
                    log.configure(new.log.level, new.log.format)
                    new_intake = make_intake(new, db)
                    hot.intake = new_intake
                    hot.reload(new)
                    sftp.reload(new, new_intake)
                    config = new
                    logger.info("daemon.reloaded", hot_folders=len(new.watch))
        finally:
            logger.info("daemon.stopping")
            schema.join(5)
            sftp.stop_listening()
            hot.stop()
            sftp.stop()
    logger.info("daemon.stopped")
    return 0
