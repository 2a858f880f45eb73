"""The configuration reference (docs/configuration.md): generated from the schema, kept in
step with it, and naming every key of the example. That the example validates is
tests/unit/test_config.py's test_example_config_is_valid."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from ingestd.cli.main import main
from ingestd.config import load
from ingestd.config.load import parse_config
from ingestd.config.reference import COMMAND, DOC_PATH, render, tables
from ingestd.config.rules import SECONDS, TENANT_NAME, ConfigModel
from ingestd.config.settings import Config
from ingestd.errors import ConfigError

ROOT = Path(__file__).parents[2]
DOC = ROOT / DOC_PATH
EXAMPLE = ROOT / "config" / "ingestd.example.toml"

_HEADING = re.compile(r"^#{2,4} `\[\[?([^\]]+)\]\]?`$")
_ROW = re.compile(r"^\| `([^`]+)` \| (.*?) \| (.*?) \| (.*) \|$")


def _rows(markdown: str) -> dict[str, tuple[str, str, str]]:
    """``table.key`` -> (type, default, description), read back from the Markdown."""
    rows: dict[str, tuple[str, str, str]] = {}
    section = None
    for line in markdown.splitlines():
        heading = _HEADING.match(line)
        if heading:
            section = heading.group(1)
            continue
        row = _ROW.match(line)
        if row and section is not None:
            name, kind, default, description = row.groups()
            rows[f"{section}.{name}"] = (kind, default, description)
    return rows


def _example_keys() -> set[str]:
    """Every ``table.key`` of the example, set or commented out."""
    keys: set[str] = set()
    section = ""
    for raw in EXAMPLE.read_text().splitlines():
        line = raw[2:] if re.match(r"# ([A-Za-z0-9_-]+ = |\[)", raw) else raw
        stripped = line.strip()
        if re.match(r"^\[\[?[A-Za-z0-9_.-]+\]\]?", stripped):
            section = stripped.split("]")[0].strip("[]")
        elif "=" in stripped and not stripped.startswith(("#", '"')):
            keys.add(f"{section}.{stripped.split('=', 1)[0].strip()}")
    return keys


def _models(tp: Any, found: set[type[BaseModel]]) -> None:
    """Every model reachable from ``tp`` (through unions, lists, tables, Annotated)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp in found:
            return
        found.add(tp)
        for field in tp.model_fields.values():
            _models(field.annotation, found)
        return
    for arg in typing.get_args(tp):
        _models(arg, found)


def test_docs_configuration_md_is_the_generated_reference() -> None:
    """docs/configuration.md is exactly what the schema generates today."""
    assert DOC.read_text(encoding="utf-8") == render(), (
        f"{DOC_PATH} is out of date with the config schema: run "
        f"`{COMMAND} --output {DOC_PATH}` and commit the result"
    )


def test_the_reference_says_it_is_generated() -> None:
    """The file's first line names the command that makes it and forbids hand edits."""
    first = render().splitlines()[0]
    assert COMMAND in first and "do not edit by hand" in first


