"""Taxonomy rules: each matching algorithm, normalisation, tenant scoping, rule order."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError
from structlog.testing import capture_logs

from ingestd.config import rules as config_rules
from ingestd.config import settings as config
from ingestd.config.load import parse_config
from ingestd.config.rules import TaxonomyRule
from ingestd.errors import ConfigError
from worker.analysis.taxonomy import Matches, RuleSet, match_rules, normalize, split_terms


def rule(match: str, algorithm: str = "any", **kw: Any) -> TaxonomyRule:
    fields: dict[str, Any] = {"tenant": "acme", "kind": "tag", "name": "T"}
    fields.update(kw, match=match, algorithm=algorithm)
    return TaxonomyRule.model_validate(fields)


def hits(r: TaxonomyRule, text: str) -> bool:
    return match_rules([r], "acme", text) != Matches((), None, None)


def hits_within(r: TaxonomyRule, text: str, regex_timeout: float) -> bool:
    return match_rules([r], "acme", text, regex_timeout=regex_timeout) != Matches((), None, None)


# --- normalisation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        pytest.param("Müller", "mueller", id="umlaut"),
        pytest.param("MÜLLER", "mueller", id="capital-umlaut"),
        pytest.param("Mueller", "mueller", id="spelt-out"),
        pytest.param("Mu\u0308ller", "mueller", id="nfd-from-macos"),
        pytest.param("Straße STRASSE", "strasse strasse", id="sharp-s"),
        pytest.param("Geschäftsführer Öl", "geschaeftsfuehrer oel", id="ae-oe"),
        pytest.param("Oﬃce ﬁle", "office file", id="ligatures"),
        pytest.param("Café Société", "cafe societe", id="accents"),
        pytest.param("Tele\u00adkom\u200b", "telekom", id="soft-hyphen-zero-width"),
        pytest.param("  a \n\t b\u00a0c ", "a b c", id="whitespace"),
        pytest.param("Rech-\nnung", "rechnung", id="line-end-hyphen"),
        pytest.param("Müller-\nLüdenscheid", "mueller-luedenscheid", id="hyphen-before-capital"),
    ],
)
def test_normalize(text: str, normal: str) -> None:
    """Umlauts, case, ligatures, accents, invisible characters and whitespace are folded."""
    assert normalize(text) == normal


def test_split_terms_keeps_quoted_phrases() -> None:
    """Quoted phrases are one term; runs of spaces inside them collapse."""
    assert split_terms('  some  words "with   quotes " and ""') == [
        "some",
        "words",
        "with quotes",
        "and",
    ]


# --- algorithms -----------------------------------------------------------------------


def test_any_matches_one_whole_word() -> None:
    """any: one of the words suffices, but only as a whole word."""
    r = rule("Strom Gas Wasser")
    assert hits(r, "Ihre Gas-Abrechnung")
    assert not hits(r, "Gasthaus zur Post")  # "Gas" inside a word


def test_any_accepts_quoted_phrase() -> None:
    """A quoted phrase must appear as a phrase."""
    r = rule('"Deutsche Bahn"')
    assert hits(r, "Ihre deutsche\nBahn Fahrkarte")
    assert not hits(r, "Deutsche Post, Bahn")


def test_any_mixes_plain_words_and_punctuated_names() -> None:
    """Words with punctuation ("C&A") match as whole words next to plain ones."""
    r = rule('"C&A" Primark')
    assert hits(r, "Kassenbon C&A Mode")
    assert hits(r, "PRIMARK Berlin")
    assert not hits(r, "CC&AA")


def test_all_needs_every_word() -> None:
    """all: every word must appear (anywhere, as a whole word)."""
    r = rule("Rechnung Telekom", "all")
    assert hits(r, "Telekom ... Ihre Rechnung")
    assert not hits(r, "Telekom ... Ihre Rechnungen")


def test_exact_needs_the_phrase() -> None:
    """exact: the whole match string as a phrase of whole words."""
    r = rule("Telekom Deutschland", "exact")
    assert hits(r, "Die TELEKOM  Deutschland GmbH")
    assert not hits(r, "Deutschland Telekom")
    assert not hits(r, "Telekom Deutschlands")


def test_words_with_punctuation_at_the_edges() -> None:
    """Whole words work for names that start or end with punctuation ("C&A", "1&1")."""
    assert hits(rule("1&1", "exact"), "Rechnung von 1&1 Telecom")
    assert not hits(rule("1&1", "exact"), "Rechnung 11&11")


@pytest.mark.parametrize("algorithm", ["any", "all", "exact"])
@pytest.mark.parametrize(
    ("match", "text"),
    [("Müller", "MUELLER GmbH"), ("Mueller", "Müller GmbH"), ("MÜLLER", "müller gmbh")],
)
def test_umlaut_variants_match_each_other(algorithm: str, match: str, text: str) -> None:
    """ä and ae, upper and lower case are the same letters for every word algorithm."""
    assert hits(rule(match, algorithm), text)


def test_case_sensitive_rule() -> None:
    """case_sensitive: "IT" is not "it" (umlauts are still folded)."""
    r = rule("IT", case_sensitive=True)
    assert hits(r, "Abteilung IT")
    assert not hits(r, "was it good")
    assert hits(rule("Müller", case_sensitive=True), "Herr Mueller")
    assert not hits(rule("Müller", case_sensitive=True), "MUELLER")


def test_regex_searches_the_unfolded_text() -> None:
    """regex: Python re.search on the text, ignoring case unless case_sensitive."""
    r = rule(r"Kunden-?Nr\.?:?\s*\d{6}", "regex")
    assert hits(r, "kundennr. 123456")
    assert hits(r, "Kunden-Nr.:\n123456")
    assert not hits(r, "Kundennr. 12345")
    assert not hits(rule("kundennr", "regex", case_sensitive=True), "Kundennr")
    assert hits(rule("Müller", "regex"), "MÜLLER")


def test_regex_anchors_match_at_line_breaks() -> None:
    """^ and $ are line anchors: OCR text is made of lines."""
    r = rule(r"^Betreff: Mahnung$", "regex")
    assert hits(r, "Bonn\nBetreff:  Mahnung\nText")
    assert not hits(r, "Bonn Betreff: Mahnung Text")


def test_catastrophic_regex_times_out_and_the_other_rules_still_match() -> None:
    """A backtracking regex gives up after regex_timeout: no match, a warning, others run."""
    rules = [
        rule(r"(a+)+$", "regex", name="Bad"),  # cubic at best: hours on this text
        rule("Rechnung", name="Good"),
        rule(r"^Betreff: Rechnung$", "regex", kind="document_type", name="Brief"),
    ]
    text = "Betreff: Rechnung\n" + "a" * 100_000 + "b"
    with capture_logs() as logs:
        found = match_rules(rules, "acme", text, regex_timeout=0.05)
    assert found == Matches(("Good",), None, "Brief")
    [line] = [e for e in logs if e["event"] == "taxonomy.regex_timeout"]
    assert line["log_level"] == "warning"
    assert line["tenant"] == "acme" and line["kind"] == "tag" and line["rule"] == "Bad"
    assert line["pattern"] == "(a+)+$" and line["timeout"] == 0.05


def test_regex_timeout_log_line_shortens_a_long_pattern() -> None:
    """A long pattern is cut in the warning so that the log line stays readable."""
    pattern = r"(a+)+$" + "|x" * 300
    with capture_logs() as logs:
        assert not hits_within(rule(pattern, "regex"), "a" * 100_000 + "b", 0.05)
    [line] = [e for e in logs if e["event"] == "taxonomy.regex_timeout"]
    assert len(line["pattern"]) == 100 and line["pattern"].endswith("…")
    assert pattern.startswith(line["pattern"][:-1])


def test_regex_with_a_small_timeout_still_matches_ignoring_case() -> None:
    """An ordinary regex is unaffected by the timeout: it matches, ignoring case, no warning."""
    with capture_logs() as logs:
        assert hits_within(rule(r"Kunden-?Nr\.?:?\s*\d{6}", "regex"), "KUNDENNR: 123456", 0.05)
        assert hits_within(rule("müller", "regex"), "Herrn MÜLLER", 0.05)
        assert not hits_within(rule("kundennr", "regex", case_sensitive=True), "Kundennr", 0.05)
    assert logs == []


def test_regex_rules_accept_what_validation_accepts() -> None:
    """Validation and matching use the same engine: syntax only `regex` knows works in both."""
    assert hits(rule(r"\p{Lu}{3}-\d+", "regex", case_sensitive=True), "Akte ÄBC-42")
    assert not hits(rule(r"\p{Lu}{3}-\d+", "regex", case_sensitive=True), "Akte äbc-42")


def test_fuzzy_forgives_one_typo_at_the_default_threshold() -> None:
    """fuzzy (threshold 85 by default): "Telecom" finds "Telekom"; unrelated words do not."""
    r = rule("Telekom", "fuzzy")
    assert r.fuzzy_threshold == 85
    assert hits(r, "Ihre Rechnung der Telecom AG")  # one letter wrong: 85.7
    assert hits(r, "Rechnung TELEKOM")
    assert hits(r, "Tele kom Deutschland")  # OCR split the word
    assert not hits(r, "Ihr Telefon")  # 71
    assert not hits(r, "Telekolleg im Fernsehen")  # a prefix is not the word (partial: 92)
    assert not hits(r, "")


def test_fuzzy_phrase_and_merged_words() -> None:
    """A phrase is compared with runs of words, including OCR-merged ones."""
    r = rule("Deutsche Rentenversicherung", "fuzzy")
    assert hits(r, "Absender: DeutscheRentenversicherung Bund")
    assert hits(r, "Deutsche Rentenversicherumg Bund")
    assert not hits(r, "Deutsche Bahn")


def test_fuzzy_threshold_is_configurable() -> None:
    """A stricter threshold refuses the typo the default forgives."""
    assert not hits(rule("Telekom", "fuzzy", fuzzy_threshold=90), "Telecom")
    assert hits(rule("Telekom", "fuzzy", fuzzy_threshold=100), "TELEKOM.")


# --- rule sets ------------------------------------------------------------------------

RULES = [
    TaxonomyRule(tenant="acme", kind="tag", name="Telefon", match="Mobilfunk Festnetz"),
    TaxonomyRule(tenant="acme", kind="tag", name="Rechnung", match="Rechnung", algorithm="all"),
    TaxonomyRule(tenant="acme", kind="tag", name="Telefon", match="Rufnummer"),
    TaxonomyRule(tenant="acme", kind="correspondent", name="Telekom", match="Telekom"),
    TaxonomyRule(tenant="acme", kind="correspondent", name="Vodafone", match="Rechnung"),
    TaxonomyRule(tenant="acme", kind="document_type", name="Rechnung", match="Rechnung"),
    TaxonomyRule(tenant="other", kind="tag", name="Fremd", match="Telekom"),
]
TEXT = "Telekom Deutschland GmbH\nIhre Rechnung für Mobilfunk und Rufnummer 0171"


def test_all_tags_first_correspondent_and_type() -> None:
    """Every matching tag once in config order; the first matching correspondent wins."""
    assert match_rules(RULES, "acme", TEXT) == Matches(
        tags=("Telefon", "Rechnung"), correspondent="Telekom", document_type="Rechnung"
    )


def test_rules_are_scoped_to_their_tenant() -> None:
    """Another tenant's rules never apply; a tenant without rules gets nothing."""
    assert match_rules(RULES, "other", TEXT) == Matches(("Fremd",), None, None)
    assert match_rules(RULES, "nobody", TEXT) == Matches((), None, None)


