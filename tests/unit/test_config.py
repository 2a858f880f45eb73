"""Config validation: precise messages with key paths; the example file matches the schema."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ingestd.config.load import load_config, parse_config
from ingestd.config.settings import Config
from ingestd.errors import ConfigError

EXAMPLE = Path(__file__).parents[2] / "config" / "ingestd.example.toml"


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    return exc.value.problems


def test_defaults_are_valid() -> None:
    """An empty file is a valid config with documented defaults."""
    cfg = parse_config({})
    assert cfg.database.url is None
    assert cfg.paths.archive_dir == Path("/var/lib/ingestd/archive")
    assert cfg.intake.duplicates == "skip"


def test_bad_enum_names_key_value_and_allowed() -> None:
    """A wrong choice names the key path, the bad value and the allowed values."""
    [problem] = _problems({"intake": {"duplicates": "keep"}})
    assert problem.startswith("intake.duplicates:")
    assert "'keep'" in problem and "'skip'" in problem and "'refuse'" in problem


def test_unknown_key_is_an_error() -> None:
    """A misspelt key is reported instead of silently keeping the default."""
    [problem] = _problems({"intake": {"max_file_sise": 10}})
    assert problem.startswith("intake.max_file_sise: unknown key")


def test_all_problems_are_reported_at_once() -> None:
    """Every problem in a file is listed, not only the first."""
    problems = _problems(
        {"intake": {"max_file_size": "lots", "allowed_types": ["pdf", "exe"]}, "log": {"level": 3}}
    )
    keys = sorted(p.split(":")[0] for p in problems)
    assert keys == ["intake.allowed_types[1]", "intake.max_file_size", "log.level"]


def test_sizes_accept_units() -> None:
    """max_file_size takes bytes or a unit string."""
    assert parse_config({"intake": {"max_file_size": "2 MiB"}}).intake.max_file_size == 2 * 2**20


def test_broken_placeholder_regex_is_refused() -> None:
    """A regex that does not compile is a config error naming the pattern."""
    [problem] = _problems({"titles": {"placeholder_patterns": ["Scan_(\\d+"]}})
    assert problem.startswith("titles.placeholder_patterns:") and "Scan_(" in problem


def test_password_in_database_url_is_refused() -> None:
    """No plaintext secrets in config: a URL with a password is an error."""
    [problem] = _problems({"database": {"url": "postgresql://u:secret@db/ingestd"}})
    assert problem.startswith("database.url:") and "password" in problem


def test_overlapping_paths_are_refused() -> None:
    """The spool inside the archive (or any overlap) is refused."""
    [problem] = _problems({"paths": {"archive": "/srv/a", "spool": "/srv/a/spool"}})
    assert "paths.archive" in problem and "paths.spool" in problem


def test_relative_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    """paths.* given relative resolve against the config file's directory."""
    cfg_file = tmp_path / "ingestd.toml"
    cfg_file.write_text('[paths]\nstate_dir = "state"\n')
    assert load_config(cfg_file).paths.state_dir == tmp_path / "state"


def test_toml_syntax_error_names_line(tmp_path: Path) -> None:
    """A TOML syntax error says where."""
    cfg_file = tmp_path / "bad.toml"
    cfg_file.write_text("[intake\nmax_file_size = 1\n")
    with pytest.raises(ConfigError, match="line 1"):
        load_config(cfg_file)


def test_example_config_is_valid() -> None:
    """config/ingestd.example.toml passes validation."""
    load_config(EXAMPLE)


def _schema_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        ann = field.annotation
        inner = typing.get_args(ann)[0] if typing.get_origin(ann) is list else None
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys |= _schema_keys(ann, f"{prefix}{name}.")
        elif isinstance(inner, type) and issubclass(inner, BaseModel):
            keys |= _schema_keys(inner, f"{prefix}{name}.")  # [[array of tables]]
        else:
            keys.add(f"{prefix}{name}")
    return keys


def test_example_config_documents_every_key() -> None:
    """Every key of the schema appears in the example (set or commented out), and no other."""
    text = EXAMPLE.read_text()
    uncommented = "\n".join(
        line[2:] if re.match(r"# ([a-z_]+ = |\[)", line) else line for line in text.splitlines()
    )
    # Commented duplicates (alternative examples) collapse to one key each.
    seen: set[str] = set()
    section = ""
    for line in uncommented.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and "=" not in stripped and not stripped.startswith('["'):
            section = stripped.strip("[]") + "."
        elif "=" in stripped and not stripped.startswith(("#", '"')):
            seen.add(section + stripped.split("=", 1)[0].strip())
    schema = _schema_keys(Config)
    # A table-valued key (worker.timeouts) is documented by its entries.
    seen = {next((k for k in schema if key.startswith(k + ".")), key) for key in seen}
    assert seen == schema
    tomllib.loads(text)


