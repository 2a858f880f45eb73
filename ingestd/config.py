"""One validated TOML schema for every ingestd process.

Every problem is reported with its key path, the bad value and what is allowed, e.g.
``intake.duplicates: must be one of 'skip', 'refuse' (got 'keep')``. All problems of a
file are collected, so a sysadmin fixes them in one round instead of one per restart.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ingestd.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("/etc/ingestd/ingestd.toml")
CONFIG_ENV = "INGESTD_CONFIG"

FileType = Literal["pdf", "tiff", "jpeg", "png"]
_ALL_TYPES: tuple[FileType, ...] = ("pdf", "tiff", "jpeg", "png")


class _Section(BaseModel):
    # Unknown keys are errors: a typo like `max_file_sise` must not silently keep a default.
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatabaseConfig(_Section):
    url: str | None = Field(
        default=None,
        description="libpq URL; omit to run an embedded private cluster under paths.state_dir",
    )
    pool_min_size: Annotated[int, Field(ge=1, le=64)] = 1
    pool_max_size: Annotated[int, Field(ge=1, le=256)] = 4
    connect_timeout: Annotated[float, Field(gt=0, le=300)] = 5.0

    @field_validator("url")
    @classmethod
    def _url_shape(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^(postgres(ql)?://|\w+=)", v):
            raise ValueError("must be a postgresql:// URL or a libpq key=value string")
        if v is not None and re.search(r"://[^/@:]+:[^/@]+@", v):
            # A password in the config file ends up in backups and `ps`; use .pgpass or peer auth.
            raise ValueError("must not contain a password; use ~/.pgpass, PGPASSFILE or peer auth")
        return v


class PathsConfig(_Section):
    state_dir: Path = Path("/var/lib/ingestd")
    archive: Path | None = None
    derived: Path | None = None
    spool: Path = Path("/var/spool/ingestd")

    @property
    def archive_dir(self) -> Path:
        return self.archive or self.state_dir / "archive"

    @property
    def derived_dir(self) -> Path:
        return self.derived or self.state_dir / "derived"

    @property
    def pgdata(self) -> Path:
        return self.state_dir / "pgdata"


class IntakeConfig(_Section):
    max_file_size: ByteSize = ByteSize(512 * 1024 * 1024)
    allowed_types: list[FileType] = Field(default_factory=lambda: list(_ALL_TYPES))
    duplicates: Literal["skip", "refuse"] = "skip"
    max_filename_bytes: Annotated[int, Field(ge=16, le=240)] = 200

    @field_validator("max_file_size")
    @classmethod
    def _positive(cls, v: ByteSize) -> ByteSize:
        if v <= 0:
            raise ValueError("must be greater than 0 bytes")
        return v

    @field_validator("allowed_types")
    @classmethod
    def _nonempty(cls, v: list[FileType]) -> list[FileType]:
        if not v:
            raise ValueError("must name at least one type")
        return v


class TitlesConfig(_Section):
    placeholder_patterns: list[str] = Field(default_factory=list)

    @field_validator("placeholder_patterns")
    @classmethod
    def _compile(cls, v: list[str]) -> list[str]:
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from exc
        return v


class LogConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


class Config(_Section):
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    intake: IntakeConfig = Field(default_factory=IntakeConfig)
    titles: TitlesConfig = Field(default_factory=TitlesConfig)
    log: LogConfig = Field(default_factory=LogConfig)

    @model_validator(mode="after")
    def _paths_disjoint(self) -> Config:
        p = self.paths
        named = {
            "paths.archive": p.archive_dir,
            "paths.derived": p.derived_dir,
            "paths.spool": p.spool,
        }
        items = list(named.items())
        for i, (ka, a) in enumerate(items):
            for kb, b in items[i + 1 :]:
                if a == b or a in b.parents or b in a.parents:
                    raise ValueError(f"{ka} ({a}) and {kb} ({b}) must not overlap")
        return self


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _format_error(err: Any) -> str:
    loc = _format_loc(tuple(err.get("loc", ())))
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        return f"{loc}: unknown key (check the spelling against config/ingestd.example.toml)"
    if err.get("type") == "missing":
        return f"{loc}: required key is missing"
    value = err.get("input")
    shown = repr(value) if not isinstance(value, dict) else "a table"
    return f"{loc}: {msg[0].lower() + msg[1:] if msg else msg} (got {shown})"


def _resolve_relative(data: dict[str, Any], base: Path) -> None:
    # Relative paths are taken relative to the config file, not the working directory:
    # systemd and a shell would otherwise disagree about where the archive lives.
    paths = data.get("paths")
    if isinstance(paths, dict):
        for key, value in list(paths.items()):
            if isinstance(value, str) and value and not os.path.isabs(value):
                paths[key] = str(base / value)


def parse_config(
    data: dict[str, Any], *, source: str = "<config>", base: Path | None = None
) -> Config:
    """Validate an already-parsed TOML document."""
    if base is not None:
        _resolve_relative(data, base)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = [_format_error(e) for e in exc.errors()]
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
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{cfg_path}: not UTF-8 at byte {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{cfg_path}: TOML syntax error: {exc}") from None
    return parse_config(data, source=str(cfg_path), base=cfg_path.resolve().parent)
