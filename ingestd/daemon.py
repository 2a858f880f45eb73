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
from ingestd.errors import ConfigError
from ingestd.runtime import make_intake, open_database
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


def serve(config: Config, config_path: Path | None) -> int:
    logger = log.get_logger(component="daemon")
    flags = Flags()
    flags.install()
    with open_database(config) as db:
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
            sftp.stop_listening()
            hot.stop()
            sftp.stop()
    logger.info("daemon.stopped")
    return 0