def test_rule_set_compiles_once_and_matches_many() -> None:
    """A RuleSet is reusable; match_rules caches the compiled set of equal rules."""
    rules = RuleSet(RULES)
    assert rules.match("acme", "Festnetz").tags == ("Telefon",)
    assert rules.match("acme", "nichts").tags == ()
    copy = [TaxonomyRule.model_validate(r.model_dump()) for r in RULES]
    assert match_rules(copy, "acme", TEXT) == match_rules(RULES, "acme", TEXT)


def test_megabyte_of_text_stays_fast() -> None:
    """A megabyte of OCR text against every algorithm completes (linear per rule)."""
    rng = random.Random(7)
    words = ["Rechnung", "Betrag", "Summe", "Zahlung", "Kündigung", "12,50", "EUR"]
    text = " ".join(rng.choice(words) for _ in range(130_000))
    rules = [
        rule("Telekom", "fuzzy"),
        rule("Deutsche Telekom AG", "fuzzy"),
        rule("Strom Gas Wasser"),
        rule("Telekom Kündigung", "all"),
        rule("Telekom Deutschland", "exact"),
        rule(r"Kunden-?Nr\.?\s*\d+", "regex"),
    ]
    # Linear per rule: a quadratic matcher would not finish this within the CI run.
    assert match_rules(rules, "acme", text) == Matches((), None, None)


