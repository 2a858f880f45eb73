"""On-upload workflows: conditions, chaining, title templates, the event they send."""

from __future__ import annotations

import dataclasses
import json
from datetime import date
from typing import Any

import pytest
from pydantic import ValidationError

from ingestd.config.load import parse_config
from ingestd.config.rules import WorkflowActions, WorkflowRule
from ingestd.errors import ConfigError
from worker.analysis.workflows import (
    Applied,
    DocumentFacts,
    apply_step,
    event_payload,
    plan,
    render_title,
)
from worker.webhooks import event_body

FACTS = DocumentFacts(
    tenant="acme",
    document_id=42,
    sha256="ab" * 32,
    filename="Scan_0001.PDF",
    source="sftp:scanner-2og",
    subfolder="Buchhaltung/2026",
    tags=("Eingang",),
    correspondent="Telekom",
    document_type=None,
    title="Kündigung Mobilfunkvertrag",
    issued_date=date(2026, 11, 3),
    page_count=3,
)


def workflow(name: str = "wf", when: dict[str, Any] | None = None, **then: Any) -> WorkflowRule:
    data = {"tenant": "acme", "name": name, "when": when or {}, "then": then}
    return WorkflowRule.model_validate(data)


def runs(when: dict[str, Any], facts: DocumentFacts = FACTS) -> bool:
    return bool(plan([workflow(when=when, add_tags=["X"])], facts))


# --- conditions -----------------------------------------------------------------------


def test_no_conditions_always_run() -> None:
    """A workflow without conditions runs for every document of its tenant."""
    assert runs({})


def test_other_tenants_workflows_never_run() -> None:
    """Workflows are scoped to their tenant."""
    other = WorkflowRule.model_validate(
        {"tenant": "other", "name": "wf", "then": {"add_tags": ["X"]}}
    )
    assert plan([other], FACTS) == []


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        pytest.param(["sftp:scanner-*"], True, id="glob"),
        pytest.param(["cli", "sftp:*"], True, id="any-of-them"),
        pytest.param(["watch:*"], False, id="other-source"),
        pytest.param(["sftp:Scanner-*"], False, id="case-sensitive"),
    ],
)
def test_sources_glob(sources: list[str], expected: bool) -> None:
    """sources: one of the globs must match the document's source."""
    assert runs({"sources": sources}) is expected


def test_hot_folder_sources_are_globbed_by_path() -> None:
    """A watch source is "watch:<folder>"; a glob can pick the folder."""
    facts = dataclasses.replace(FACTS, source="watch:/srv/hot/acme/buchhaltung")
    assert runs({"sources": ["watch:/srv/hot/acme/*"]}, facts)
    assert not runs({"sources": ["watch:/srv/hot/other/*"]}, facts)


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        pytest.param("*.pdf", True, id="case-insensitive"),
        pytest.param("scan_*", True, id="prefix"),
        pytest.param("*.tif", False, id="other-extension"),
    ],
)
def test_filename_glob(glob: str, expected: bool) -> None:
    """filename: a case-insensitive glob on the original file name."""
    assert runs({"filename": glob}) is expected


@pytest.mark.parametrize(
    ("subfolder", "glob", "expected"),
    [
        pytest.param("Buchhaltung", "Buchhaltung", True, id="exact"),
        pytest.param("buchhaltung", "Buchhaltung", True, id="case-insensitive"),
        pytest.param("Buchhaltung/2026", "Buchhaltung", False, id="exact-is-not-below"),
        pytest.param("Buchhaltung/2026", "Buchhaltung/*", True, id="below"),
        pytest.param("Buchhaltung/2026/11", "Buchhaltung/*", True, id="any-depth"),
        pytest.param("Buchhaltung", "Buchhaltung/*", False, id="below-is-not-itself"),
        pytest.param("", "", True, id="top-level"),
        pytest.param("Buchhaltung", "", False, id="top-level-only"),
    ],
)
def test_subfolder_glob(subfolder: str, glob: str, expected: bool) -> None:
    """subfolder: a glob on the sub-folder below the inbox; "" is the top level."""
    facts = dataclasses.replace(FACTS, subfolder=subfolder)
    assert runs({"subfolder": glob}, facts) is expected


def test_has_tags_needs_all_of_them() -> None:
    """has_tags: every listed tag must be on the document (case-insensitive)."""
    facts = dataclasses.replace(FACTS, tags=("Eingang", "Rechnung"))
    assert runs({"has_tags": ["rechnung", "Eingang"]}, facts)
    assert not runs({"has_tags": ["Rechnung", "Mahnung"]}, facts)


def test_correspondent_and_document_type_conditions() -> None:
    """correspondent/document_type must equal the document's (case-insensitive)."""
    assert runs({"correspondent": "telekom"})
    assert not runs({"correspondent": "Vodafone"})
    assert not runs({"document_type": "Rechnung"})  # the document has none


def test_all_given_conditions_must_hold() -> None:
    """Conditions combine with AND."""
    assert runs({"sources": ["sftp:*"], "filename": "*.pdf", "correspondent": "Telekom"})
    assert not runs({"sources": ["sftp:*"], "filename": "*.tif", "correspondent": "Telekom"})


# --- actions and chaining -------------------------------------------------------------


