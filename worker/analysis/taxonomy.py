"""Taxonomy auto-assignment: the tags, correspondent and document type a text earns.

Rules come from ``[[taxonomy]]`` in the config (``ingestd.config.rules.TaxonomyRule``)
and follow paperless-ngx: ``any``/``all`` whole words, ``exact`` phrase, ``regex`` and
``fuzzy``. Every matching tag rule adds its tag; for the correspondent and the document
type the first matching rule in config order wins.

OCR text and rules are compared after ``normalize``: Unicode compatibility forms
(ligatures "ﬁ", full-width letters, no-break spaces) folded, soft hyphens and zero-width
characters dropped, words hyphenated across a line break rejoined ("Rech-\\nnung"),
case folded, umlauts spelt out (ä -> ae, ß -> ss, so "Müller", "Mueller" and "MÜLLER"
are one name), other accents dropped (é -> e) and whitespace collapsed. A
``case_sensitive`` rule skips only the case folding. Regex rules see the text without
the folding (a regex author writes what the paper says), with runs of spaces collapsed
and line breaks kept; ``^``/``$`` match at line breaks, and the rule's ``case_sensitive``
decides whether case is ignored. They run on the ``regex`` package with ``re``'s semantics
(``ingestd.config.patterns.UserPattern``, compiled as validation compiles), because its
searches take a timeout: a pattern that backtracks catastrophically ("(a+)+$" against a
long run of "a") gives up after ``regex_timeout`` seconds (``analysis.regex_timeout``),
does not match, and logs ``taxonomy.regex_timeout`` naming the tenant and the rule; the
other rules still run. Our own fixed patterns stay on ``re``.

``fuzzy`` departs from paperless-ngx on purpose. paperless-ngx scores
``fuzz.partial_ratio`` of the match string against the whole text, which rates any
substring: "Telekom" scores 92 against "Telekolleg" and "Bau" 100 against "Gebäude".
Here the match string (k words) is scored with ``fuzz.ratio`` against every run of
k-1, k and k+1 words of the text (OCR splits and merges words: "Tele kom",
"DeutscheTelekom"). That keeps the whole-word meaning of the other algorithms, makes the
threshold read as "per cent of letters right", and costs one pass over the words of the
text in C (rapidfuzz ``process.extractOne``) per rule, linear in the text's length.

Compiling is done once per rule set: ``RuleSet(rules)`` compiles every rule, and
``match_rules`` keeps the last few rule sets it compiled, keyed by the rules themselves
(frozen models hash by value, so a reloaded but unchanged config hits the cache). One
document's text is normalised, split into words and into word runs once however many
rules read it; plain words of any/all rules are looked up in the set of the text's
words, so many rules do not mean many scans of a megabyte of text.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz, process

from ingestd import log
from ingestd.config.patterns import PatternTimeout, UserPattern, shorten
from ingestd.config.rules import REGEX_TIMEOUT, TaxonomyRule


@dataclass(frozen=True)
class Matches:
    tags: tuple[str, ...]  # in config order, each once
    correspondent: str | None
    document_type: str | None


# --- normalisation --------------------------------------------------------------------

_INVISIBLE = str.maketrans(dict.fromkeys("\u00ad\u200b\u200c\u200d\u2060\ufeff"))
# A letter, a hyphen ending the line, and a lower-case letter starting the next one.
_LINE_HYPHEN = re.compile(r"(?<=[^\W\d_])-[ \t]*\r?\n[ \t]*(?=[^\W\d_])")
_UMLAUTS = str.maketrans(
    {"ä": "ae", "ö": "oe", "ü": "ue", "ß": "ss", "Ä": "Ae", "Ö": "Oe", "Ü": "Ue", "ẞ": "SS"}
)
# Combining Diacritical Marks only: accents on Latin letters. Marks of other scripts
# (Devanagari vowel signs, ...) carry meaning and stay.
_ACCENTS = re.compile("[\u0300-\u036f]")
_WHITESPACE = re.compile(r"\s+")
_HORIZONTAL_SPACE = re.compile(r"[^\S\n]+")
_WORD = re.compile(r"\w+")


def _join_hyphenated(match: re.Match[str]) -> str:
    # "Rech-\nnung" is one word; before a capital the hyphen is part of the name
    # ("Müller-\nLüdenscheid", "E-\nMail").
    return "" if match.string[match.end()].islower() else "-"


def _prepare(text: str) -> str:
    """Compatibility forms folded, invisible characters dropped, line-end hyphens joined."""
    text = unicodedata.normalize("NFKC", text).translate(_INVISIBLE)
    return _LINE_HYPHEN.sub(_join_hyphenated, text)


def _fold(prepared: str, *, casefold: bool) -> str:
    """Umlauts spelt out, accents dropped, whitespace collapsed (and case folded)."""
    text = prepared.casefold() if casefold else prepared
    text = text.translate(_UMLAUTS)
    if not text.isascii():
        text = unicodedata.normalize("NFC", _ACCENTS.sub("", unicodedata.normalize("NFD", text)))
    return _WHITESPACE.sub(" ", text).strip()


def normalize(text: str) -> str:
    """``text`` as rules compare it: "MÜLLER ﬁle" -> "mueller file"."""
    return _fold(_prepare(text), casefold=True)


def split_terms(match: str) -> list[str]:
    """The words and "quoted phrases" of an any/all match string, in order."""
    terms = []
    for quoted, word in _TERM.findall(match):
        term = " ".join((quoted or word).split())
        if term:
            terms.append(term)
    return terms


_TERM = re.compile(r'"([^"]*)"|(\S+)')


# --- one text, read by many rules -----------------------------------------------------


class _Text:
    """The forms of one document's text that rules read, each made once when first needed."""

    def __init__(self, raw: str, regex_timeout: float = REGEX_TIMEOUT) -> None:
        self._raw = raw
        self.regex_timeout = regex_timeout  # seconds per search of a regex rule
        self._prepared: str | None = None
        self._regex: str | None = None
        self._folded: dict[bool, str] = {}
        self._words: dict[bool, list[str]] = {}
        self._word_sets: dict[bool, frozenset[str]] = {}
        self._windows: dict[tuple[bool, int], list[str]] = {}

    def prepared(self) -> str:
        if self._prepared is None:
            self._prepared = _prepare(self._raw)
        return self._prepared

    def for_regex(self) -> str:
        if self._regex is None:
            self._regex = _HORIZONTAL_SPACE.sub(" ", self.prepared())
        return self._regex

    def folded(self, casefold: bool) -> str:
        if casefold not in self._folded:
            self._folded[casefold] = _fold(self.prepared(), casefold=casefold)
        return self._folded[casefold]

    def words(self, casefold: bool) -> list[str]:
        """The words of the folded text, punctuation dropped."""
        if casefold not in self._words:
            self._words[casefold] = _WORD.findall(self.folded(casefold))
        return self._words[casefold]

    def word_set(self, casefold: bool) -> frozenset[str]:
        if casefold not in self._word_sets:
            self._word_sets[casefold] = frozenset(self.words(casefold))
        return self._word_sets[casefold]

    def windows(self, casefold: bool, size: int) -> list[str]:
        """Every run of ``size`` consecutive words, punctuation dropped."""
        key = (casefold, size)
        if key not in self._windows:
            words = self.words(casefold)
            if size == 1:
                self._windows[key] = words
            else:
                self._windows[key] = [
                    " ".join(words[i : i + size]) for i in range(len(words) - size + 1)
                ]
        return self._windows[key]


