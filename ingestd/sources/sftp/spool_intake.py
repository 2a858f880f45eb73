"""Take completed uploads from the spool through intake, oldest first.

The same ``Intake.ingest`` as hot folders and the CLI. A transient failure (database
down, tenant suspended, archive not writable) leaves the spool entry where it is and
retries it with exponential backoff; a permanent refusal moves the bytes to the failed
folder with a note, so nothing is lost and nothing blocks the queue.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from ingestd.errors import TenantError
from ingestd.events.outbox import EventLog
from ingestd.intake.ingest import Intake
from ingestd.intake.items import IntakeItem, SourcePolicy
from ingestd.log import get_logger
from ingestd.runtime import health, metrics
from ingestd.sources import retry
from ingestd.sources.handoff import Handoff, Source, Step
from ingestd.sources.quarantine import quarantine
from ingestd.sources.sftp.spool import Spool
from ingestd.sources.sftp.spool_entry import Entry


class SpoolIntake:
    def __init__(
        self,
        spool: Spool,
        intake: Intake,
        *,
        failed_root: Path,
        workers: int = 2,
        retry_max_delay: float = 60.0,
        events: EventLog | None = None,
    ) -> None:
        self.spool = spool
        self.intake = intake
        self.failed_root = failed_root
        self.workers = workers
        self.retry_max_delay = retry_max_delay
        self.events = events
        self.handoff = Handoff(Source.spool, events)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="spool-intake")
        self._inflight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.log = get_logger(component="spool")
        # Housekeeping the loop runs now and then (the service sets it: abandoned uploads).
        self.housekeeping: Callable[[], object] | None = None
        self.housekeeping_interval = 600.0
        # Short, frequent work of the service (the other front doors' failed logins).
        self.tick: Callable[[], object] | None = None
        self.tick_interval = 2.0
        # The split policy and date source of an upload, by (account, tenant) (the
        # service sets it from the current config: a reload applies to what is still
        # waiting).
        self.policy_of: Callable[[str, str], SourcePolicy] = lambda _a, _t: SourcePolicy()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="spool-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self.spool.wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        # Running intakes finish (each is one short transaction); queued ones stay spooled.
        self._pool.shutdown(wait=True, cancel_futures=True)

    def sweep_abandoned(self, tenant_of: Callable[[str], str | None], max_age: float) -> int:
        """Move temp-named uploads older than ``max_age`` seconds to the failed folder."""
        moved = 0
        now = time.time()
        for account_dir in sorted(self.spool.inbox_root.iterdir()):
            account = account_dir.name
            for dirpath, _dirs, files in os.walk(account_dir):
                for name in files:
                    path = Path(dirpath, name)
                    try:
                        st = path.lstat()
                    except FileNotFoundError:
                        continue
                    if now - st.st_mtime < max_age:
                        continue
                    tenant = tenant_of(account) or "_no_account"
                    subdir = os.path.relpath(dirpath, account_dir)
                    subdir = "" if subdir == "." else subdir
                    failed = self.failed_root / tenant / "sftp" / account
                    note = quarantine(
                        path,
                        failed,
                        subdir=subdir,
                        tenant=tenant,
                        reason="abandoned_upload",
                        detail=f"temp-named upload not renamed within {int(max_age)} s",
                    )
                    self.spool.release_staged(account, st.st_size)
                    metrics.SPOOL_QUARANTINED.labels(tenant, "abandoned_upload").inc()
                    self.log.warning(
                        "spool.abandoned_upload",
                        account=account,
                        tenant=tenant,
                        filename=name,
                        subdir=subdir,
                        note=str(note),
                    )
                    moved += 1
        return moved

    def _loop(self) -> None:
        next_housekeeping = next_tick = time.monotonic()
        while not self._stop.is_set():
            health.beat("spool.intake", 1.0)
            if self.tick is not None and time.monotonic() >= next_tick:
                next_tick = time.monotonic() + self.tick_interval
                try:
                    self.tick()
                except Exception:
                    self.log.exception("spool.tick_failed")
            if self.housekeeping is not None and time.monotonic() >= next_housekeeping:
                next_housekeeping = time.monotonic() + self.housekeeping_interval
                try:
                    self.housekeeping()
                except Exception:
                    self.log.exception("spool.housekeeping_failed")
            with self._lock:
                free = 2 * self.workers - self._inflight
            claimed = self.spool.claim_ready(time.monotonic(), free) if free > 0 else []
            for entry in claimed:
                with self._lock:
                    self._inflight += 1
                self._pool.submit(self._ingest, entry)
            due = self.spool.next_due()
            timeout = 1.0 if due is None else max(0.01, min(1.0, due - time.monotonic()))
            self.spool.wake.wait(timeout)
            self.spool.wake.clear()

    def _ingest(self, entry: Entry) -> None:
        # The spool id is the upload's correlation id: intake and every job carry it.
        log = self.log.bind(
            tenant=entry.tenant,
            account=entry.account,
            filename=entry.filename,
            spool_id=entry.id,
            trace=entry.id,
        )
        policy = self.policy_of(entry.account, entry.tenant)
        item = IntakeItem(
            path=self.spool.data_path(entry),
            tenant=entry.tenant,
            source=f"sftp:{entry.account}",
            filename=entry.filename,
            subdir=entry.subdir,
            tags=tuple(entry.tags),
            owned=True,
            trace=entry.id,
            split=policy.split,
            date_source=policy.date_source,
            arrived=_received(entry.received_at),
        )

        def tenant_waiting(exc: TenantError) -> None:
            # Once per upload: it waits in the spool until its tenant is active again.
            if retry.Cause.tenant_inactive not in entry.reported:
                entry.reported.add(retry.Cause.tenant_inactive)
                log.warning("spool.tenant_not_active", detail=exc.message)

        try:
            # Everything but a refusal keeps the upload in the spool: it was acknowledged,
            # so it is only ever ingested or quarantined for what it is, never lost to an
            # outage.
            done = self.handoff.attempt(
                self.intake,
                item,
                failed_dir=self.failed_root / entry.tenant / "sftp" / entry.account,
                log=log,
                attempts=entry.attempts,
                tenant_waiting=tenant_waiting,
            )
            if done.step is Step.gone:
                # The data file is gone: intake finished it before a crash, or an admin
                # moved it.
                log.warning("spool.entry_missing")
            if done.cause is None:
                self.spool.finish(entry)
            else:
                self.spool.unclaim(
                    entry, retry.delay(entry.attempts, self.retry_max_delay, done.cause)
                )
                self.handoff.count_retry(entry.tenant, str(done.cause))
        finally:
            with self._lock:
                self._inflight -= 1
            self.spool.wake.set()

    def idle(self) -> bool:
        with self._lock:
            inflight = self._inflight
        return inflight == 0 and self.spool.snapshot()["pending"] == 0


def _received(text: str) -> datetime | None:
    """The upload's receipt time as its queue entry says it (None if unreadable)."""
    try:
        when = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
