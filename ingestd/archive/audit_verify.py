"""``ingestd audit verify``: recompute every chain, check its seals, check it against the
document rows and the archived files; each problem names its chain and position.

What each class of tampering looks like here (a chain is read in position order):
- an entry edited in place: its hash no longer covers its body (``edited``), or its
  columns no longer say what its body says;
- an entry deleted: a gap in the positions (``missing``); at the end of the chain, the
  head row or a seal still names it;
- an entry inserted or entries reordered: a body written for another position, or an
  entry that does not follow the one before it (``moved`` / ``unlinked``);
- the head row changed: it no longer names the last entry (``head``);
- a seal that no longer matches (the chain was rewritten after it was signed), a bad
  signature or timestamp (``seal``);
- a document row without its ``document.archived`` entry, or an archived document gone
  from the database without a purge or tenant deletion entry (``document``);
- an archived file missing, altered or left behind (``file``, from ``verify_archive``);
- a seal signed by a key the verifier's pinned public key does not vouch for, a seal
  without its ``seal.made`` entry (or the reverse), a tenant chain missing or cut short
  against the roster of the appliance's newest seal, a tenant seal no appliance seal
  lists (``seal``, ``missing``);
- no usable public key to check the seals against, or a key history that does not lead
  to it (``key``): never a silently skipped check.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ingestd.archive.audit_checker import (
    Anchor,
    AuditProblem,
    AuditProblemKind,
    AuditReport,
    ChainChecker,
    ChainState,
)
from ingestd.archive.audit_seal_checks import (
    chain_of_path,
    check_key,
    check_roster,
    check_seal,
    check_seal_entries,
    check_witness,
)
from ingestd.archive.export_check import roster_problems
from ingestd.archive.sealkey import seal_lock
from ingestd.archive.store import ArchiveStore
from ingestd.archive.verify import verify_archive
from ingestd.db.database import Database


def check_documents(
    checker: ChainChecker, rows: Iterable[Mapping[str, Any]], report: AuditReport
) -> dict[int, int]:
    """Document rows against what their chains say is archived; returns document id ->
    the position of its ``document.archived`` entry (for the file problems)."""
    positions: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()

    def problem(c: ChainState, seq: int | None, detail: str) -> None:
        checker.problems.append(
            AuditProblem(AuditProblemKind.document, c.chain, c.tenant, seq, detail)
        )

    for row in rows:
        report.documents += 1
        chain, doc = int(row["tenant_id"]), int(row["id"])
        c = checker.chains.get(chain) or ChainState(chain, None)
        live = c.live.get(doc)
        seen.add((chain, doc))
        if live is None:
            problem(
                c,
                None,
                f"document {doc} ({row['archive_path']}) has no document.archived entry: "
                "it was recorded behind the trail's back",
            )
            continue
        positions[doc] = live.seq
        if (live.sha256, live.path) != (row["sha256"], row["archive_path"]):
            problem(
                c,
                live.seq,
                f"document {doc}: its row says {row['archive_path']} sha256 "
                f"{str(row['sha256'])[:12]}, the entry says {live.path} {live.sha256[:12]}",
            )
    for chain, c in checker.chains.items():
        for doc, live in c.live.items():
            if (chain, doc) not in seen:
                problem(
                    c,
                    live.seq,
                    f"document {doc} ({live.path}) is gone from the database without a "
                    "purge or tenant deletion entry",
                )
    return positions


def verify_audit(
    db: Database,
    archive: ArchiveStore | None,
    *,
    rehash: bool = True,
    tsa_ca_file: Path | None = None,
    anchor: Anchor | None = None,
    witness: Mapping[str, Any] | None = None,
) -> AuditReport:
    """The whole check; ``archive=None`` leaves out the files (the chain and rows only).
    ``anchor``: the public key the seals are checked against (None: no key was given,
    which is a ``key`` problem as soon as the trail has a seal). ``witness``: the
    appliance's newest seal as the sealing host's ``last-seal.json`` records it."""
    report = AuditReport()
    anchor = anchor or Anchor(path="(none given)", why="no public key was given")
    # The seal runs' lock, shared: the snapshot never falls between a run's tenant seals
    # and the appliance seal that lists them.
    with seal_lock(db, shared=True), db.transaction() as tx:
        # One snapshot for heads, entries, seals and rows: intake goes on while we read,
        # and what it appends meanwhile is simply not looked at (not mistaken for damage).
        tx.run("snapshot_read_only")
        heads = tx.all("audit_chains")
        sealed = tx.all("audit_seals_all")
        newest = tx.one("audit_newest_appliance_seal")
        why, roster = roster_problems(dict(newest)) if newest is not None else ([], {})
        marks = {(int(s["chain"]), int(s["seq"])) for s in sealed}
        marks |= {(chain, seq) for chain, (seq, _) in roster.items()}
        checker = ChainChecker(report.problems, marks)
        for row in tx.stream("audit_entries_all"):
            report.entries += 1
            checker.feed(int(row["chain"]), row)
        for h in heads:
            checker.check_head(int(h["chain"]), h["tenant"], int(h["seq"]), str(h["hash"]))
        checker.check_opened()
        report.chains = len(checker.chains)
        trusted = check_key(checker, anchor, sealed, report)
        for s in sealed:
            report.seals += 1
            check_seal(checker, s, tsa_ca_file, trusted)
        check_seal_entries(checker, sealed)
        check_roster(checker, newest, why, roster, sealed)
        if witness is not None:
            check_witness(checker, witness, sealed)
        positions = check_documents(checker, tx.stream("audit_documents"), report)
    if archive is not None:
        files = verify_archive(db, archive, rehash=rehash)
        report.files = files.checked
        for p in files.problems:
            seq = positions.get(p.document_id) if p.document_id is not None else None
            report.problems.append(
                AuditProblem(
                    AuditProblemKind.file,
                    chain_of_path(p.path, checker),
                    p.path.split("/", 1)[0],
                    seq,
                    f"{p.kind}: {p.path}: {p.detail}",
                )
            )
    return report


def iter_problem_lines(report: AuditReport) -> Iterator[str]:
    for p in report.problems:
        yield p.line()
