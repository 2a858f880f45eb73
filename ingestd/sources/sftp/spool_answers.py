"""The supervisor's side of ``SpoolClient``: what an SFTP process asks of the spool
(quota ledger, queue index), answered from the one ``Spool`` under the process's owner.

The arguments come from another process: each is checked for its type before use, and a
wrong one is an error the process receives as the answer (``IngestdError``).
"""

from __future__ import annotations

from ingestd.errors import IngestdError
from ingestd.sources.sftp.ipc import Op
from ingestd.sources.sftp.spool import Spool
from ingestd.sources.sftp.spool_entry import Entry

# The operations answered here; processes.py answers the others.
SPOOL_OPS = frozenset(
    {
        Op.grant,
        Op.release,
        Op.stage,
        Op.release_staged,
        Op.enqueued,
        Op.pending,
        Op.pending_under,
        Op.remove,
        Op.rename,
    }
)


def as_int(value: object) -> int:
    """``value`` if it is a number, else an error that says what came instead."""
    if not isinstance(value, int):
        raise IngestdError(f"expected a number, got {type(value).__name__}")
    return value


def answer_spool(spool: Spool, owner: str, op: Op, a: tuple[object, ...]) -> object:
    """Apply the spool operation ``op`` (one of ``SPOOL_OPS``) of the SFTP process
    ``owner``; the answer, or None for a one-way message."""
    match op:
        case Op.grant:
            return spool.grant(str(a[0]), as_int(a[1]), as_int(a[2]), as_int(a[3]), owner)
        case Op.release:
            spool.release(str(a[0]), as_int(a[1]), owner)
        case Op.stage:
            spool.stage(str(a[0]), as_int(a[1]), as_int(a[2]), owner)
        case Op.release_staged:
            spool.release_staged(str(a[0]), as_int(a[1]))
        case Op.enqueued:
            entry = a[0]
            assert isinstance(entry, Entry)
            spool.accept(entry, reserved=as_int(a[1]), staged=as_int(a[2]), owner=owner)
        case Op.pending:
            return spool.pending(str(a[0]), str(a[1]))
        case Op.pending_under:
            return spool.pending_under(str(a[0]), str(a[1]))
        case Op.remove:
            found = spool.entry(str(a[0]))
            return found is not None and spool.remove(found)
        case Op.rename:
            found = spool.entry(str(a[0]))
            return found is not None and spool.rename(found, str(a[1]), str(a[2]))
        case _:
            raise IngestdError(f"not a spool operation: {op}")
    return None