def test_every_key_reachable_from_config_has_a_description() -> None:
    """Every field of every model Config reaches has a description (its docstring)."""
    found: set[type[BaseModel]] = set()
    _models(Config, found)
    assert len(found) > 20  # the walk went through lists, unions and tables of models
    missing = [
        f"{model.__name__}.{name}"
        for model in found
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert not missing, "keys without a docstring: " + ", ".join(sorted(missing))


def test_every_key_of_the_example_is_in_the_reference() -> None:
    """Each key the example sets or shows commented out has a row in the reference."""
    rows = _rows(render())
    patterns = {key: re.compile(re.sub(r"<[^>]+>", "[^.]+", re.escape(key))) for key in rows}
    tables_by_name = {k for k, (kind, _, _) in rows.items() if kind.startswith("table of ")}

    def covered(key: str) -> bool:
        if any(p.fullmatch(key) for p in patterns.values()):
            return True
        # [worker.timeouts] analyze-document = ...: an entry of a table-valued key.
        parent = key.rsplit(".", 1)[0]
        return any(patterns[k].fullmatch(parent) for k in tables_by_name)

    keys = _example_keys()
    assert {"intake.duplicates", "split.acme.mode", "worker.timeouts.notify"} <= keys
    assert [k for k in sorted(keys) if not covered(k)] == []


def test_the_reference_shows_bounds_and_allowed_values() -> None:
    """Known keys show their allowed values, bounds, units and defaults as the schema has them."""
    rows = _rows(render())
    kind, default, _ = rows["intake.duplicates"]
    assert "`skip`" in kind and "`refuse`" in kind and default == '`"skip"`'
    assert rows["sftp.max_connections"][:2] == ("integer 1–10000", "`100`")
    assert rows["sftp.auth_timeout"][0] == "duration in seconds, 1–600"
    assert rows["database.connect_timeout"][0] == "duration in seconds, > 0 and ≤ 300"
    assert rows["sftp.window_size"][0].endswith("64 KiB–2147483647 bytes")
    assert rows["sftp.accounts.allowed_sources"][0] == "list of CIDR networks"
    assert rows["watch.tenant"][0] == f"tenant name (`{TENANT_NAME}`)"
    assert rows["watch.path"][1] == "required" and rows["watch.done"][1] == "none"
    # Defaults decided by a validator or the machine are described, not one host's value.
    assert rows["worker.concurrency"][1] == "one per CPU core"
    assert "`465`" in rows["smtp.port"][1]
    assert rows["watch.split"][0] == "a table with the keys of `[split.<tenant>]` or `false`"
    assert "`{correspondent}`" in rows["workflows.then.title"][0]
    headers = {t.header for t in tables()}
    assert {"[[sftp.accounts]]", "[split.<tenant>]", "[[split.<tenant>.tag_barcodes]]"} <= headers


class _Sample(ConfigModel):
    count: Annotated[int, Field(ge=3, le=7)] = 4
    """How many."""
    wait: Annotated[float, Field(gt=0), SECONDS] = 1.5
    """How long."""
    color: Literal["red", "green"] = "red"
    """Which."""
    names: list[Annotated[str, Field(min_length=2, max_length=9)]] = Field(default_factory=list)
    """Who."""


class _SampleRoot(ConfigModel):
    sample: _Sample = Field(default_factory=_Sample)
    """A sample table."""


def test_types_and_bounds_are_read_from_the_annotations() -> None:
    """Bounds, units, choices and lengths come from the fields themselves, not a list."""
    [table] = tables(_SampleRoot)
    assert table.header == "[sample]" and table.description == "A sample table."
    assert [(k.name, k.kind, k.default, k.description) for k in table.keys] == [
        ("count", "integer 3–7", "`4`", "How many."),
        ("wait", "duration in seconds, > 0", "`1.5`", "How long."),
        ("color", "one of `red`, `green`", '`"red"`', "Which."),
        ("names", "list of strings of 2–9 characters", "`[]`", "Who."),
    ]


def test_config_reference_command_prints_and_writes_the_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ingestd config-reference` prints the Markdown; --output FILE writes it instead."""
    assert main(["config-reference"]) == 0
    assert capsys.readouterr().out == render()
    out = tmp_path / "configuration.md"
    assert main(["config-reference", "--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
    assert capsys.readouterr().out == ""


def _unknown_key_hint() -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config({"intake": {"max_file_sise": 1}})
    [problem] = exc.value.problems
    assert problem.startswith("intake.max_file_sise: unknown key (check the spelling against ")
    return problem


def test_unknown_key_hint_names_the_installed_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the package's example installed, an unknown key's hint names that file."""
    installed = tmp_path / "usr/share/doc/ingestd/ingestd.example.toml"
    installed.parent.mkdir(parents=True)
    installed.write_text("")
    monkeypatch.setattr(load, "INSTALLED_EXAMPLE", installed)
    assert f"against {installed})" in _unknown_key_hint()
    installed.rename(f"{installed}.gz")  # compressed by dh_compress
    assert f"against {installed}.gz)" in _unknown_key_hint()


def test_unknown_key_hint_falls_back_to_checkout_then_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an installed example: the source checkout's example, else the command."""
    monkeypatch.setattr(load, "INSTALLED_EXAMPLE", tmp_path / "none" / "ingestd.example.toml")
    assert load.SOURCE_EXAMPLE == EXAMPLE
    assert f"against {EXAMPLE})" in _unknown_key_hint()
    monkeypatch.setattr(load, "SOURCE_EXAMPLE", tmp_path / "config" / "ingestd.example.toml")
    assert "against `ingestd config-reference`)" in _unknown_key_hint()
