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

import enum
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingestd.archive import seals
from ingestd.archive.audit import GENESIS, SYSTEM_CHAIN, AuditKind, entry_hash
from ingestd.archive.export_check import Rotation, fingerprint, roster_problems, trusted_keys
from ingestd.archive.sealkey import seal_lock
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
class _Chain:
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
        elif kind == AuditKind.sealed and isinstance(detail.get("seal"), int):
            c.seal_entries[int(detail["seal"])] = (seq, str(detail.get("body_sha256")))
        elif c.chain == SYSTEM_CHAIN and kind == AuditKind.key_created and c.first_key is None:
            c.first_key = (seq, str(detail.get("public_key")))
        elif c.chain == SYSTEM_CHAIN and kind == AuditKind.key_rotated:
            c.rotations.append((seq, Rotation.from_detail(detail)))
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
        trusted = _check_key(checker, anchor, sealed, report)
        for s in sealed:
            report.seals += 1
            _check_seal(checker, s, tsa_ca_file, trusted)
        _check_seal_entries(checker, sealed)
        _check_roster(checker, newest, why, roster, sealed)
        if witness is not None:
            _check_witness(checker, witness, sealed)
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


def _system(checker: ChainChecker) -> _Chain:
    return checker.chains.get(SYSTEM_CHAIN) or _Chain(SYSTEM_CHAIN, None)


def _check_key(
    checker: ChainChecker, anchor: Anchor, sealed: Sequence[Mapping[str, Any]], report: AuditReport
) -> set[str] | None:
    """The keys whose seals count (None: no usable key), and the problems of the key
    history: every rotation well formed, the first key one the pinned key vouches for."""
    system = _system(checker)

    def problem(kind: AuditProblemKind, seq: int | None, detail: str) -> None:
        checker.problems.append(AuditProblem(kind, SYSTEM_CHAIN, None, seq, detail))

    for seq, r in system.rotations:
        for why in r.problems():
            problem(AuditProblemKind.key, seq, f"the rotation to {fingerprint(r.new)}: {why}")
    has_seals = bool(sealed) or system.first_key is not None
    if anchor.key is None:
        if has_seals or anchor.explicit:
            problem(
                AuditProblemKind.key,
                None,
                f"the seals cannot be checked: {anchor.why} (pass --public-key FILE: the "
                "appliance's seal-ed25519.pub from your own copy)",
            )
        return None
    report.key = fingerprint(anchor.key)
    trusted = trusted_keys(anchor.key, (r for _, r in system.rotations))
    if system.first_key is not None and system.first_key[1] not in trusted:
        seq, first = system.first_key
        problem(
            AuditProblemKind.key,
            seq,
            f"the appliance's first sealing key {fingerprint(first)} is not the pinned key "
            f"{report.key} and no signed rotation leads from one to the other",
        )
    # No seal yet is not a problem by itself: the key is made at the first `migrate`,
    # before any seal. Seals removed after a seal run show against the witness that run
    # left outside the database (_check_witness).
    return trusted


def _check_seal(
    checker: ChainChecker, s: Mapping[str, Any], tsa_ca_file: Path | None, trusted: set[str] | None
) -> None:
    chain, seq = int(s["chain"]), int(s["seq"])
    tenant = (checker.chains.get(chain) or _Chain(chain, None)).tenant
    reasons = [f": {r}" for r in seals.problems(s, tsa_ca_file=tsa_ca_file, trusted=trusted)]
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


def _check_seal_entries(checker: ChainChecker, sealed: Sequence[Mapping[str, Any]]) -> None:
    """Each seal row and its ``seal.made`` entry name each other (a seal row removed, or
    one slipped in without its entry)."""
    rows = {int(s["id"]): s for s in sealed}
    for c in checker.chains.values():
        for seal_id, (seq, body_sha) in sorted(c.seal_entries.items()):
            s = rows.get(seal_id)
            if s is None or int(s["chain"]) != c.chain:
                detail = f"names seal {seal_id}, which is gone"
            elif hashlib.sha256(str(s["body"]).encode()).hexdigest() != body_sha:
                detail = f"names seal {seal_id}, whose body is not the one it recorded"
            else:
                continue
            checker.problems.append(
                AuditProblem(AuditProblemKind.seal, c.chain, c.tenant, seq, detail)
            )
    for seal_id, s in rows.items():
        owner = checker.chains.get(int(s["chain"]))
        if owner is None or seal_id not in owner.seal_entries:
            checker.problems.append(
                AuditProblem(
                    AuditProblemKind.seal,
                    int(s["chain"]),
                    owner.tenant if owner else None,
                    int(s["seq"]),
                    f"seal {seal_id} has no seal.made entry in its chain (slipped in)",
                )
            )


