"""The spool's quota ledger: what each account holds against its quota.

An account's pending bytes are what waits in the queue and in its inbox (temp-named
files), plus what its open uploads have reserved. Open reservations are kept per
*owner*, the SFTP process holding the upload (``LOCAL`` for the supervisor's own
server): when an SFTP process dies, its open uploads die with it, and ``forget`` drops
their reservations in one go. SFTP processes reach this ledger through their supervisor
(``SpoolClient`` in spool_client.py).
"""

from __future__ import annotations

import threading

from ingestd.errors import ExitCode, IngestdError

# The owner of the uploads the supervisor's own server holds open (not an SFTP process's).
LOCAL = ""


class QuotaExceeded(IngestdError):
    """A reservation would take the account over its quota; says by how much, for the client.

    Transient: the account's pending bytes go as intake takes its uploads, and the same
    upload fits again then (the client is refused now and may send it later).
    """

    exit_code = ExitCode.refused
    transient = True

    def __init__(self, used: int, limit: int) -> None:
        super().__init__(f"account holds {used} pending bytes, quota is {limit}")
        self.used = used
        self.limit = limit

    def __reduce__(self) -> tuple[type[QuotaExceeded], tuple[int, int]]:
        return QuotaExceeded, (self.used, self.limit)  # crosses from the supervisor


class QuotaLedger:
    """Held bytes per account and open reservations per (owner, account)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # account -> bytes waiting in the queue and in its inbox (temp-named files)
        self._held: dict[str, int] = {}
        # (owner, account) -> bytes reserved by that owner's open uploads
        self._open: dict[tuple[str, str], int] = {}

    # -- with the lock held ------------------------------------------------------------
    def _hold(self, account: str, nbytes: int) -> None:
        # Never below zero: a count rebuilt from disk may be behind a release.
        self._held[account] = max(0, self._held.get(account, 0) + nbytes)

    def _reserved(self, owner: str, account: str, nbytes: int) -> None:
        key = (owner, account)
        left = max(0, self._open.get(key, 0) + nbytes)
        if left:
            self._open[key] = left
        else:
            self._open.pop(key, None)

    def _usage(self, account: str) -> int:
        opened = sum(n for (_, acct), n in self._open.items() if acct == account)
        return self._held.get(account, 0) + opened

    # -- the ledger's operations -------------------------------------------------------
    def hold(self, account: str, nbytes: int) -> None:
        """``nbytes`` more (or fewer) waiting in the queue or the inbox."""
        with self._lock:
            self._hold(account, nbytes)

    def recount(self, held: dict[str, int]) -> None:
        """Replace what the queue and the inboxes hold by a count from disk."""
        with self._lock:
            self._held = held

    def grant(self, account: str, want: int, need: int, limit: int, owner: str) -> int:
        """Reserve ``want`` bytes if they fit under ``limit``, else ``need``, else raise
        QuotaExceeded (with what the account holds besides ``owner``'s reservations).
        SFTP processes ask for more than they need so that not every WRITE is a round
        trip; what they do not use they give back when their last upload ends."""
        with self._lock:
            used = self._usage(account)
            for amount in (want, need):
                if amount <= 0 or used + amount <= limit:
                    self._reserved(owner, account, max(0, amount))
                    return max(0, amount)
            # An SFTP process adds what its own uploads hold (SpoolClient.reserve); the
            # credit it holds but has not spent is not the account's.
            mine = self._open.get((owner, account), 0) if owner != LOCAL else 0
        raise QuotaExceeded(used - mine, limit)

    def release(self, account: str, nbytes: int, owner: str) -> None:
        """An open upload gave back ``nbytes`` (it ended without a file, or shrank)."""
        with self._lock:
            self._reserved(owner, account, -nbytes)

    def settle(self, account: str, reserved: int, held: int, owner: str) -> None:
        """An open upload that reserved ``reserved`` bytes now holds ``held`` more bytes in
        the queue or the inbox (its file's size less what it held there before)."""
        with self._lock:
            self._reserved(owner, account, -reserved)
            self._hold(account, held)

    def forget(self, owner: str) -> None:
        """``owner`` (an SFTP process) is gone: its open uploads' reservations go too."""
        with self._lock:
            for key in [k for k in self._open if k[0] == owner]:
                del self._open[key]

    def usage(self, account: str) -> int:
        """The account's pending bytes: held plus reserved by every owner."""
        with self._lock:
            return self._usage(account)
