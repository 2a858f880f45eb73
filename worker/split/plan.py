"""From what the pages say to the children of a batch: pure, so every rule is a unit test.

Units: a page, or in ``duplex`` a sheet (front and back). A unit is a *separator* when a
page of it carries a separator code (mode ``separator``), or when every page of it is
blank and ``blank_sheets`` is on. Documents are the runs of units between separators; in
mode ``barcode-change`` a unit whose code differs from the current document's value
also starts a new document (and is its first page: it is content, not a sheet to drop).

ASN and tag codes belong to the document whose pages carry them; on a separator sheet
they belong to the document that follows it (that is where a person puts the sticker of
the next letter). What cannot be decided safely is never guessed: two ASNs in one
document, an ASN used twice, a document longer than ``max_pages`` (a separator was
missed) or a batch without a single content page end in ``attention`` with the reason,
and so does a barcode on which a configured pattern backtracks past its time limit
(``PatternTimeout``, naming the pattern and the page).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import regex

from ingestd.config.patterns import UserPattern, shorten
from ingestd.config.rules import REGEX_TIMEOUT
from ingestd.config.split import ASN_DIGITS, SplitMode, SplitPolicy
from worker.split.marks import Code, PageScan

_FIELD = regex.compile(r"\{(\d)\}")


def _expand(template: str, m: regex.Match[str]) -> str:
    """A tag template filled from a code's match: {0} the code, {1}.. its groups."""
    return _FIELD.sub(lambda f: m.group(int(f.group(1))) or "", template)


@dataclass(frozen=True, slots=True)
class Part:
    """One child: pages ``first``..``last`` of the batch (0-based, inclusive)."""

    first: int
    last: int
    asn: int | None = None
    tags: tuple[str, ...] = ()

    @property
    def pages(self) -> int:
        return self.last - self.first + 1

    def label(self) -> str:
        """Its pages as a person counts them ("pages 3-7", "page 3")."""
        if self.first == self.last:
            return f"page {self.first + 1}"
        return f"pages {self.first + 1}-{self.last + 1}"


@dataclass(frozen=True, slots=True)
class Plan:
    parts: tuple[Part, ...]
    page_count: int
    separators: tuple[int, ...] = ()  # pages (0-based) that were separator sheets
    # Why the batch needs an operator (nothing is split then), or None.
    attention: str | None = None

    @property
    def whole(self) -> bool:
        """One part spanning every page: the batch is one document, not split."""
        return len(self.parts) == 1 and self.parts[0].pages == self.page_count


