"""Reading a config: the file found (--config, $INGESTD_CONFIG, the default), TOML
parsed, relative paths resolved against it, rules files merged, and the schema's
errors turned into one line per problem naming its key path."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from ingestd.config import pathcheck
from ingestd.config.dropins import Origins, merge_dropins
from ingestd.config.rules import ConfigModel, TaxonomyRule, WorkflowRule
from ingestd.config.settings import Config
from ingestd.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("/etc/ingestd/ingestd.toml")
CONFIG_ENV = "INGESTD_CONFIG"

# Where every key is shown, for the hint of an unknown key: the example the package
# installs (packaging/build-deb.sh copies it uncompressed; dh_compress would make it .gz),
# else the one of a source checkout, else the reference command.
INSTALLED_EXAMPLE = Path("/usr/share/doc/ingestd/examples/ingestd.toml")
SOURCE_EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "ingestd.example.toml"


def key_reference() -> str:
    """Where a sysadmin on this machine can look up the keys of the config file."""
    for path in (INSTALLED_EXAMPLE, INSTALLED_EXAMPLE.with_name(INSTALLED_EXAMPLE.name + ".gz")):
        if path.is_file():
            return str(path)
    if SOURCE_EXAMPLE.is_file():
        return str(SOURCE_EXAMPLE)
    return "`ingestd config-reference`"


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if i and loc[i - 1] == "split" and part == "policy":
            continue  # the tag of a source's split (a table or false), not a key
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _format_error(err: Any) -> str:
    loc = _format_loc(tuple(err.get("loc", ())))
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        return f"{loc}: unknown key (check the spelling against {key_reference()})"
    if err.get("type") == "missing":
        return f"{loc}: required key is missing"
    value = err.get("input")
    shown = repr(value) if not isinstance(value, dict) else "a table"
    return f"{loc}: {msg[0].lower() + msg[1:] if msg else msg} (got {shown})"


def _resolve_relative(data: dict[str, Any], base: Path) -> None:
    # Relative paths are taken relative to the config file, not the working directory:
    # systemd and a shell would otherwise disagree about where the archive lives.
    tables = [data.get("paths")]
    analysis = data.get("analysis")
    if isinstance(analysis, dict) and isinstance(analysis.get("rules_files"), list):
        analysis["rules_files"] = [
            str(base / f) if isinstance(f, str) and f and not os.path.isabs(f) else f
            for f in analysis["rules_files"]
        ]
    watches = data.get("watch")
    if isinstance(watches, list):
        tables.extend(watches)
    for table in tables:
        if not isinstance(table, dict):
            continue
        for key in ("state_dir", "archive", "derived", "spool", "path", "done", "failed"):
            value = table.get(key)
            if isinstance(value, str) and value and not os.path.isabs(value):
                table[key] = str(base / value)


def parse_config(
    data: dict[str, Any],
    *,
    source: str = "<config>",
    base: Path | None = None,
    origins: Origins | None = None,
) -> Config:
    """Validate an already-parsed TOML document; with ``origins``, a problem in a key
    that came from a drop-in names that file."""
    if base is not None:
        _resolve_relative(data, base)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems: list[str] = []
        for e in exc.errors():
            if not e.get("loc"):
                # Cross-field checks already name their keys; one line per problem.
                msg = str(e.get("msg", "")).removeprefix("Value error, ")
                problems.extend(msg.split("; "))
            else:
                problems.append(_format_error(e))
        if origins is not None:
            problems = [origins.annotate(p) for p in problems]
        raise ConfigError(f"{source}: {len(problems)} problem(s)", problems) from None


def default_config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)


def load_config(path: Path | str | None = None) -> Config:
    """Read, parse and validate a config file; raise ConfigError listing every problem."""
    cfg_path = Path(path) if path is not None else default_config_path()
    try:
        raw = cfg_path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{cfg_path}: no such file (set --config or {CONFIG_ENV})") from None
    except OSError as exc:
        raise ConfigError(f"{cfg_path}: cannot read: {exc.strerror}") from None
    data = _parse_toml(cfg_path, raw)
    base = cfg_path.resolve().parent
    _resolve_relative(data, base)
    # conf.d/*.toml (ingestd/config/dropins.py): read again at every load, so a reload
    # (SIGHUP) sees drop-ins added or removed since.
    origins = merge_dropins(data, cfg_path, _parse_toml, _resolve_relative)
    _merge_rules_files(data, str(cfg_path))
    config = parse_config(data, source=str(cfg_path), origins=origins).read_from(cfg_path)
    # Symlinks, '..' and bind mounts as they are on this machine now: at check-config,
    # at start and at every reload (a reload that fails keeps the running config).
    problems = [origins.annotate(p) for p in pathcheck.filesystem_problems(config)]
    if problems:
        raise ConfigError(f"{cfg_path}: {len(problems)} problem(s)", problems)
    return config


def _parse_toml(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 at byte {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: TOML syntax error: {exc}") from None


class _RulesFile(ConfigModel):
    """A rules file (analysis.rules_files): taxonomy and workflow tables only."""

    taxonomy: list[TaxonomyRule] = Field(default_factory=list)
    workflows: list[WorkflowRule] = Field(default_factory=list)


def _merge_rules_files(data: dict[str, Any], source: str) -> None:
    """Append the rules of analysis.rules_files to the config's own, after checking each
    file on its own so that a problem is reported with the file it is in."""
    analysis = data.get("analysis")
    files = analysis.get("rules_files") if isinstance(analysis, dict) else None
    if not isinstance(files, list):
        return
    problems: list[str] = []
    for name in files:
        if not isinstance(name, str):
            continue  # the schema reports it
        path = Path(name)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            problems.append(f"analysis.rules_files: {path}: cannot read: {exc.strerror}")
            continue
        try:
            rules = _parse_toml(path, raw)
        except ConfigError as exc:
            problems.append(exc.message)
            continue
        try:
            _RulesFile.model_validate(rules)
        except ValidationError as exc:
            problems.extend(f"{path}: {_format_error(e)}" for e in exc.errors())
            continue
        for key in ("taxonomy", "workflows"):
            if not isinstance(data.get(key, []), list):
                continue  # the schema reports it
            data[key] = [*data.get(key, []), *rules.get(key, [])]
    if problems:
        raise ConfigError(f"{source}: {len(problems)} problem(s)", problems)
