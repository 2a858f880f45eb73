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
- an archived file missing, altered or left behind (``file``, from ``verify_archive``).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingestd.archive import seals
from ingestd.archive.audit import GENESIS, SYSTEM_CHAIN, AuditKind, entry_hash
from ingestd.archive.store import ArchiveStore
from ingestd.archive.verify import verify_archive
from ingestd.db.database import Database


class AuditProblemKind(enum.StrEnum):
    edited = "edited"
    missing = "missing"
    moved = "moved"
    unlinked = "unlinked"
    head = "head"
    seal = "seal"
    document = "document"
    file = "file"


@dataclass(frozen=True, slots=True)
class AuditProblem:
    kind: AuditProblemKind
    chain: int
    tenant: str | None
    seq: int | None  # the position in the chain it concerns (None: the chain as a whole)
    detail: str

    def line(self) -> str:
        where = f"chain {self.chain}" + (f" ({self.tenant})" if self.tenant else "")
        at = f" entry {self.seq}" if self.seq is not None else ""
        return f"{self.kind}: {where}{at}: {self.detail}"


@dataclass(slots=True)
class AuditReport:
    chains: int = 0
    entries: int = 0
    seals: int = 0
    documents: int = 0
    files: int = 0
    problems: list[AuditProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def by_kind(self) -> dict[str, int]:
        return {k: sum(1 for p in self.problems if p.kind == k) for k in AuditProblemKind}


@dataclass(frozen=True, slots=True)
class Live:
    """An archived document as its chain knows it."""

    sha256: str
    path: str
    seq: int


@dataclass(slots=True)
class _Chain:
    chain: int
    tenant: str | None
    seq: int = 0
    hash: str = GENESIS
    live: dict[int, Live] = field(default_factory=dict)
    marked: dict[int, str] = field(default_factory=dict)  # hashes at the sealed positions
    opened: set[int] = field(default_factory=set)  # chains named by chain.opened (chain 0)


class ChainChecker:
    """Feeds on a chain's entries in position order; collects problems and what the chain
    says is archived. Separate from the database so the export check and the bench can
    use the same rules on entries from elsewhere."""

    def __init__(
        self, problems: list[AuditProblem], marks: set[tuple[int, int]] | None = None
    ) -> None:
        self.problems = problems
        self.chains: dict[int, _Chain] = {}
        # The positions whose hashes are kept (the sealed ones): not all of a million.
        self.marks = marks or set()

    def _problem(self, kind: AuditProblemKind, c: _Chain, seq: int | None, detail: str) -> None:
        self.problems.append(AuditProblem(kind, c.chain, c.tenant, seq, detail))

    def feed(self, chain: int, row: Mapping[str, Any]) -> None:
        c = self.chains.get(chain)
        if c is None:
            c = self.chains[chain] = _Chain(chain, row.get("tenant"))
        seq, body_text = int(row["seq"]), str(row["body"])
        gap = seq != c.seq + 1
        if gap:
            span = f"{c.seq + 1}" if seq == c.seq + 2 else f"{c.seq + 1} to {seq - 1}"
            self._problem(
                AuditProblemKind.missing,
                c,
                c.seq + 1,
                f"entries {span} are missing (deleted from the trail)"
                if seq > c.seq + 1
                else f"position {seq} comes again after {c.seq}",
            )
        try:
            body = json.loads(body_text)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            self._problem(AuditProblemKind.edited, c, seq, "its body is not a JSON object")
            body = {}
        if body and (body.get("seq") != seq or body.get("chain") != chain):
            self._problem(
                AuditProblemKind.moved,
                c,
                seq,
                f"written as entry {body.get('seq')} of chain {body.get('chain')}: entries "
                "were inserted, reordered or renumbered here",
            )
        if entry_hash(str(row["prev_hash"]), body_text) != row["hash"]:
            self._problem(AuditProblemKind.edited, c, seq, "its content no longer matches its hash")
        elif not gap and row["prev_hash"] != c.hash:
            self._problem(
                AuditProblemKind.unlinked,
                c,
                seq,
                f"does not follow entry {c.seq}: an entry was inserted, replaced or moved here",
            )
        if body:
            self._columns(c, seq, row, body)
            self._replay(c, seq, body)
        c.seq, c.hash = seq, str(row["hash"])
        if (chain, seq) in self.marks:
            c.marked[seq] = c.hash

    def hash_at(self, chain: int, seq: int) -> str | None:
        c = self.chains.get(chain)
        return c.marked.get(seq) if c is not None else None

    def _columns(self, c: _Chain, seq: int, row: Mapping[str, Any], body: dict[str, Any]) -> None:
        for column, key in (("kind", "kind"), ("tenant", "tenant"), ("document_id", "document")):
            if column in row and row[column] != body.get(key):
                self._problem(
                    AuditProblemKind.edited,
                    c,
                    seq,
                    f"its {column} column says {row[column]!r}, the entry says {body.get(key)!r}",
                )

    def _replay(self, c: _Chain, seq: int, body: dict[str, Any]) -> None:
        kind, doc, detail = body.get("kind"), body.get("document"), body.get("detail") or {}
        if kind == AuditKind.archived and isinstance(doc, int):
            c.live[doc] = Live(str(detail.get("sha256")), str(detail.get("path")), seq)
        elif kind == AuditKind.purged and isinstance(doc, int):
            c.live.pop(doc, None)
        elif kind in (AuditKind.tenant_deleted, AuditKind.tenant_reset):
            c.live.clear()
        elif kind == AuditKind.chain_opened and isinstance(detail.get("chain"), int):
            c.opened.add(int(detail["chain"]))
        if body.get("tenant") and c.chain != SYSTEM_CHAIN:
            c.tenant = body["tenant"]

    def check_head(self, chain: int, tenant: str | None, seq: int, head_hash: str) -> None:
        c = self.chains.get(chain) or self.chains.setdefault(chain, _Chain(chain, tenant))
        if seq > c.seq:
            span = f"{c.seq + 1}" if seq == c.seq + 1 else f"{c.seq + 1} to {seq}"
            self._problem(
                AuditProblemKind.missing,
                c,
                c.seq + 1,
                f"entries {span} are missing: the chain's head names entry {seq}",
            )
        elif (seq, head_hash) != (c.seq, c.hash):
            self._problem(
                AuditProblemKind.head,
                c,
                seq,
                f"the chain's head names entry {seq} ({head_hash[:12]}), its last entry is "
                f"{c.seq} ({c.hash[:12]})",
            )

    def check_opened(self) -> None:
        system = self.chains.get(SYSTEM_CHAIN)
        for chain in sorted(system.opened if system else ()):
            if chain not in self.chains or self.chains[chain].seq == 0:
                c = self.chains.setdefault(chain, _Chain(chain, None))
                self._problem(
                    AuditProblemKind.missing,
                    c,
                    None,
                    "the whole chain is gone, though the appliance's chain recorded its opening",
                )


def check_documents(
    checker: ChainChecker, rows: Iterable[Mapping[str, Any]], report: AuditReport
) -> dict[int, int]:
    """Document rows against what their chains say is archived; returns document id ->
    the position of its ``document.archived`` entry (for the file problems)."""
    positions: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()

    def problem(c: _Chain, seq: int | None, detail: str) -> None:
        checker.problems.append(
            AuditProblem(AuditProblemKind.document, c.chain, c.tenant, seq, detail)
        )

    for row in rows:
        report.documents += 1
        chain, doc = int(row["tenant_id"]), int(row["id"])
        c = checker.chains.get(chain) or _Chain(chain, None)
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
    public_key: str | None = None,
) -> AuditReport:
    """The whole check; ``archive=None`` leaves out the files (the chain and rows only)."""
    report = AuditReport()
    with db.transaction() as tx:
        # One snapshot for heads, entries, seals and rows: intake goes on while we read,
        # and what it appends meanwhile is simply not looked at (not mistaken for damage).
        tx.run("snapshot_read_only")
        heads = tx.all("audit_chains")
        sealed = tx.all("audit_seals_all")
        checker = ChainChecker(report.problems, {(int(s["chain"]), int(s["seq"])) for s in sealed})
        for row in tx.stream("audit_entries_all"):
            report.entries += 1
            checker.feed(int(row["chain"]), row)
        for h in heads:
            checker.check_head(int(h["chain"]), h["tenant"], int(h["seq"]), str(h["hash"]))
        checker.check_opened()
        report.chains = len(checker.chains)
        for s in sealed:
            report.seals += 1
            _check_seal(checker, s, tsa_ca_file, public_key)
        positions = check_documents(checker, tx.stream("audit_documents"), report)
    if archive is not None:
        files = verify_archive(db, archive, rehash=rehash)
        report.files = files.checked
        for p in files.problems:
            seq = positions.get(p.document_id) if p.document_id is not None else None
            report.problems.append(
                AuditProblem(
                    AuditProblemKind.file,
                    _chain_of_path(p.path, checker),
                    p.path.split("/", 1)[0],
                    seq,
                    f"{p.kind}: {p.path}: {p.detail}",
                )
            )
    return report