# --- validation -----------------------------------------------------------------------


def test_broken_regex_is_refused_naming_the_rule() -> None:
    """A regex that does not compile is a validation error naming the rule and the regex."""
    with pytest.raises(ValidationError) as exc:
        rule("Tele(kom", "regex", kind="correspondent", name="Telekom")
    [error] = exc.value.errors()
    assert error["loc"] == ("match",)
    assert "correspondent rule 'Telekom'" in error["msg"] and "does not compile" in error["msg"]


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param("a[", id="unterminated-set"),
        pytest.param("a{99999999999}", id="huge-repeat"),
        pytest.param("(?V1)[[a-z]--[aeiou]]", id="version1-flag"),
        pytest.param("(" * 400 + "a" + ")" * 400, id="deep-nesting"),
    ],
)
def test_regex_that_the_matcher_cannot_compile_is_refused(pattern: str) -> None:
    """Every way compiling with `regex` (VERSION0) fails is a clear validation error."""
    with pytest.raises(ValidationError, match="regex does not compile"):
        rule(pattern, "regex")


def test_broken_regex_is_a_config_problem_with_key_path() -> None:
    """check-config reports the broken regex with its key path."""
    bad = {"tenant": "acme", "kind": "tag", "name": "X", "match": "a[", "algorithm": "regex"}
    with pytest.raises(ConfigError) as exc:
        parse_config({"taxonomy": [bad]})
    assert any(p.startswith("taxonomy[0].match:") and "'X'" in p for p in exc.value.problems)


