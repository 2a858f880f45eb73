"""Planning a batch's children from what its pages say (worker/split/plan.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ingestd.config.split import SplitPolicy, Symbology
from worker.split.marks import Code, PageScan
from worker.split.plan import Part, plan

TEXT = 6.0  # ink of a letter page
BLANK = 0.01


def pages(*spec: str | tuple[str, ...] | float) -> list[PageScan]:
    """A batch: "" a letter page, "-" a blank one, "X" or ("X", "Y") codes on a page."""
    out = []
    for i, s in enumerate(spec):
        if s == "-":
            out.append(PageScan(i, (), BLANK))
            continue
        texts = (s,) if isinstance(s, str) and s else (s if isinstance(s, tuple) else ())
        codes = tuple(Code(Symbology.code39, str(t)) for t in texts)
        out.append(PageScan(i, codes, TEXT))
    return out


def policy(**kw: Any) -> SplitPolicy:
    return SplitPolicy.model_validate(kw)


def ranges(p: Any) -> list[tuple[int, int]]:
    return [(x.first + 1, x.last + 1) for x in p.parts]


def run(spec: list[PageScan], **kw: Any) -> Any:
    return plan(spec, policy(**kw), len(spec))


def test_separator_sheets_start_new_documents_and_are_dropped() -> None:
    """PATCHT pages split the batch and appear in no child."""
    p = run(pages("", "", "PATCHT", "", "PATCHT", "", ""))
    assert ranges(p) == [(1, 2), (4, 4), (6, 7)]
    assert p.separators == (2, 4)
    assert p.attention is None and not p.whole


def test_keep_separator_makes_the_sheet_the_first_page_of_the_next_document() -> None:
    """keep_separator: the separator page leads the document after it."""
    p = run(pages("", "PATCHT", "", ""), keep_separator=True)
    assert ranges(p) == [(1, 1), (2, 4)]


def test_a_leading_separator_and_two_in_a_row_make_no_empty_child() -> None:
    """Separators at the start, back to back, or at the end leave no empty document."""
    p = run(pages("PATCHT", "", "PATCHT", "PATCHT", "", "PATCHT"))
    assert ranges(p) == [(2, 2), (5, 5)]


def test_unrelated_barcodes_never_split() -> None:
    """A letter's own Code 128 (an invoice number) is not a separator."""
    p = run(pages("", "INV-2026-0042", "", "PATCHT", ""))
    assert ranges(p) == [(1, 3), (5, 5)]


def test_separator_regex_and_exact_values() -> None:
    """Separators match exactly or by full-match regex; a longer text is not one."""
    p = run(
        pages("", "SEP-17", "", "PATCHTX", "", "NEXT", ""),
        separators=["NEXT"],
        separator_regex=r"SEP-[0-9]+",
    )
    assert ranges(p) == [(1, 1), (3, 5), (7, 7)]


def test_no_separator_is_the_whole_batch() -> None:
    """Without a separator the batch is one document (analysed as it is)."""
    p = run(pages("", "", ""))
    assert p.whole and ranges(p) == [(1, 3)]


def test_duplex_separator_on_the_back_takes_the_whole_sheet() -> None:
    """duplex: a code on a sheet's back makes the front a separator page too."""
    # sheets: (1,2) letter, (3,4) separator printed on the back, (5,6) letter
    p = run(pages("", "", "-", "PATCHT", "", ""), duplex=True)
    assert ranges(p) == [(1, 2), (5, 6)]
    assert p.separators == (2, 3)


def test_duplex_separator_back_side_goes_with_it_blank_or_not() -> None:
    """duplex: the separator's back (here printed on) is dropped with it."""
    p = run(pages("", "", "PATCHT", "", "", ""), duplex=True)
    assert ranges(p) == [(1, 2), (5, 6)]


def test_duplex_keep_separator_keeps_both_sides() -> None:
    """duplex + keep_separator: the whole separator sheet leads the next document."""
    p = run(pages("", "", "PATCHT", "-", "", ""), duplex=True, keep_separator=True)
    assert ranges(p) == [(1, 2), (3, 6)]


def test_blank_sheets_separate_only_when_enabled() -> None:
    """blank_sheets: a blank page splits and is dropped; off, it stays in the document."""
    spec = pages("", "-", "", "")
    assert ranges(run(spec, blank_sheets=True)) == [(1, 1), (3, 4)]
    assert ranges(run(spec)) == [(1, 4)]


def test_blank_sheet_in_duplex_needs_both_sides_blank() -> None:
    """duplex: a one-sided letter's blank back is no separator; a blank sheet is."""
    spec = pages("", "-", "", "-", "-", "-", "", "")
    assert ranges(run(spec, blank_sheets=True, duplex=True)) == [(1, 4), (7, 8)]


def test_blank_threshold_is_configurable() -> None:
    """A faint page counts as blank only below the threshold."""
    spec = [PageScan(0, (), TEXT), PageScan(1, (), 0.8), PageScan(2, (), TEXT)]
    assert ranges(plan(spec, policy(blank_sheets=True), 3)) == [(1, 3)]
    assert ranges(plan(spec, policy(blank_sheets=True, blank_threshold=1.0), 3)) == [(1, 1), (3, 3)]


def test_barcode_change_splits_where_the_value_changes() -> None:
    """barcode-change: a new value starts a document; its page is content, not dropped."""
    p = run(pages("", "DOC-1", "", "DOC-1", "DOC-2", "", "DOC-3"), mode="barcode-change")
    assert ranges(p) == [(1, 4), (5, 6), (7, 7)]
    assert p.separators == ()


