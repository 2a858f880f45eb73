"""The supervisor's spool: where an upload lives from CLOSE until intake has committed it.

``Spool`` ties the parts together: the directories (spool_layout.py), the entries on disk
(spool_entry.py), the quota ledger (spool_ledger.py) and the queue's index with intake's
claims (spool_index.py). It recovers them at start: anything in ``partial/`` belongs to
a connection that dropped before CLOSE and is deleted (no document); every queue file
with an entry is indexed again. SFTP processes reach the ledger and the index through
their supervisor (``SpoolClient`` in spool_client.py); the files they write themselves.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from ingestd.durable import fsync_dir
from ingestd.log import get_logger
from ingestd.sources.sftp.spool_entry import (
    Entry,
    load_entry,
    make_entry,
    rewrite_entry,
    write_entry,
)
from ingestd.sources.sftp.spool_index import SpoolIndex
from ingestd.sources.sftp.spool_layout import SpoolLayout, inbox_usage, is_temp_name
from ingestd.sources.sftp.spool_ledger import LOCAL, QuotaLedger


class SpoolView(Protocol):
    """What an SFTP session uses of the spool: the ``Spool`` itself in this process, a
    ``SpoolClient`` in an SFTP process."""

    temp_names: list[str]

    def is_temp_name(self, name: str) -> bool: ...
    def inbox(self, account: str) -> Path: ...
    def new_partial(self, account: str) -> tuple[Path, int]: ...
    def upload_ended(self, account: str) -> None: ...
    def reserve(self, account: str, nbytes: int, limit: int) -> None: ...
    def release(self, account: str, nbytes: int) -> None: ...
    def stage(self, account: str, reserved: int, size: int) -> None: ...
    def release_staged(self, account: str, nbytes: int) -> None: ...
    def make_entry(self, **fields: Any) -> Entry: ...
    def enqueue(
        self, src: Path, entry: Entry, *, reserved: int, staged: int = 0, labelled: bool = False
    ) -> Entry: ...
    def pending(self, account: str, subdir: str) -> list[Entry]: ...
    def pending_under(self, account: str, subdir: str) -> bool: ...
    def find(self, account: str, subdir: str, filename: str) -> Entry | None: ...
    def remove(self, entry: Entry) -> bool: ...
    def rename(self, entry: Entry, subdir: str, filename: str) -> bool: ...


class Spool:
    """The one spool of the supervisor: entries, ledger and index behind one interface
    (``SpoolView`` for its own server's sessions, the intake loop's claims)."""

    def __init__(self, root: Path, temp_names: Iterable[str]) -> None:
        self.layout = SpoolLayout(root)
        self.root = root
        self.inbox_root = self.layout.inbox_root
        self.partial_dir = self.layout.partial_dir
        self.queue_dir = self.layout.queue_dir
        self.temp_names = [p.lower() for p in temp_names]
        self.wake = threading.Event()
        self.index = SpoolIndex()
        # An entry's files and its place in the index change together under this lock
        # (finish, remove, reindex): reindex never takes back an entry whose files are
        # being removed because intake finished it or the client withdrew it.
        self._membership = threading.Lock()
        self.ledger = QuotaLedger()
        self.log = get_logger(component="spool")

    # -- start-up ---------------------------------------------------------------------
    def open(self) -> Spool:
        self.layout.make_dirs()
        self._recover()
        return self

    def _recover(self) -> None:
        for partial_file in self.partial_dir.iterdir():
            # A write handle that never saw CLOSE: the client was not told it succeeded.
            with contextlib.suppress(FileNotFoundError):
                size = partial_file.lstat().st_size
                partial_file.unlink()
                self.log.info("spool.partial_discarded", file=partial_file.name, size=size)
        for meta in self.queue_dir.glob("*.json"):
            if not meta.with_suffix(".data").exists():
                meta.unlink()  # the data rename never happened: that upload was not acked
        for data in sorted(self.queue_dir.glob("*.data")):  # ids are time-ordered
            try:
                entry = load_entry(data)
            except (ValueError, KeyError, TypeError) as exc:
                self.log.error("spool.bad_metadata", file=data.name, detail=str(exc))
                continue
            if entry is None:
                # Never deleted: these are someone's bytes. An admin looks at them.
                self.log.error("spool.orphan_data", file=str(data))
                continue
            self.index.add(entry)
            self.ledger.hold(entry.account, entry.size)
        for account, nbytes in inbox_usage(self.inbox_root).items():
            self.ledger.hold(account, nbytes)
        if len(self.index):
            self.log.info("spool.recovered", pending=len(self.index))
            self.wake.set()

    # -- names ------------------------------------------------------------------------
    def is_temp_name(self, name: str) -> bool:
        return is_temp_name(self.temp_names, name)

    def inbox(self, account: str) -> Path:
        return self.layout.inbox(account)

    # -- quota ------------------------------------------------------------------------
    def reserve(self, account: str, nbytes: int, limit: int, owner: str = LOCAL) -> None:
        """``nbytes`` more for an open upload, or QuotaExceeded."""
        self.ledger.grant(account, nbytes, nbytes, limit, owner)

    def grant(self, account: str, want: int, need: int, limit: int, owner: str) -> int:
        """See ``QuotaLedger.grant``."""
        return self.ledger.grant(account, want, need, limit, owner)

    def release(self, account: str, nbytes: int, owner: str = LOCAL) -> None:
        """An open upload gave back ``nbytes`` (it ended without a file, or shrank)."""
        self.ledger.release(account, nbytes, owner)

    def stage(self, account: str, reserved: int, size: int, owner: str = LOCAL) -> None:
        """An open upload that reserved ``reserved`` bytes is now a ``size``-byte temp-named
        file in the inbox."""
        self.ledger.settle(account, reserved, size, owner)

    def release_staged(self, account: str, nbytes: int) -> None:
        """A temp-named file of ``nbytes`` left the inbox (removed, replaced, swept)."""
        self.ledger.hold(account, -nbytes)

    def forget(self, owner: str) -> int:
        """``owner`` (an SFTP process) is gone: its open uploads' reservations and partial
        files go too (those clients were never told their uploads succeeded). Returns the
        number of partial files deleted."""
        self.ledger.forget(owner)
        removed = 0
        for partial_file in self.partial_dir.glob(f"{owner}-*"):
            with contextlib.suppress(FileNotFoundError):
                partial_file.unlink()
                removed += 1
        return removed

    def usage(self, account: str) -> int:
        return self.ledger.usage(account)

    # -- uploads ----------------------------------------------------------------------
    def new_partial(self, account: str, owner: str = LOCAL) -> tuple[Path, int]:
        return self.layout.new_partial(account, owner)

    def upload_ended(self, account: str) -> None:
        """An upload handle is done (here: nothing to settle; see SpoolClient)."""

    def enqueue(
        self,
        src: Path,
        entry: Entry,
        *,
        reserved: int,
        staged: int = 0,
        labelled: bool = False,
        owner: str = LOCAL,
    ) -> Entry:
        """Move the fsynced file ``src`` into the queue under ``entry``; durable on return.
        ``reserved``: what its open upload had reserved; ``staged``: its bytes already
        held as a temp-named inbox file (a rename to the final name); ``labelled``: see
        ``write_entry``."""
        write_entry(self.queue_dir, src, entry, labelled=labelled)
        return self.accept(entry, reserved=reserved, staged=staged, owner=owner)

    def accept(self, entry: Entry, *, reserved: int, staged: int, owner: str) -> Entry:
        """``entry`` is durable in the queue (written here or by an SFTP process): index it
        and wake intake."""
        self.ledger.settle(entry.account, reserved, entry.size - staged, owner)
        self.index.add(entry)
        self.wake.set()
        return entry

    def make_entry(self, **fields: Any) -> Entry:
        return make_entry(**fields)

    def data_path(self, entry: Entry) -> Path:
        return self.layout.data_path(entry.id)

    # -- the client's view of pending files ---------------------------------------------
    def reindex(self) -> int:
        """Index queue entries that are on disk but not known here: an SFTP process that
        died between writing an entry and reporting it. Returns how many were found."""
        found = 0
        for data in sorted(self.queue_dir.glob("*.data")):
            with self._membership:
                if data.name.removesuffix(".data") in self.index:
                    continue
                try:
                    entry = load_entry(data)
                except (OSError, ValueError, KeyError, TypeError):
                    continue  # gone meanwhile, or as bad as recovery at start will say
                if entry is None or not data.exists():  # finished or withdrawn meanwhile
                    continue
                self.index.add(entry)
            found += 1
        # What the queue and the inboxes hold, counted again: a process may also have died
        # between moving a temp-named file into the queue and saying so.
        held = self.index.held()
        for account, nbytes in inbox_usage(self.inbox_root).items():
            held[account] = held.get(account, 0) + nbytes
        self.ledger.recount(held)
        if found:
            self.wake.set()
        return found

    def entry(self, entry_id: str) -> Entry | None:
        return self.index.get(entry_id)

    def pending(self, account: str, subdir: str) -> list[Entry]:
        return self.index.pending(account, subdir)

    def pending_under(self, account: str, subdir: str) -> bool:
        return self.index.pending_under(account, subdir)

    def find(self, account: str, subdir: str, filename: str) -> Entry | None:
        found = [e for e in self.pending(account, subdir) if e.filename == filename]
        return max(found, key=lambda e: e.id) if found else None

    def remove(self, entry: Entry) -> bool:
        """Withdraw a pending upload (the client deleted it). False if intake has it."""
        with self._membership:
            if not self.index.withdraw(entry):
                return False
            self._unlink(entry)
        fsync_dir(self.queue_dir)
        self.release_staged(entry.account, entry.size)
        return True

    def rename(self, entry: Entry, subdir: str, filename: str) -> bool:
        """Change a pending upload's name (the client renamed it). False if intake has it."""
        return self.index.rename(entry, subdir, filename, partial(rewrite_entry, self.queue_dir))

    # -- the intake side ----------------------------------------------------------------
    def claim_ready(self, now: float, limit: int) -> list[Entry]:
        return self.index.claim_ready(now, limit)

    def next_due(self) -> float | None:
        return self.index.next_due()

    def unclaim(self, entry: Entry, delay: float) -> None:
        self.index.unclaim(entry, delay)

    def finish(self, entry: Entry) -> None:
        """Intake committed (or quarantined) the entry: drop its metadata."""
        with self._membership:
            self._unlink(entry)
            self.index.pop(entry)
        self.ledger.hold(entry.account, -entry.size)

    def _unlink(self, entry: Entry) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.layout.data_path(entry.id))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.layout.sidecar_path(entry.id))

    def snapshot(self) -> dict[str, int]:
        return self.index.snapshot()
