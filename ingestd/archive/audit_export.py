"""``ingestd audit export``: one tenant's chain as a file its auditor checks on their own.

JSON lines: a header (format, tenant, chain, range, the appliance's sealing key and its
fingerprint as its chain records them), one line per entry (position, previous hash,
hash and the body exactly as hashed), the seals of the exported positions, every key
rotation (the statement and its signatures, so that an auditor holding an older or a
newer key follows the change), the appliance's newest seal with its roster (the head of
every tenant chain it signed: this chain cut short or replaced shows against it), and
the chain's head at the time of export, then the tenant's arrivals of the range (every
file that reached a source, and what became of it; the checker ignores these lines). A
whole-chain export (no range) is marked ``complete``: the checker then also holds it to
its head and its seals.
``ingestd/archive/export_check.py`` checks it with nothing but Python and ``cryptography``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import IO, Any

from ingestd.archive import sealkey
from ingestd.archive.export_check import FORMAT, Rotation, fingerprint
from ingestd.db.database import Database
from ingestd.errors import ExitCode, IngestdError, OutputUnusable, as_whom

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FAR = datetime(9999, 1, 1, tzinfo=UTC)


class NoSuchChain(IngestdError):
    exit_code = ExitCode.not_found


def _line(out: IO[str], item: object) -> None:
    out.write(json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    out.write("\n")


def _rotation(r: Rotation) -> dict[str, str | None]:
    return {
        "from": r.old,
        "to": r.new,
        "statement": r.statement,
        "signature_from": r.signature_old,
        "signature_to": r.signature_new,
    }


def _arrival(row: Mapping[str, Any]) -> dict[str, Any]:
    """An arrival row as one export line's object (times in ISO 8601)."""
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items() if k != "id"}


def export_chain(
    db: Database, tenant: str, out: IO[str], *, since: date | None = None, until: date | None = None
) -> int:
    """Write the export of ``tenant``'s chain (entries made on ``since`` .. ``until``,
    both days included, UTC) to ``out``; the number of entries written."""
    lo = datetime.combine(since, time(), UTC) if since else EPOCH
    hi = datetime.combine(until, time(), UTC) + timedelta(days=1) if until else FAR
    written = 0
    # The seal runs' lock, shared: the appliance seal shipped is never older than a seal
    # of this chain made in the same run.
    with sealkey.seal_lock(db, shared=True), db.transaction() as tx:
        tx.run("snapshot_read_only")
        row = tx.one("audit_chain_of_tenant", {"tenant": tenant})
        if row is None:
            raise NoSuchChain(f"no tenant named {tenant!r}")
        chain = int(row["chain"])
        head = tx.one("audit_head_of", {"chain": chain})
        keys = sealkey.history(tx)
        public_key = keys.current
        _line(
            out,
            {
                "format": FORMAT,
                "tenant": tenant,
                "chain": chain,
                "from": since.isoformat() if since else None,
                "to": until.isoformat() if until else None,
                "complete": since is None and until is None,
                "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "public_key": public_key,
                "fingerprint": fingerprint(public_key) if public_key else None,
            },
        )
        seqs: set[int] = set()
        params = {"chain": chain, "from": lo, "to": hi}
        for e in tx.stream("audit_entries_between", params):
            seqs.add(int(e["seq"]))
            _line(out, {"entry": {k: e[k] for k in ("seq", "prev_hash", "hash", "body")}})
            written += 1
        fields = ("id", "seq", "head", "body", "signature", "public_key", "tsa_reply")
        for s in tx.all("audit_seals_of", {"chain": chain}):
            if int(s["seq"]) in seqs:
                _line(out, {"seal": {k: s[k] for k in fields}})
        for r in keys.rotations:
            _line(out, {"rotation": _rotation(r)})
        appliance = tx.one("audit_newest_appliance_seal")
        if appliance is not None:
            _line(out, {"appliance_seal": {k: appliance[k] for k in (*fields, "roster")}})
        if head is not None:
            _line(out, {"head": {"seq": int(head["seq"]), "hash": str(head["hash"])}})
        # The tenant's arrivals of the same days (every file that reached a source and what
        # became of it, migration 0017): records beside the chain, not part of it.
        for a in tx.stream("arrivals_export", {"tenant": tenant, "from": lo, "to": hi}):
            _line(out, {"arrival": _arrival(a)})
    return written


def write_export(
    db: Database, tenant: str, path: Path, *, since: date | None = None, until: date | None = None
) -> int:
    """``export_chain`` into a new file (never over an existing one), fsynced; a failed
    export leaves no half a file behind."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o640)
    except FileExistsError:
        raise OutputUnusable(f"{path} exists; it is not overwritten (choose a new name)") from None
    except OSError as exc:
        raise OutputUnusable(f"cannot write {path}: {exc.strerror}{as_whom(exc)}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            n = export_chain(db, tenant, out, since=since, until=until)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return n