def test_barcode_change_counts_only_codes_its_regex_matches() -> None:
    """change_regex: other codes on a page do not change the document."""
    p = run(pages("D-1", "INV-9", "", "D-2"), mode="barcode-change", change_regex=r"D-\d+")
    assert ranges(p) == [(1, 3), (4, 4)]


def test_max_pages_flags_a_missing_separator_for_attention() -> None:
    """A document longer than max_pages: attention naming pages and limit, no children."""
    p = run(pages("", "", "", "PATCHT", ""), max_pages=2)
    assert p.parts == ()
    assert "pages 1-3" in p.attention and "max_pages 2" in p.attention


def test_max_pages_also_guards_a_batch_without_any_separator() -> None:
    """A long batch with no separator at all is not made one huge document."""
    p = run(pages(*[""] * 5), max_pages=4)
    assert p.attention and "5 pages" in p.attention


def test_asn_sets_the_serial_number_of_its_document() -> None:
    """An ASN code on a page sets its document's ASN (leading zeros dropped)."""
    p = run(pages("", "ASN00042", "PATCHT", "", "ASN7"), asn_prefix="ASN")
    assert [x.asn for x in p.parts] == [42, 7]


def test_asn_on_a_separator_belongs_to_the_next_document() -> None:
    """A separator sheet carrying an ASN sticker numbers the document after it."""
    p = run(pages("", ("PATCHT", "ASN00005"), ""), asn_prefix="ASN")
    assert p.parts == (Part(0, 0), Part(2, 2, 5))


def test_asn_code_is_not_a_change_value() -> None:
    """barcode-change: an ASN code neither starts nor changes a document."""
    p = run(pages("D-1", "ASN1", "D-1", "D-2"), mode="barcode-change", asn_prefix="ASN")
    assert ranges(p) == [(1, 3), (4, 4)] and p.parts[0].asn == 1


def test_the_same_asn_twice_in_a_batch_needs_attention() -> None:
    """ASN used by two documents of one batch: attention, nothing split."""
    p = run(pages("ASN1", "PATCHT", "ASN1"), asn_prefix="ASN")
    assert p.parts == () and "ASN 1 is on two documents" in p.attention


def test_two_asns_in_one_document_need_attention() -> None:
    """Two different ASNs in one document: which one is meant is not guessed."""
    p = run(pages("ASN1", "ASN2"), asn_prefix="ASN")
    assert p.attention and "two ASNs" in p.attention


def test_tag_barcodes_map_by_regex_to_tags() -> None:
    """TAG:x codes tag their document; groups fill the template."""
    p = run(
        pages("TAG:Rechnung", "", "PATCHT", "KST-4711"),
        tag_barcodes=[
            {"pattern": "TAG:(.+)", "tag": "{1}"},
            {"pattern": r"KST-(\d+)", "tag": "Kostenstelle {1}"},
        ],
    )
    assert [x.tags for x in p.parts] == [("Rechnung",), ("Kostenstelle 4711",)]


def test_only_separators_is_attention() -> None:
    """A batch of separator sheets only has no document to make."""
    p = run(pages("PATCHT", "PATCHT"))
    assert p.parts == () and p.attention


def test_scans_must_cover_every_page() -> None:
    """A scan that skipped a page is a bug, never a silently shorter plan."""
    with pytest.raises(ValueError, match="every page"):
        plan(pages("", ""), policy(), 3)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"mode": "barcode-change", "keep_separator": True}, "keep_separator"),
        ({"separators": [], "separator_regex": None}, "needs separators"),
        ({"separator_regex": "(a"}, "does not compile"),
        ({"separator_regex": "a*"}, "empty string"),
        ({"tag_barcodes": [{"pattern": "T:(.+)", "tag": "{2}"}]}, "1 group"),
        ({"symbologies": ["ean13"]}, "symbologies"),
        ({"max_pages": 0}, "max_pages"),
    ],
)
def test_policy_refuses_what_cannot_work(kw: dict[str, Any], message: str) -> None:
    """check-config refuses split policies that cannot work, naming the key."""
    with pytest.raises(Exception, match=message):
        policy(**kw)


BACKTRACKS = "a" * 40 + "!"  # (a|aa)+ tries every way to cut the a's before it fails


@pytest.mark.parametrize(
    ("where", "kw", "text"),
    [
        ("separator_regex", {"separator_regex": "(a|aa)+$"}, BACKTRACKS),
        (
            "tag_barcodes[0].pattern",
            {"tag_barcodes": [{"pattern": "TAG(a|aa)+", "tag": "x"}]},
            "TAG" + BACKTRACKS,
        ),
        ("change_regex", {"mode": "barcode-change", "change_regex": "(a|aa)+"}, BACKTRACKS),
    ],
)
def test_a_pattern_that_backtracks_is_attention_naming_it(
    where: str, kw: dict[str, Any], text: str
) -> None:
    """A configured pattern that runs past its time limit on a barcode raises
    PatternTimeout: attention (never retried), naming the pattern, its key and the page."""
    from ingestd.config.patterns import PatternTimeout

    with pytest.raises(PatternTimeout) as caught:
        run(pages("", text, ""), **kw)
    err = caught.value
    assert err.attention and not err.transient
    assert where in err.message and err.pattern in err.message
    assert "page 2" in err.message