# --- compiled rules -------------------------------------------------------------------

_Test = Callable[[_Text], bool]


def _whole(term: str) -> str:
    # Not \b: a term may start or end with a non-word character ("C&A", "1&1", "Co.").
    return rf"(?<!\w){re.escape(term)}(?!\w)"


def _compile(rule: TaxonomyRule) -> _Test:
    casefold = not rule.case_sensitive

    def fold(s: str) -> str:
        return _fold(_prepare(s), casefold=casefold)

    if rule.algorithm == "regex":
        pattern = UserPattern(
            f"taxonomy {rule.kind} rule {rule.name!r}", rule.match, rule.case_sensitive
        )

        def search(text: _Text) -> bool:
            try:
                found = pattern.search(
                    text.for_regex(), subject="the document's text", timeout=text.regex_timeout
                )
                return found is not None
            except PatternTimeout:  # skipped, not a failure: the other rules still run
                log.get_logger(component="taxonomy").warning(
                    "taxonomy.regex_timeout",
                    tenant=rule.tenant,
                    kind=rule.kind,
                    rule=rule.name,
                    pattern=shorten(rule.match),
                    timeout=text.regex_timeout,
                )
                return False

        return search
    if rule.algorithm == "fuzzy":
        needle = " ".join(_WORD.findall(fold(rule.match)))
        size = needle.count(" ") + 1
        sizes = [s for s in (size - 1, size, size + 1) if s >= 1]
        cutoff = rule.fuzzy_threshold

        def fuzzy(text: _Text) -> bool:
            return any(
                process.extractOne(
                    needle, text.windows(casefold, s), scorer=fuzz.ratio, score_cutoff=cutoff
                )
                is not None
                for s in sizes
            )

        return fuzzy
    if rule.algorithm == "exact":
        phrase = re.compile(_whole(fold(rule.match)))
        return lambda text: phrase.search(text.folded(casefold)) is not None
    terms = [t for t in (fold(term) for term in split_terms(rule.match)) if t]
    # A plain word is found in the text's set of words: made once per text, so a hundred
    # rules do not scan a megabyte a hundred times. Phrases and words with punctuation
    # ("1&1") need a search.
    words = frozenset(t for t in terms if _WORD.fullmatch(t))
    others = [t for t in terms if t not in words]
    if rule.algorithm == "any":
        # One alternation: a single pass over the text however many phrases.
        alternatives = "|".join(re.escape(t) for t in others)
        anyword = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)") if others else None

        def any_term(text: _Text) -> bool:
            if not words.isdisjoint(text.word_set(casefold)):
                return True
            return anyword is not None and anyword.search(text.folded(casefold)) is not None

        return any_term
    each = [re.compile(_whole(t)) for t in others]

    def all_terms(text: _Text) -> bool:
        if not words <= text.word_set(casefold):
            return False
        return all(p.search(text.folded(casefold)) is not None for p in each)

    return all_terms


