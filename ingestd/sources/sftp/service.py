"""The SFTP part of ``ingestd serve``: spool, spool intake loop and (with accounts) server.

The spool intake runs even without accounts: files acknowledged before an account was
removed from the config must still be ingested. Given a ``TenantStatusCache`` (the
daemon passes one), the server refuses logins of accounts whose tenant is not active; the
service starts the cache with the server and stops it with the service.
"""

from __future__ import annotations

from ingestd.config.settings import Config
from ingestd.events.outbox import EventLog
from ingestd.intake.ingest import Intake
from ingestd.intake.items import SourcePolicy
from ingestd.log import get_logger
from ingestd.sources.sftp import hostkeys
from ingestd.sources.sftp.bans import BanList
from ingestd.sources.sftp.processes import SftpProcesses, default_count
from ingestd.sources.sftp.server import SftpServer
from ingestd.sources.sftp.spool import Spool
from ingestd.sources.sftp.spool_intake import SpoolIntake
from ingestd.sources.sftp.tenant_status import TenantStatusCache


class SftpService:
    def __init__(
        self,
        config: Config,
        intake: Intake,
        *,
        tenant_status: TenantStatusCache | None = None,
        events: EventLog | None = None,
    ) -> None:
        self.config = config
        # Operator events of the SFTP side: bans, refused uploads, quarantined spool files.
        self.events = events
        self.log = get_logger(component="sftp")
        self.spool = Spool(config.paths.spool, config.sftp.temp_names)
        self.loop = SpoolIntake(
            self.spool,
            intake,
            failed_root=config.paths.state_dir / "failed",
            workers=config.sftp.spool_workers,
            retry_max_delay=config.sftp.retry_max_delay,
            events=events,
        )
        self.server: SftpServer | None = None
        # None: no tenant check, every login with the right credentials goes in.
        self.tenant_status = tenant_status
        self.loop.housekeeping = self.sweep_abandoned
        self.loop.tick = self.absorb_login_failures
        self.loop.policy_of = self.source_policy

    def absorb_login_failures(self) -> int:
        """The web console's and WebDAV's failed logins, counted towards SFTP bans."""
        server = self.server
        return server.bans.absorb_reports() if server is not None else 0

    def source_policy(self, username: str, tenant: str) -> SourcePolicy:
        """An upload's split policy (its account's, else its tenant's default) and date
        source: an account removed since the upload has neither of its own."""
        account = self.config.sftp.account(username)
        if account is None:
            return SourcePolicy(split=self.config.split_policy(tenant, None))
        return SourcePolicy(
            split=self.config.split_policy(tenant, account.split), date_source=account.date_source
        )

    def sweep_abandoned(self) -> int:
        cfg = self.config.sftp

        def tenant_of(username: str) -> str | None:
            account = cfg.account(username)
            return account.tenant if account else None

        return self.loop.sweep_abandoned(tenant_of, cfg.abandoned_after)

    def start(self) -> None:
        self.spool.open()
        self.loop.start()
        if self.config.sftp.accounts:
            self._start_server(self.config)
        else:
            self.log.info("sftp.disabled", reason="no [[sftp.accounts]] configured")

    def _start_server(self, config: Config) -> None:
        state_dir = config.paths.state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        keys = hostkeys.load_or_create(state_dir)
        bans = BanList(config.sftp.bans, state_dir, self.events)
        if self.tenant_status is not None:
            self.tenant_status.start()
        count = config.sftp.processes or default_count()
        processes = None
        if count > 1:
            processes = SftpProcesses(
                config, self.spool, bans, self.tenant_status, self.events, count
            )
        self.server = SftpServer(
            config, self.spool, keys, bans, self.tenant_status, processes=processes
        )
        if processes is not None:
            processes.start()
        self.server.start()

    def snapshot(self) -> dict[str, object]:
        """For `ingestd status`: the SFTP processes and the connections of all of them."""
        server = self.server
        if server is None:
            return {"listening": False}
        sessions = server.sessions()
        procs = server.processes
        return {
            "listening": True,
            "processes": procs.count if procs is not None else 1,
            "running": procs.alive() if procs is not None else 1,
            "connections": len(sessions),
            "logged_in": sum(1 for s in sessions if s["account"] is not None),
        }

    def reload(self, config: Config, intake: Intake) -> None:
        self.loop.intake = intake
        self.spool.temp_names = [p.lower() for p in config.sftp.temp_names]
        if self.server is not None:
            self.server.reload(config)
        elif config.sftp.accounts:
            self._start_server(config)
        self.config = config

    def stop_listening(self) -> None:
        """No new uploads; sessions end (their open uploads are aborted, not ingested)."""
        if self.server is not None:
            self.server.stop()

    def stop(self) -> None:
        self.stop_listening()
        if self.tenant_status is not None:
            self.tenant_status.stop()
        self.loop.stop()
