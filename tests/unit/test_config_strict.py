"""Strict config values: a boolean is never a number, database.url never holds a password."""

from __future__ import annotations

from typing import Any

import pytest

from ingestd.config.load import parse_config
from ingestd.errors import ConfigError

BCRYPT = "$2b$04$" + "a" * 53
HOOK = {"url": "https://erp.example/h", "secret_env": "HOOK_KEY"}
WORKFLOW = {"tenant": "acme", "name": "hook", "then": {"webhook": HOOK}}


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    return exc.value.problems


# -- booleans are not numbers -------------------------------------------------------------
def test_true_is_not_a_file_size() -> None:
    """`max_file_size = true` is refused as not a size, instead of being read as 1 byte."""
    assert _problems({"intake": {"max_file_size": True}}) == [
        "intake.max_file_size: must be a size (e.g. 512MiB) or a number of bytes, "
        "not true/false (got True)"
    ]
    # Sizes, numbers and real booleans still load.
    cfg = parse_config(
        {
            "intake": {"max_file_size": "1MiB"},
            "worker": {"max_retries": 0},
            "analysis": {"rotate_pages": False},
        }
    )
    assert cfg.intake.max_file_size == 1024 * 1024 and cfg.worker.max_retries == 0
    assert cfg.analysis.rotate_pages is False


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        ("worker", "max_retries", True, "must be an integer"),
        ("worker", "tenant_cap", False, "must be an integer"),
        ("database", "connect_timeout", True, "must be a number"),
        ("worker", "retry_jitter", False, "must be a number"),
        ("sftp", "quota", True, "must be a size"),
    ],
)
def test_a_bool_is_never_an_int_float_or_size(
    section: str, key: str, value: bool, expected: str
) -> None:
    """Every int, float and ByteSize key refuses true/false with its key path and kind."""
    data: dict[str, Any] = {section: {key: value}}
    if section == "sftp":  # a per-account key
        account = {"username": "s", "tenant": "acme", key: value, "password_hash": BCRYPT}
        data = {"sftp": {"accounts": [account]}}
    [problem] = _problems(data)
    assert expected in problem and problem.endswith(f", not true/false (got {value})")


def test_a_bool_under_a_limit_says_true_false_not_the_limit() -> None:
    """`max_filename_bytes = true` says "not true/false", not "greater than or equal to 16"."""
    [problem] = _problems({"intake": {"max_filename_bytes": True}})
    assert problem == "intake.max_filename_bytes: must be a number, not true/false (got True)"


def test_a_bool_inside_a_table_names_its_sub_key() -> None:
    """A bool among per-kind timeouts is refused at worker.timeouts.<kind>."""
    [problem] = _problems({"worker": {"timeouts": {"analyze-document": True}}})
    assert problem == (
        "worker.timeouts.analyze-document: must be a number, not true/false (got True)"
    )


def test_rule_tables_refuse_bools_as_numbers_too() -> None:
    """Taxonomy and webhook numbers (config_rules models) refuse true/false as well."""
    taxonomy = [
        {
            "tenant": "acme",
            "kind": "tag",
            "name": "T",
            "match": "t",
            "algorithm": "fuzzy",
            "fuzzy_threshold": True,
        }
    ]
    [problem] = _problems({"taxonomy": taxonomy})
    assert problem.startswith("taxonomy[0].fuzzy_threshold: must be an integer, not true/false")
    hook = {**WORKFLOW, "then": {"webhook": {**HOOK, "timeout": True}}}
    [problem] = _problems({"workflows": [hook]})
    assert problem.startswith("workflows[0].then.webhook.timeout: must be a number, not true")


# -- database.url --------------------------------------------------------------------------
PASSWORD_FORMS = [
    pytest.param("postgresql://ingestd:s3cr/t@db.example/ingestd", id="slash-in-userinfo"),
    pytest.param("postgresql://ingestd:s3cr%2Ft@db.example/ingestd", id="percent-encoded"),
    pytest.param("postgresql://ingestd:s3cr3t@db.example/ingestd", id="userinfo"),
    pytest.param("postgresql://:s3cr3t@db.example/ingestd", id="no-user"),
    pytest.param("postgresql://ingestd@db.example/ingestd?password=s3cr3t", id="query"),
    pytest.param("postgresql://i@db/x?sslmode=require&password=s3cr3t", id="query-2nd"),
    pytest.param("host=db.example dbname=ingestd password=s3cr3t", id="keyword"),
    pytest.param("host=db.example password = 's3cr3t and more' dbname=x", id="keyword-quoted"),
    pytest.param("postgresql://ingestd:s3cr3t@db/x?nonsense=1", id="unparsable-too"),
]


@pytest.mark.parametrize("url", PASSWORD_FORMS)
def test_every_password_form_is_refused_without_showing_it(url: str) -> None:
    """A password in database.url, in any form libpq reads, is refused with where to put it
    instead; the refusal never repeats the password."""
    [problem] = _problems({"database": {"url": url}})
    assert problem.startswith("database.url: must not contain a password")
    assert "~/.pgpass" in problem and "PGPASSFILE" in problem and "peer" in problem
    assert "s3cr" not in problem


READABLE_WITHOUT_PASSWORD = [
    "postgresql:///ingestd",
    "postgresql://ingestd@db.example:5433/ingestd?sslmode=verify-full",
    "postgresql://db.example/ingestd?application_name=a@b",
    "host=/run/postgresql dbname=ingestd passfile=/etc/ingestd/pgpass",
    "postgresql://ingestd:@db.example/ingestd",  # an empty password is none
]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("mysql://db/ingestd", 'missing "=" after "mysql://db/ingestd"'),
        ("dbname=ingestd sslmod=require", 'invalid connection option "sslmod"'),
        ("dbname='ingestd", "unterminated quoted string"),
        ("postgresql://db:abc/ingestd", "port 'abc' is not a number"),
    ],
)
def test_database_url_is_judged_by_libpq(url: str, reason: str) -> None:
    """What psycopg's parser cannot read is refused with its reason; what it reads without
    a password loads unchanged."""
    [problem] = _problems({"database": {"url": url}})
    assert problem.startswith("database.url:") and reason in problem
    for good in READABLE_WITHOUT_PASSWORD:
        assert parse_config({"database": {"url": good}}).database.url == good
