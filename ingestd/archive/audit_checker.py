"""Reading the audit trail back: the problems a verification reports (their kinds, the
anchor a report is judged against) and ``ChainChecker``, which replays every chain in
position order and finds what was edited, deleted, inserted or moved (audit_verify.py
says what each looks like)."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ingestd.archive.audit import GENESIS, SYSTEM_CHAIN, AuditKind, entry_hash
from ingestd.archive.export_check import Rotation


class AuditProblemKind(enum.StrEnum):
    edited = "edited"
    missing = "missing"
    moved = "moved"
    unlinked = "unlinked"
    head = "head"
    seal = "seal"
    document = "document"
    file = "file"
    key = "key"


@dataclass(frozen=True, slots=True)
class Anchor:
    """The public key seals are checked against, as the verifier holds it: ``key`` (hex)
    when it could be read, else ``why`` not; ``explicit`` when the user named the file
    (then an unusable one is a problem even for a trail without seals)."""

    path: str
    key: str | None = None
    why: str | None = None
    explicit: bool = False


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
    key: str | None = None  # the pinned key's fingerprint, when one was usable

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def key_only(self) -> bool:
        """Every problem is about the key to check with (exit 11, not 5)."""
        return bool(self.problems) and all(p.kind == AuditProblemKind.key for p in self.problems)

    def by_kind(self) -> dict[str, int]:
        return {k: sum(1 for p in self.problems if p.kind == k) for k in AuditProblemKind}


@dataclass(frozen=True, slots=True)
class Live:
    """An archived document as its chain knows it."""

    sha256: str
    path: str
    seq: int


@dataclass(slots=True)
class ChainState:
    chain: int
    tenant: str | None
    seq: int = 0
    hash: str = GENESIS
    live: dict[int, Live] = field(default_factory=dict)
    marked: dict[int, str] = field(default_factory=dict)  # hashes at the sealed positions
    opened: set[int] = field(default_factory=set)  # chains named by chain.opened (chain 0)
    # seal id -> (position, body_sha256) of its ``seal.made`` entry
    seal_entries: dict[int, tuple[int, str]] = field(default_factory=dict)
    first_key: tuple[int, str] | None = None  # chain 0's ``key.created``: position, key
    rotations: list[tuple[int, Rotation]] = field(default_factory=list)  # chain 0


class ChainChecker:
    """Feeds on a chain's entries in position order; collects problems and what the chain
    says is archived. Separate from the database so the export check and the bench can
    use the same rules on entries from elsewhere."""

    def __init__(
        self, problems: list[AuditProblem], marks: set[tuple[int, int]] | None = None
    ) -> None:
        self.problems = problems
        self.chains: dict[int, ChainState] = {}
        # The positions whose hashes are kept (the sealed ones): not all of a million.
        self.marks = marks or set()

    def _problem(self, kind: AuditProblemKind, c: ChainState, seq: int | None, detail: str) -> None:
        self.problems.append(AuditProblem(kind, c.chain, c.tenant, seq, detail))

    def feed(self, chain: int, row: Mapping[str, Any]) -> None:
        c = self.chains.get(chain)
        if c is None:
            c = self.chains[chain] = ChainState(chain, row.get("tenant"))
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

    def _columns(
        self, c: ChainState, seq: int, row: Mapping[str, Any], body: dict[str, Any]
    ) -> None:
        for column, key in (("kind", "kind"), ("tenant", "tenant"), ("document_id", "document")):
            if column in row and row[column] != body.get(key):
                self._problem(
                    AuditProblemKind.edited,
                    c,
                    seq,
                    f"its {column} column says {row[column]!r}, the entry says {body.get(key)!r}",
                )

    def _replay(self, c: ChainState, seq: int, body: dict[str, Any]) -> None:
        kind, doc, detail = body.get("kind"), body.get("document"), body.get("detail") or {}
        if kind == AuditKind.archived and isinstance(doc, int):
            c.live[doc] = Live(str(detail.get("sha256")), str(detail.get("path")), seq)
        elif kind == AuditKind.purged and isinstance(doc, int):
            c.live.pop(doc, None)
        elif kind in (AuditKind.tenant_deleted, AuditKind.tenant_reset):
            c.live.clear()
        elif kind == AuditKind.chain_opened and isinstance(detail.get("chain"), int):
            c.opened.add(int(detail["chain"]))
        elif kind == AuditKind.sealed and isinstance(detail.get("seal"), int):
            c.seal_entries[int(detail["seal"])] = (seq, str(detail.get("body_sha256")))
        elif c.chain == SYSTEM_CHAIN and kind == AuditKind.key_created and c.first_key is None:
            c.first_key = (seq, str(detail.get("public_key")))
        elif c.chain == SYSTEM_CHAIN and kind == AuditKind.key_rotated:
            c.rotations.append((seq, Rotation.from_detail(detail)))
        if body.get("tenant") and c.chain != SYSTEM_CHAIN:
            c.tenant = body["tenant"]

    def check_head(self, chain: int, tenant: str | None, seq: int, head_hash: str) -> None:
        c = self.chains.get(chain) or self.chains.setdefault(chain, ChainState(chain, tenant))
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
                c = self.chains.setdefault(chain, ChainState(chain, None))
                self._problem(
                    AuditProblemKind.missing,
                    c,
                    None,
                    "the whole chain is gone, though the appliance's chain recorded its opening",
                )