@pytest.mark.parametrize(
    ("match", "algorithm", "message"),
    [
        pytest.param("", "any", "must not be empty", id="empty"),
        pytest.param("   ", "exact", "must not be empty", id="blank"),
        pytest.param("Telekom|", "regex", "empty string", id="regex-matches-everything"),
        pytest.param("!!!", "fuzzy", "no letters or digits", id="no-words"),
    ],
)
def test_useless_match_strings_are_refused(match: str, algorithm: str, message: str) -> None:
    """A match that could never, or would always, match is refused."""
    with pytest.raises(ValidationError, match=message):
        rule(match, algorithm)


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"name": ""}, id="empty-name"),
        pytest.param({"name": "x" * 101}, id="long-name"),
        pytest.param({"name": "Telekom "}, id="name-with-trailing-space"),
        pytest.param({"tenant": "Acme Corp"}, id="bad-tenant"),
        pytest.param({"kind": "label"}, id="bad-kind"),
        pytest.param({"algorithm": "auto"}, id="bad-algorithm"),
        pytest.param({"fuzzy_threshold": 101}, id="threshold-over-100"),
        pytest.param({"matches": "x"}, id="unknown-key"),
    ],
)
def test_bad_fields_are_refused(fields: dict[str, Any]) -> None:
    """Names, tenants, kinds, algorithms and thresholds are checked; unknown keys refused."""
    data: dict[str, Any] = {"tenant": "acme", "kind": "tag", "name": "T", "match": "x"}
    with pytest.raises(ValidationError):
        TaxonomyRule.model_validate(data | fields)


def test_tenant_pattern_matches_the_config_one() -> None:
    """config_rules cannot import ingestd.config.settings (a cycle), so its copy is pinned here."""
    assert config_rules.TENANT_NAME == config.TENANT_NAME