def test_check_config_cli_exit_codes(tmp_path: Path) -> None:
    """check-config prints every problem with key paths and exits 3; OK files exit 0."""
    # The example's secret files, made on this machine (check-config reads them as the
    # workers will: a missing one is a problem here).
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    # Its paths too: run as root, check-config asks whether the owner of an existing
    # /var/lib/ingestd (an installed package's service user) could read the secrets.
    text = (
        EXAMPLE.read_text()
        .replace("/etc/ingestd/secrets/", f"{secrets}/")
        .replace('"/var/lib/ingestd', f'"{tmp_path}/state')
        .replace('"/var/spool/ingestd', f'"{tmp_path}/spool')
    )
    for name in re.findall(rf"{re.escape(str(secrets))}/([\w.-]+)", text):
        (secrets / name).write_text("a-secret\n")
        (secrets / name).chmod(0o600)
    example = tmp_path / "example.toml"
    example.write_text(text)
    bad = tmp_path / "bad.toml"
    bad.write_text('[intake]\nduplicates = "keep"\nmax_file_size = 0\n')
    cmd = [sys.executable, "-m", "ingestd.cli", "check-config"]
    proc = subprocess.run([*cmd, str(example), str(bad)], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"{example}: OK" in proc.stdout
    assert "intake.duplicates:" in proc.stdout and "intake.max_file_size:" in proc.stdout
    ok = subprocess.run([*cmd, str(example)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_hot_folder_loops_are_config_errors() -> None:
    """A watched folder inside the archive/spool, or a failed/done folder inside it, is refused."""
    problems = _problems(
        {
            "paths": {"state_dir": "/var/lib/ingestd", "spool": "/var/spool/ingestd"},
            "watch": [
                {"path": "/var/lib/ingestd/archive/acme", "tenant": "acme"},
                {"path": "/srv/hot/b", "tenant": "b", "failed": "/srv/hot/b/failed"},
                {"path": "/srv/hot/c", "tenant": "c", "done": "/srv/hot/c/done"},
                {"path": "/var/spool/ingestd/x", "tenant": "d"},
            ],
        }
    )
    text = "\n".join(problems)
    assert "watch[0].path (/var/lib/ingestd/archive/acme) overlaps paths.archive" in text
    assert "watch[1].failed (/srv/hot/b/failed) must be outside the watched folder" in text
    assert "watch[2].done (/srv/hot/c/done) must be outside the watched folder" in text
    assert "watch[3].path (/var/spool/ingestd/x) overlaps paths.spool" in text


def test_nested_hot_folders_are_refused() -> None:
    """Two [[watch]] entries where one contains the other would take files twice."""
    problems = _problems(
        {"watch": [{"path": "/srv/hot", "tenant": "a"}, {"path": "/srv/hot/x", "tenant": "b"}]}
    )
    assert any("watch[1].path (/srv/hot/x) overlaps watch[0].path" in p for p in problems)


def test_check_config_refuses_broken_taxonomy_regex(tmp_path: Path) -> None:
    """A taxonomy rule whose regex does not compile: check-config exits 3 naming the rule,
    in the config itself and in a file named by analysis.rules_files."""
    rule = '[[taxonomy]]\ntenant = "acme"\nkind = "tag"\nname = "Rechnung"\n'
    rule += 'algorithm = "regex"\nmatch = "Rechnung(snummer"\n'
    inline = tmp_path / "inline.toml"
    inline.write_text(rule)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "acme.toml").write_text(rule)
    named = tmp_path / "named.toml"
    named.write_text('[analysis]\nrules_files = ["rules/acme.toml"]\n')
    cmd = [sys.executable, "-m", "ingestd.cli", "check-config"]
    proc = subprocess.run([*cmd, str(inline)], capture_output=True, text=True)
    assert proc.returncode == 3
    assert "taxonomy[0].match" in proc.stdout and "Rechnung" in proc.stdout
    proc = subprocess.run([*cmd, str(named)], capture_output=True, text=True)
    assert proc.returncode == 3
    assert str(tmp_path / "rules" / "acme.toml") in proc.stdout


def test_regex_timeout_defaults_to_one_second_and_must_be_positive() -> None:
    """analysis.regex_timeout is 1.0 s unless set; 0 and negative values are refused."""
    assert parse_config({}).analysis.regex_timeout == 1.0
    assert parse_config({"analysis": {"regex_timeout": 0.25}}).analysis.regex_timeout == 0.25
    for bad in (0, 0.0, -1, -0.5):
        [problem] = _problems({"analysis": {"regex_timeout": bad}})
        assert problem.startswith("analysis.regex_timeout:") and "greater than 0" in problem


def test_check_config_names_a_missing_ocr_language(tmp_path: Path) -> None:
    """An OCR language without its tesseract pack: check-config exits 3 naming the package."""
    cfg = tmp_path / "ocr.toml"
    cfg.write_text('[analysis]\nlanguages = ["deu", "xyz"]\n')
    proc = subprocess.run(
        [sys.executable, "-m", "ingestd.cli", "check-config", str(cfg)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 3
    assert "analysis.languages" in proc.stdout and "tesseract-ocr-xyz" in proc.stdout


def test_rules_files_are_merged_with_the_config(tmp_path: Path) -> None:
    """Rules from analysis.rules_files come after the config's own, paths relative to it."""
    (tmp_path / "r.toml").write_text(
        '[[taxonomy]]\ntenant = "acme"\nkind = "tag"\nname = "B"\nmatch = "b"\n'
    )
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[analysis]\nrules_files = ["r.toml"]\n\n'
        '[[taxonomy]]\ntenant = "acme"\nkind = "tag"\nname = "A"\nmatch = "a"\n'
    )
    assert [r.name for r in load_config(cfg).taxonomy] == ["A", "B"]