def test_workflows_chain_in_config_order() -> None:
    """Each workflow sees what the earlier ones did; a later one cannot feed an earlier one."""
    rules = [
        workflow("too-early", {"has_tags": ["Rechnung"]}, add_tags=["Früh"]),
        workflow("tag", {"correspondent": "Telekom"}, add_tags=["Rechnung", "Eingang"]),
        workflow("type", {"has_tags": ["Rechnung"]}, document_type="Telefonrechnung"),
        workflow(
            "title",
            {"document_type": "Telefonrechnung"},
            title="{correspondent} {document_type} {year}-{month}",
        ),
        workflow("after-title", {"filename": "*.pdf"}, title="{title} ({page_count} S.)"),
    ]
    applied = plan(rules, FACTS)
    assert [a.workflow for a in applied] == ["tag", "type", "title", "after-title"]
    assert applied[0].add_tags == ("Rechnung",)  # "Eingang" is already there
    assert applied[1].document_type == "Telefonrechnung"
    assert applied[2].title == "Telekom Telefonrechnung 2026-11"
    assert applied[3].title == "Telekom Telefonrechnung 2026-11 (3 S.)"


def test_title_sees_the_same_workflows_correspondent() -> None:
    """Within one workflow, the title is rendered after its correspondent is set."""
    [step] = plan([workflow(correspondent="Vodafone", title="{correspondent}: {title}")], FACTS)
    assert step.title == "Vodafone: Kündigung Mobilfunkvertrag"


def test_apply_step_gives_the_facts_after_a_step() -> None:
    """apply_step() folds an Applied into the facts, as the next workflow sees them."""
    step = Applied("wf", ("Neu",), None, "Rechnung", "Neuer Titel", None)
    after = apply_step(FACTS, step)
    assert after.tags == ("Eingang", "Neu") and after.correspondent == "Telekom"
    assert (after.document_type, after.title) == ("Rechnung", "Neuer Titel")


def test_workflow_needs_an_action() -> None:
    """A workflow without any action is refused."""
    with pytest.raises(ValidationError, match="at least one action"):
        WorkflowActions()


# --- title templates ------------------------------------------------------------------


def test_every_placeholder_renders() -> None:
    """All documented keys fill in; {{ and }} are literal braces."""
    template = (
        "{filename}|{stem}|{correspondent}|{document_type}|{issued_date}|{year}|{month}|"
        "{tenant}|{source}|{subfolder}|{title}|{page_count}|{{x}}"
    )
    assert render_title(template, FACTS) == (
        "Scan_0001.PDF|Scan_0001|Telekom||2026-11-03|2026|11|acme|sftp:scanner-2og|"
        "Buchhaltung/2026|Kündigung Mobilfunkvertrag|3|{x}"
    )


def test_missing_values_leave_no_dangling_separators() -> None:
    """Unknown values render empty and separators at the edges go."""
    facts = dataclasses.replace(FACTS, correspondent=None, issued_date=None)
    assert render_title("{correspondent} - {title} {year}", facts) == "Kündigung Mobilfunkvertrag"


def test_title_that_renders_empty_is_not_set() -> None:
    """A template that renders to nothing leaves the title alone (Applied.title None)."""
    facts = dataclasses.replace(FACTS, document_type=None)
    [step] = plan([workflow(title="{document_type}", add_tags=["X"])], facts)
    assert step.title is None


def test_rendered_title_is_capped_at_200() -> None:
    """A rendered title is at most 200 characters, cut at a word."""
    facts = dataclasses.replace(FACTS, title="Wort " * 100)
    title = render_title("{title} {title}", facts)
    assert len(title) <= 200 and title.endswith("Wort")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        pytest.param("{owner}", "unknown placeholder {owner}", id="unknown-key"),
        pytest.param("{}", "unknown placeholder {}", id="positional"),
        pytest.param("{0}", "unknown placeholder {0}", id="index"),
        pytest.param("{title.__class__}", "unknown placeholder", id="attribute"),
        pytest.param("{title[0]}", "unknown placeholder", id="item"),
        pytest.param("{title:>9999}", "plain placeholder", id="format-spec"),
        pytest.param("{title!r}", "plain placeholder", id="conversion"),
        pytest.param("{title", "malformed", id="unclosed"),
        pytest.param("title}", "malformed", id="stray-brace"),
    ],
)
def test_bad_title_templates_are_refused(template: str, message: str) -> None:
    """Only plain {key} fields of the documented keys pass validation."""
    with pytest.raises(ValidationError, match=message):
        WorkflowActions(title=template)


def test_unknown_placeholder_is_a_config_problem_with_key_path() -> None:
    """check-config names the workflow's title key and the allowed keys."""
    bad = {"tenant": "acme", "name": "wf", "then": {"title": "{owner} {title}"}}
    with pytest.raises(ConfigError) as exc:
        parse_config({"workflows": [bad]})
    [problem] = exc.value.problems
    assert problem.startswith("workflows[0].then.title:")
    assert "{owner}" in problem and "correspondent" in problem


# --- the event ------------------------------------------------------------------------


def test_event_payload_shape() -> None:
    """The event names the workflow, the tenant and the document's derived facts."""
    event = event_payload(FACTS, "wf")
    assert event == {
        "event": "document.analyzed",
        "workflow": "wf",
        "tenant": "acme",
        "document": {
            "id": 42,
            "sha256": "ab" * 32,
            "filename": "Scan_0001.PDF",
            "title": "Kündigung Mobilfunkvertrag",
            "issued_date": "2026-11-03",
            "tags": ["Eingang"],
            "correspondent": "Telekom",
            "document_type": None,
            "source": "sftp:scanner-2og",
            "subfolder": "Buchhaltung/2026",
            "page_count": 3,
            "invoice": None,  # an e-invoice's fields (issue 33)
        },
    }
    assert json.loads(event_body(event)) == event
    assert "Kündigung".encode() in event_body(event)  # UTF-8, not \u escapes
