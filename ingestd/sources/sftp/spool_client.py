"""The spool as an SFTP process sees it: the files it writes itself, the quota ledger and
the queue's index through its supervisor, whose ``Spool`` holds the one copy of both.

Quota: asking the supervisor at every WRITE would add a round trip per 32 KB, so the
process reserves ahead (``STEP`` bytes, when they fit under the quota; just what the write
needs when they do not) and spends that credit locally, over one upload and the next.
What is left of it goes back once the account has had no open upload here for
``IDLE_RETURN`` seconds: a scanner's next file needs no round trip, and an account's idle
credit does not block another process's upload for long. Meanwhile an account's quota
can refuse up to ``STEP`` bytes early per SFTP process serving it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

from ingestd.sources.sftp.ipc import Op, Peer, PeerGone
from ingestd.sources.sftp.spool_entry import Entry, make_entry, write_entry
from ingestd.sources.sftp.spool_layout import SpoolLayout, is_temp_name
from ingestd.sources.sftp.spool_ledger import QuotaExceeded

STEP = 8 * 1024 * 1024
IDLE_RETURN = 1.0


class SpoolClient:
    def __init__(self, root: Path, temp_names: list[str], owner: str, peer: Peer) -> None:
        self.layout = SpoolLayout(root)
        self.temp_names = [p.lower() for p in temp_names]
        self.owner = owner
        self.peer = peer
        self._lock = threading.Lock()
        self._credit: dict[str, int] = {}  # reserved at the supervisor, not spent yet
        self._spent: dict[str, int] = {}  # reserved by this process's open uploads
        self._uploads: dict[str, int] = {}  # open upload handles per account
        self._idle_since: dict[str, float] = {}  # accounts with credit and no open upload

    # -- names and files ---------------------------------------------------------------
    def is_temp_name(self, name: str) -> bool:
        return is_temp_name(self.temp_names, name)

    def inbox(self, account: str) -> Path:
        return self.layout.inbox(account)

    def new_partial(self, account: str) -> tuple[Path, int]:
        made = self.layout.new_partial(account, self.owner)
        with self._lock:
            self._uploads[account] = self._uploads.get(account, 0) + 1
            self._idle_since.pop(account, None)
        return made

    def make_entry(self, **fields: Any) -> Entry:
        return make_entry(**fields)

    # -- quota ---------------------------------------------------------------------------
    def reserve(self, account: str, nbytes: int, limit: int) -> None:
        with self._lock:  # held across the call: one process asks once, not per thread
            credit = self._credit.get(account, 0)
            if credit < nbytes:
                need = nbytes - credit
                try:
                    granted = self.peer.call(Op.grant, account, max(need, STEP), need, limit)
                except QuotaExceeded as exc:
                    # The supervisor counted everyone else; add what our uploads hold.
                    raise QuotaExceeded(exc.used + self._spent.get(account, 0), limit) from None
                assert isinstance(granted, int)
                credit += granted
            self._credit[account] = credit - nbytes
            self._spent[account] = self._spent.get(account, 0) + nbytes

    def _spend(self, account: str, nbytes: int) -> None:
        """With the lock held: ``nbytes`` of our uploads' reservation left their hands."""
        self._spent[account] = max(0, self._spent.get(account, 0) - nbytes)

    def release(self, account: str, nbytes: int) -> None:
        """An upload ended without a file (refused, aborted): its bytes go straight back,
        not into the credit, so a refusal frees the quota for the next try at once."""
        with self._lock:
            self._spend(account, nbytes)
        if nbytes:
            with contextlib.suppress(PeerGone):
                self.peer.notify(Op.release, account, nbytes)

    def upload_ended(self, account: str) -> None:
        with self._lock:
            left = self._uploads.get(account, 0) - 1
            if left > 0:
                self._uploads[account] = left
                return
            self._uploads.pop(account, None)
            self._idle_since[account] = time.monotonic()

    def return_idle_credit(self, now: float | None = None) -> None:
        """Give back the credit of accounts idle here for IDLE_RETURN seconds."""
        now = time.monotonic() if now is None else now
        returned = []
        with self._lock:
            for account, since in list(self._idle_since.items()):
                if self._uploads.get(account):
                    del self._idle_since[account]  # busy again
                elif now - since >= IDLE_RETURN:
                    del self._idle_since[account]
                    returned.append((account, self._credit.pop(account, 0)))
        for account, credit in returned:
            if credit:
                with contextlib.suppress(PeerGone):
                    self.peer.notify(Op.release, account, credit)

    def stage(self, account: str, reserved: int, size: int) -> None:
        with self._lock:
            self._spend(account, reserved)
        self.peer.notify(Op.stage, account, reserved, size)

    def release_staged(self, account: str, nbytes: int) -> None:
        self.peer.notify(Op.release_staged, account, nbytes)

    # -- the queue -----------------------------------------------------------------------
    def enqueue(
        self, src: Path, entry: Entry, *, reserved: int, staged: int = 0, labelled: bool = False
    ) -> Entry:
        write_entry(self.layout.queue_dir, src, entry, labelled=labelled)
        with self._lock:
            self._spend(entry.account, reserved)
        # One-way: durable already; the supervisor indexes it before it answers any later
        # call of ours (one ordered channel), and finds it on disk should we die first.
        self.peer.notify(Op.enqueued, entry, reserved, staged)
        return entry

    def pending(self, account: str, subdir: str) -> list[Entry]:
        found = self.peer.call(Op.pending, account, subdir)
        assert isinstance(found, list)
        return found

    def pending_under(self, account: str, subdir: str) -> bool:
        return bool(self.peer.call(Op.pending_under, account, subdir))

    def find(self, account: str, subdir: str, filename: str) -> Entry | None:
        found = [e for e in self.pending(account, subdir) if e.filename == filename]
        return max(found, key=lambda e: e.id) if found else None

    def remove(self, entry: Entry) -> bool:
        return bool(self.peer.call(Op.remove, entry.id))

    def rename(self, entry: Entry, subdir: str, filename: str) -> bool:
        if not self.peer.call(Op.rename, entry.id, subdir, filename):
            return False
        entry.subdir, entry.filename = subdir, filename
        return True