def _chain_of_path(path: str, checker: ChainChecker) -> int:
    tenant = path.split("/", 1)[0]
    for c in checker.chains.values():
        if c.tenant == tenant and c.chain != SYSTEM_CHAIN:
            return c.chain
    return SYSTEM_CHAIN


def _check_seal(
    checker: ChainChecker, s: Mapping[str, Any], tsa_ca_file: Path | None, public_key: str | None
) -> None:
    chain, seq = int(s["chain"]), int(s["seq"])
    tenant = (checker.chains.get(chain) or _Chain(chain, None)).tenant
    reasons = [f": {r}" for r in seals.problems(s, tsa_ca_file=tsa_ca_file, public_key=public_key)]
    at = checker.hash_at(chain, seq)
    if at is None:
        reasons.append(f" names entry {seq}, which the chain no longer has")
    elif at != s["head"]:
        reasons.append(
            f" no longer matches: entry {seq} was {str(s['head'])[:12]} when it was sealed, "
            f"it is {at[:12]} now (the chain was rewritten)"
        )
    for reason in reasons:
        checker.problems.append(
            AuditProblem(AuditProblemKind.seal, chain, tenant, seq, f"seal {s['id']}{reason}")
        )


def iter_problem_lines(report: AuditReport) -> Iterator[str]:
    for p in report.problems:
        yield p.line()