def _check_witness(
    checker: ChainChecker, witness: Mapping[str, Any], sealed: Sequence[Mapping[str, Any]]
) -> None:
    """The appliance's seal the last seal run recorded outside the database must still
    be there, unchanged: cutting the appliance's chain back to an older seal shows."""
    path = witness.get("path")
    if "unreadable" in witness:
        detail = f"{path} cannot be read: {witness['unreadable']}"
    else:
        seal_id = witness.get("seal")
        row = next((s for s in sealed if s["id"] == seal_id and int(s["chain"]) == 0), None)
        body_sha = hashlib.sha256(str(row["body"]).encode()).hexdigest() if row else None
        if row is not None and body_sha == witness.get("body_sha256"):
            return
        state = "is gone" if row is None else "is not the seal it recorded"
        detail = (
            f"the appliance's seal {seal_id} (entry {witness.get('seq')}), recorded in {path} "
            f"as the newest, {state}: the appliance's chain lost its newest seals, or the "
            "database was restored from a backup older than the state directory"
        )
    seq = witness.get("seq")
    checker.problems.append(
        AuditProblem(
            AuditProblemKind.seal, SYSTEM_CHAIN, None, seq if isinstance(seq, int) else None, detail
        )
    )


def _check_roster(
    checker: ChainChecker,
    newest: Mapping[str, Any] | None,
    why: list[str],
    roster: dict[int, tuple[int, str]],
    sealed: Sequence[Mapping[str, Any]],
) -> None:
    """The appliance's newest seal lists every tenant chain's head at its moment: each
    listed chain must still be there, at least that long, with that hash there; every
    tenant seal made before it must be listed (one made after it means the appliance
    chain lost its newest seals)."""
    latest: dict[int, Mapping[str, Any]] = {}
    for s in sealed:
        chain = int(s["chain"])
        if chain != SYSTEM_CHAIN and json.loads(str(s["body"])).get("format") == seals.FORMAT:
            latest[chain] = s  # sealed is ordered by chain, id: the last one wins
    if newest is None:
        for chain, s in sorted(latest.items()):
            c = checker.chains.get(chain) or _Chain(chain, None)
            detail = (
                f"seal {s['id']} is listed by no seal of the appliance's chain: its seals were "
                "removed, or a seal run did not finish (run `ingestd audit seal`)"
            )
            checker.problems.append(
                AuditProblem(AuditProblemKind.seal, chain, c.tenant, int(s["seq"]), detail)
            )
        return
    name = f"the appliance's seal {newest['id']}"
    for w in why:
        checker.problems.append(
            AuditProblem(
                AuditProblemKind.seal, SYSTEM_CHAIN, None, int(newest["seq"]), f"{name}: {w}"
            )
        )
    for chain, (seq, head) in sorted(roster.items()):
        c = checker.chains.setdefault(chain, _Chain(chain, None))
        if c.seq == 0:
            detail = f"the whole chain is gone, though {name} lists it up to entry {seq}"
            checker.problems.append(
                AuditProblem(AuditProblemKind.missing, chain, None, None, detail)
            )
        elif c.seq < seq:
            detail = f"entries {c.seq + 1} to {seq} are gone: {name} lists the chain up to {seq}"
            checker.problems.append(
                AuditProblem(AuditProblemKind.missing, chain, c.tenant, c.seq + 1, detail)
            )
        elif checker.hash_at(chain, seq) != head:
            detail = f"{name} names another hash here (the chain was rewritten)"
            checker.problems.append(
                AuditProblem(AuditProblemKind.seal, chain, c.tenant, seq, detail)
            )
    if why:
        return
    newest_id = int(newest["id"])
    for chain, s in sorted(latest.items()):
        c = checker.chains.get(chain) or _Chain(chain, None)
        listed = roster.get(chain)
        if int(s["id"]) > newest_id:
            detail = (
                f"seal {s['id']} is newer than {name}, the appliance's newest: the appliance's "
                "chain lost its newest seals, or a seal run did not finish (run `ingestd audit "
                "seal`)"
            )
        elif listed is None or listed[0] <= int(s["seq"]):
            detail = f"seal {s['id']} was made before {name}, which does not list it"
        else:
            continue
        checker.problems.append(
            AuditProblem(AuditProblemKind.seal, chain, c.tenant, int(s["seq"]), detail)
        )


def iter_problem_lines(report: AuditReport) -> Iterator[str]:
    for p in report.problems:
        yield p.line()
