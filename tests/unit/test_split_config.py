"""check-config on split policies: every mistake named by its key path, nothing silent."""

from __future__ import annotations

from typing import Any

import pytest

from ingestd.config.load import parse_config
from ingestd.config.split import SplitPolicy
from ingestd.errors import ConfigError

WATCH = {"path": "/srv/hot/acme", "tenant": "acme"}


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    return err.value.problems


def test_a_source_split_must_be_a_table_or_false() -> None:
    """`split = true` says what is expected instead of two union errors."""
    problems = _problems({"watch": [{**WATCH, "split": True}]})
    assert problems == ["watch[0].split: must be a table (a split policy) or false (got True)"]


def test_mistakes_inside_a_source_policy_are_named_by_their_key() -> None:
    """A bad value inside watch[].split or sftp.accounts[].split names its own key."""
    account = {
        "username": "scan1",
        "tenant": "acme",
        "password_hash": "$2b$12$" + "a" * 53,
        "split": {"mode": "sideways", "symbologies": ["ean13"]},
    }
    problems = _problems(
        {"watch": [{**WATCH, "split": {"max_pages": 0}}], "sftp": {"accounts": [account]}}
    )
    joined = "\n".join(problems)
    assert "watch[0].split.max_pages:" in joined
    assert "sftp.accounts[0].split.mode:" in joined
    assert "sftp.accounts[0].split.symbologies[0]:" in joined
    assert ".policy" not in joined


def test_tenant_defaults_are_checked_by_tenant_name() -> None:
    """[split.<tenant>]: a tenant name that cannot exist and a broken regex are refused."""
    problems = _problems({"split": {"Not A Tenant": {}, "acme": {"separator_regex": "(a"}}})
    joined = "\n".join(problems)
    assert "split.Not A Tenant" in joined
    assert "split.acme.separator_regex: regex does not compile" in joined


def test_a_tag_template_may_only_use_groups_its_pattern_has() -> None:
    """tag = "{2}" with one group in the pattern is refused at load, not per document."""
    problems = _problems(
        {"split": {"acme": {"tag_barcodes": [{"pattern": "TAG:(.+)", "tag": "{2}"}]}}}
    )
    assert any("split.acme.tag_barcodes[0]" in p and "1 group" in p for p in problems)


def test_source_false_overrides_the_tenant_default_and_absent_inherits_it() -> None:
    """split = false on a source wins over [split.<tenant>]; no split key inherits it."""
    cfg = parse_config(
        {
            "watch": [{**WATCH, "split": False}, {"path": "/srv/hot/b", "tenant": "acme"}],
            "split": {"acme": {"max_pages": 7}},
        }
    )
    off, inherits = cfg.watch
    assert cfg.split_policy("acme", off.split) is None
    policy = cfg.split_policy("acme", inherits.split)
    assert policy is not None and policy.max_pages == 7
    assert cfg.split_policy("other", None) is None  # off unless configured


def test_a_policy_travels_in_a_job_payload_unchanged() -> None:
    """The policy a batch arrived under reads back identical from its job's JSON."""
    policy = SplitPolicy.model_validate(
        {"mode": "barcode-change", "change_regex": "D-[0-9]+", "duplex": True, "asn_prefix": "ASN"}
    )
    assert SplitPolicy.model_validate(policy.as_payload()) == policy