class RuleSet:
    """Taxonomy rules compiled once, matched against many texts."""

    def __init__(self, rules: Sequence[TaxonomyRule]) -> None:
        self._by_tenant: dict[str, list[tuple[TaxonomyRule, _Test]]] = {}
        for rule in rules:
            self._by_tenant.setdefault(rule.tenant, []).append((rule, _compile(rule)))

    def match(self, tenant: str, text: str, *, regex_timeout: float = REGEX_TIMEOUT) -> Matches:
        """What ``tenant``'s rules assign to a document with OCR ``text``.

        A regex rule whose search takes longer than ``regex_timeout`` seconds does not
        match (logged as ``taxonomy.regex_timeout``).
        """
        view = _Text(text, regex_timeout)
        tags: list[str] = []
        found: dict[str, str] = {}
        for rule, test in self._by_tenant.get(tenant, ()):
            if rule.kind == "tag":
                if rule.name in tags or not test(view):
                    continue
                tags.append(rule.name)
            elif rule.kind not in found and test(view):  # the first one wins
                found[rule.kind] = rule.name
        return Matches(tuple(tags), found.get("correspondent"), found.get("document_type"))


@functools.lru_cache(maxsize=4)
def _rule_set(rules: tuple[TaxonomyRule, ...]) -> RuleSet:
    return RuleSet(rules)


def match_rules(
    rules: Sequence[TaxonomyRule], tenant: str, text: str, *, regex_timeout: float = REGEX_TIMEOUT
) -> Matches:
    """What ``tenant``'s rules assign to ``text``; compiled rule sets are cached.

    ``regex_timeout``: seconds each regex rule may search (``analysis.regex_timeout``).
    """
    return _rule_set(tuple(rules)).match(tenant, text, regex_timeout=regex_timeout)