@dataclass(slots=True)
class _Reader:
    """The policy's code classes, compiled once."""

    policy: SplitPolicy
    separator: UserPattern | None = None
    change: UserPattern | None = None
    asn: regex.Pattern[str] | None = None
    tags: list[tuple[UserPattern, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        p = self.policy
        where = "split policy's"
        if p.separator_regex:
            self.separator = UserPattern(f"{where} separator_regex", p.separator_regex)
        if p.change_regex:
            self.change = UserPattern(f"{where} change_regex", p.change_regex)
        if p.asn_prefix is not None:
            self.asn = regex.compile(regex.escape(p.asn_prefix) + rf"0*(\d{{1,{ASN_DIGITS}}})")
        self.tags = [
            (UserPattern(f"{where} tag_barcodes[{i}].pattern", t.pattern), t.tag)
            for i, t in enumerate(p.tag_barcodes)
        ]

    def asn_of(self, code: Code) -> int | None:
        # Our own pattern (a prefix and digits): it cannot backtrack.
        m = self.asn.fullmatch(code.text, timeout=REGEX_TIMEOUT) if self.asn else None
        return int(m.group(1)) if m else None

    def tag_of(self, page: int, code: Code) -> str | None:
        for pattern, template in self.tags:
            m = pattern.fullmatch(code.text, subject=_subject(page, code))
            if m:
                tag = _expand(template, m)
                tag = tag.strip()[:100]
                return tag or None
        return None

    def is_separator(self, page: int, code: Code) -> bool:
        if code.text in self.policy.separators:
            return True
        if self.separator is None:
            return False
        return self.separator.fullmatch(code.text, subject=_subject(page, code)) is not None

    def change_value(self, page: int, code: Code) -> str | None:
        if self.asn_of(code) is not None or self.tag_of(page, code) is not None:
            return None
        if self.change is not None and not self.change.fullmatch(
            code.text, subject=_subject(page, code)
        ):
            return None
        return f"{code.symbology}:{code.text}"


def _subject(page: int, code: Code) -> str:
    """A barcode as a reason names it (its text shortened and quoted, control characters
    escaped)."""
    return f"the {code.symbology} barcode {shorten(code.text)!r} on page {page + 1}"


@dataclass(slots=True)
class _Open:
    """The document being collected."""

    first: int
    last: int
    asns: dict[int, int] = field(default_factory=dict)  # ASN -> first page carrying it
    tags: set[str] = field(default_factory=set)
    value: str | None = None  # barcode-change: the value this document carries


def plan(scans: Sequence[PageScan], policy: SplitPolicy, page_count: int) -> Plan:
    """The children of a batch of ``page_count`` pages whose pages read as ``scans``."""
    if len(scans) != page_count or any(s.index != i for i, s in enumerate(scans)):
        raise ValueError("scans must list every page once, in order")
    reader = _Reader(policy)
    units = _units(page_count, policy.duplex)
    parts: list[_Open] = []
    separators: list[int] = []
    current: _Open | None = None
    pending_asns: dict[int, int] = {}
    pending_tags: set[str] = set()

    for unit in units:
        codes = [(i, c) for i in unit for c in scans[i].codes]
        asns = {a: i for i, c in reversed(codes) if (a := reader.asn_of(c)) is not None}
        tags = {t for i, c in codes if (t := reader.tag_of(i, c)) is not None}
        blank = policy.blank_sheets and all(scans[i].ink < policy.blank_threshold for i in unit)
        coded = policy.mode is SplitMode.separator and any(
            reader.is_separator(i, c) for i, c in codes
        )
        if coded or blank:
            separators.extend(unit)
            current = None
            if coded and policy.keep_separator:
                current = _Open(unit[0], unit[-1], dict(pending_asns), set(pending_tags))
                pending_asns.clear()
                pending_tags.clear()
                current.asns.update(asns)
                current.tags |= tags
                parts.append(current)
            else:
                pending_asns.update(asns)
                pending_tags |= tags
            continue
        value = None
        if policy.mode is SplitMode.barcode_change:
            value = next(
                (v for i, c in codes if (v := reader.change_value(i, c)) is not None), None
            )
        if current is not None and value is not None and current.value not in (None, value):
            current = None
        if current is None:
            current = _Open(unit[0], unit[-1], dict(pending_asns), set(pending_tags))
            pending_asns.clear()
            pending_tags.clear()
            parts.append(current)
        current.last = unit[-1]
        current.value = current.value or value
        for a, i in asns.items():
            current.asns.setdefault(a, i)
        current.tags |= tags

    found = tuple(separators)
    if not parts:
        return Plan(
            (), page_count, found, attention="the batch has no page that is not a separator"
        )
    if pending_asns:
        asn, page = next(iter(pending_asns.items()))
        return Plan(
            (),
            page_count,
            found,
            attention=f"ASN {asn} on page {page + 1} is on the last separator: "
            "no document follows it",
        )
    return _checked(parts, policy, page_count, found)


def _checked(
    parts: list[_Open], policy: SplitPolicy, page_count: int, found: tuple[int, ...]
) -> Plan:
    done: list[Part] = []
    owner: dict[int, Part] = {}
    for p in parts:
        part = Part(p.first, p.last, None, tuple(sorted(p.tags)))
        if len(p.asns) > 1:
            (a, i), (b, j) = sorted(p.asns.items(), key=lambda kv: kv[1])[:2]
            return _attention(
                page_count,
                found,
                f"the document on {part.label()} carries two ASNs: {a} (page {i + 1}) and "
                f"{b} (page {j + 1})",
            )
        if p.asns:
            asn = next(iter(p.asns))
            if asn in owner:
                return _attention(
                    page_count,
                    found,
                    f"ASN {asn} is on two documents of the batch: {owner[asn].label()} and "
                    f"{part.label()}",
                )
            part = Part(p.first, p.last, asn, part.tags)
            owner[asn] = part
        if part.pages > policy.max_pages:
            return _attention(
                page_count,
                found,
                f"the document on {part.label()} would have {part.pages} pages, more than "
                f"max_pages {policy.max_pages}: a separator sheet may be missing "
                f"({len(found)} separator page(s) found in {page_count} pages)",
            )
        done.append(part)
    return Plan(tuple(done), page_count, found)


def _attention(page_count: int, found: tuple[int, ...], reason: str) -> Plan:
    return Plan((), page_count, found, attention=reason)


def _units(page_count: int, duplex: bool) -> list[tuple[int, ...]]:
    if not duplex:
        return [(i,) for i in range(page_count)]
    # An odd count in duplex: the last sheet's back was not delivered; it is a sheet of one.
    return [tuple(range(i, min(i + 2, page_count))) for i in range(0, page_count, 2)]
