"""The configuration reference (docs/configuration.md), generated from the schema.

Walks ``Config``: one section per TOML table (nested tables, ``[[arrays]]`` of tables
such as ``[[sftp.accounts]]``, tables keyed by a name such as ``[split.<tenant>]``), one
row per key with its type, its default as TOML writes it and its description (the key's
docstring). Bounds, patterns and allowed values are read from the fields' annotations,
never written down twice; ``Shown`` metadata names a unit or a default the type alone
cannot tell. ``ingestd config-reference`` prints it, and a test keeps the file in
docs/ equal to what this makes.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import types
import typing
from collections.abc import Iterable, Sequence
from decimal import Decimal
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ByteSize
from pydantic.fields import FieldInfo

from ingestd.config.load import CONFIG_ENV, DEFAULT_CONFIG_PATH
from ingestd.config.rules import TENANT_NAME, Shown
from ingestd.config.settings import TESSERACT_LANG, Config

COMMAND = "ingestd config-reference"
DOC_PATH = "docs/configuration.md"

# Patterns that have a name; the pattern itself is shown too.
_NAMED_PATTERNS = {
    TENANT_NAME: ("tenant name", "tenant names"),
    TESSERACT_LANG: ("tesseract language", "tesseract languages"),
}
_CONSTRAINTS = ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclasses.dataclass(frozen=True)
class Key:
    """One key of a table: how the reference shows it."""

    name: str
    kind: str
    default: str  # Markdown: `toml`, "required" or "none"
    description: str


@dataclasses.dataclass(frozen=True)
class Table:
    """One TOML table: its path (``sftp.accounts``, ``split.<tenant>``) and keys."""

    path: str
    array: bool  # [[path]]
    depth: int
    description: str
    keys: tuple[Key, ...]

    @property
    def header(self) -> str:
        return f"[[{self.path}]]" if self.array else f"[{self.path}]"


@dataclasses.dataclass(frozen=True)
class _Sub:
    """A field whose value is a table (or tables) of its own."""

    model: type[BaseModel]
    array: bool = False
    placeholder: str | None = None  # [split.<tenant>]: one table per name
    optional: bool = False
    required: bool = False


# -- types --------------------------------------------------------------------------------


def _unwrap(tp: Any, meta: Iterable[Any] = ()) -> tuple[Any, list[Any]]:
    """The type inside ``Annotated`` layers, and all their metadata (FieldInfo flattened)."""
    found = list(meta)
    while typing.get_origin(tp) is Annotated:
        tp, *extra = typing.get_args(tp)
        found.extend(extra)
    flat: list[Any] = []
    for m in found:
        if isinstance(m, FieldInfo):
            flat.extend(m.metadata)
        else:
            flat.append(m)
    return tp, flat


def _constraints(meta: Iterable[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in meta:
        for name in _CONSTRAINTS:
            value = getattr(m, name, None)
            if value is not None:
                out[name] = value
    return out


def _shown(meta: Iterable[Any]) -> Shown:
    kind = default = None
    for m in meta:
        if isinstance(m, Shown):
            kind = m.kind or kind
            default = m.default or default
    return Shown(kind=kind, default=default)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _alternatives(tp: Any) -> list[Any]:
    """The members of a union (Annotated members unwrapped), without None."""
    out = []
    for arg in typing.get_args(tp):
        inner, _ = _unwrap(arg)
        if inner is not type(None):
            out.append(arg)
    return out


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _size(n: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} bytes"


def _bounds(c: dict[str, Any], show: typing.Callable[[Any], str] = _number) -> str:
    low = f"{show(c['ge'])}" if "ge" in c else f"> {show(c['gt'])}" if "gt" in c else None
    high = f"{show(c['le'])}" if "le" in c else f"< {show(c['lt'])}" if "lt" in c else None
    if low is not None and high is not None:
        if "ge" in c and "le" in c:
            return f"{low}–{high}"
        return f"{low if 'gt' in c else '≥ ' + low} and {high if 'lt' in c else '≤ ' + high}"
    if low is not None:
        return low if "gt" in c else f"≥ {low}"
    if high is not None:
        return high if "lt" in c else f"≤ {high}"
    return ""


def _length(c: dict[str, Any], unit: str) -> str:
    low, high = c.get("min_length"), c.get("max_length")
    if low is not None and high is not None:
        return f"{low}–{high} {unit}"
    if low is not None:
        return f"at least {low} {unit}" if low != 1 else "not empty"
    if high is not None:
        return f"at most {high} {unit}"
    return ""


def _values(values: Sequence[Any]) -> str:
    return ", ".join(f"`{_toml(v) if isinstance(v, bool) else v}`" for v in values)


def _join(noun: str, *parts: str, sep: str = " ") -> str:
    rest = ", ".join(p for p in parts if p)
    return f"{noun}{sep}{rest}" if rest else noun


def _list(noun: str, c: dict[str, Any]) -> str:
    length = _length(c, "entries")
    if length == "not empty":
        return f"non-empty {noun}"
    return _join(noun, length, sep=", ")


class _Kinds:
    """Human type names; a mixed union's tables point to the section of their keys."""

    def __init__(self, sections: dict[type[BaseModel], str]) -> None:
        self.sections = sections

    def kind(self, tp: Any, meta: Iterable[Any] = (), *, plural: bool = False) -> str:
        tp, meta = _unwrap(tp, meta)
        c = _constraints(meta)
        shown = _shown(meta)
        origin = typing.get_origin(tp)
        if shown.kind is not None and origin is list:
            return _list(shown.kind, c)
        if shown.kind is not None:
            return _join(shown.kind, _bounds(c), _length(c, "characters"), sep=", ")
        if _is_union(tp):
            alts = _alternatives(tp)
            if {_unwrap(a)[0] for a in alts} == {IPv4Network, IPv6Network}:
                return "CIDR networks" if plural else "CIDR network"
            if len(alts) == 1:
                return self.kind(alts[0], meta, plural=plural)
            return " or ".join(self.kind(a, plural=plural) for a in alts)
        if origin is Literal:
            values = typing.get_args(tp)
            if len(values) == 1:
                return _values(values)
            return f"{'values from' if plural else 'one of'} {_values(values)}"
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            members = [m.value for m in tp]
            return f"{'values from' if plural else 'one of'} {_values(members)}"
        if origin is list:
            (item,) = typing.get_args(tp)
            return _list(f"list of {self.kind(item, plural=True)}", c)
        if origin is dict:
            key, value = typing.get_args(tp)
            return f"table of {self.kind(key)} → {self.kind(value)}"
        if _is_model(tp):
            return f"a table with the keys of `[{self.sections[tp]}]`"
        if tp is bool:
            return "booleans" if plural else "boolean"
        if isinstance(tp, type) and issubclass(tp, ByteSize):
            noun = 'size (e.g. "512MiB") or number of bytes'
            return _join(noun, _bounds(c, lambda n: _size(int(n))), sep=", ")
        if tp is int:
            return _join("integers" if plural else "integer", _bounds(c))
        if tp is float or tp is Decimal:
            return _join("numbers" if plural else "number", _bounds(c))
        if tp is str:
            pattern = c.get("pattern")
            named = _NAMED_PATTERNS.get(pattern) if pattern is not None else None
            if named is not None:
                noun = f"{named[plural]} (`{pattern}`)"
            elif pattern is not None:
                noun = f"{'strings' if plural else 'string'} matching `{pattern}`"
            else:
                noun = "strings" if plural else "string"
            length = _length(c, "characters")
            if length == "not empty":
                return f"non-empty {noun}"
            return f"{noun} of {length}" if length else noun
        if tp is Path:
            return "paths" if plural else "path"
        if tp in (IPv4Network, IPv6Network):
            noun = "IPv4 network" if tp is IPv4Network else "IPv6 network"
            return noun + ("s" if plural else "")
        raise TypeError(f"no description for the type {tp!r}")


# -- defaults -----------------------------------------------------------------------------


def _toml(value: Any) -> str:
    """``value`` as a TOML file writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return _toml(value.value)
    if isinstance(value, ByteSize):
        text = _size(int(value))
        return str(int(value)) if text.endswith(" bytes") else json.dumps(text)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Path | IPv4Network | IPv6Network):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = (
            f"{k if _BARE_KEY.match(str(k)) else json.dumps(str(k))} = {_toml(v)}"
            for k, v in value.items()
        )
        return "{ " + ", ".join(items) + " }"
    raise TypeError(f"no TOML form for the default {value!r}")


def _default(field: FieldInfo) -> str:
    shown = _shown(field.metadata)
    if shown.default is not None:
        return shown.default
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    return "none" if value is None else f"`{_toml(value)}`"


# -- the walk -----------------------------------------------------------------------------


def _sub(field: FieldInfo) -> _Sub | None:
    """What table(s) a field's value is, if it is one: a model, an optional model, an
    array of tables or a table of them by name. A union of a table and a plain value
    (``split = false``) is a key."""
    tp, _ = _unwrap(field.annotation, field.metadata)
    if _is_union(tp):
        alts = _alternatives(tp)
        if len(alts) == 1 and _is_model(alts[0]):
            return _Sub(alts[0], optional=True)
        return None
    if _is_model(tp):
        return _Sub(tp, optional=field.default is None, required=field.is_required())
    args = typing.get_args(tp)
    if typing.get_origin(tp) is list and _is_model(args[0]):
        return _Sub(args[0], array=True)
    if typing.get_origin(tp) is dict and _is_model(args[1]):
        _, meta = _unwrap(args[0])
        named = _NAMED_PATTERNS.get(str(_constraints(meta).get("pattern")))
        return _Sub(args[1], placeholder=f"<{named[0].split()[0] if named else 'name'}>")
    return None


def _description(field: FieldInfo) -> str:
    return " ".join((field.description or "").split())


def _sections(model: type[BaseModel], path: str, out: dict[type[BaseModel], str]) -> None:
    for name, field in model.model_fields.items():
        sub = _sub(field)
        if sub is None:
            continue
        child = f"{path}.{name}" if path else name
        if sub.placeholder:
            child += f".{sub.placeholder}"
        out.setdefault(sub.model, child)
        _sections(sub.model, child, out)


def _presence(sub: _Sub, path: str) -> str:
    if sub.array:
        return f"Repeatable: one `[[{path}]]` table each (none by default)."
    if sub.placeholder:
        example = path.replace(sub.placeholder, "acme" if "tenant" in sub.placeholder else "x")
        return f"One table per {sub.placeholder[1:-1]}, e.g. `[{example}]` (none by default)."
    if sub.optional:
        return "Optional: absent unless given."
    if sub.required:
        return "Required."
    return ""


def tables(model: type[BaseModel] = Config) -> list[Table]:
    """Every table of ``model``'s schema, parents before their sub-tables."""
    sections: dict[type[BaseModel], str] = {}
    _sections(model, "", sections)
    kinds = _Kinds(sections)
    out: list[Table] = []

    def walk(m: type[BaseModel], path: str, array: bool, depth: int, intro: str) -> None:
        keys = []
        subs = []
        for name, field in m.model_fields.items():
            sub = _sub(field)
            if sub is not None:
                subs.append((name, field, sub))
                continue
            kind = kinds.kind(field.annotation, field.metadata)
            keys.append(Key(name, kind, _default(field), _description(field)))
        if path:
            out.append(Table(path, array, depth, intro, tuple(keys)))
        for name, field, sub in subs:
            child = f"{path}.{name}" if path else name
            if sub.placeholder:
                child += f".{sub.placeholder}"
            text = " ".join(p for p in (_description(field), _presence(sub, child)) if p)
            walk(sub.model, child, sub.array, depth + 1 if path else 0, text)

    walk(model, "", False, 0, "")
    return out


# -- Markdown -----------------------------------------------------------------------------


def _cell(text: str) -> str:
    """``text`` for a table cell: pipes escaped (in code spans too, as GFM wants), and
    ``<`` outside code spans, which would start an HTML tag (``<tenant>``)."""
    pieces = re.split(r"(`[^`]*`)", text.replace("|", "\\|"))
    return "".join(p if p.startswith("`") else p.replace("<", "\\<") for p in pieces)


HEADER = (
    f"<!-- Generated by `{COMMAND}` from the schema (ingestd/config/); do not edit by hand: "
    f"run `{COMMAND} --output {DOC_PATH}`. -->"
)


def render(model: type[BaseModel] = Config) -> str:
    """The reference as Markdown."""
    lines = [
        HEADER,
        "",
        "# Configuration reference",
        "",
        f"Every key of the configuration file (`{DEFAULT_CONFIG_PATH}`, or the file that "
        f"`--config` or `${CONFIG_ENV}` names), with its type, its default and what it "
        f"does, generated from the schema that `ingestd check-config` and every process "
        f"validate it with (`{COMMAND}` prints this). Unknown keys are errors, and "
        "`true`/`false` is never a number or a size. Sizes are a number of bytes or a "
        'string with a unit ("512 MiB", "4GiB"); durations are seconds.',
    ]
    for table in tables(model):
        lines += ["", f"{'#' * min(2 + table.depth, 4)} `{table.header}`", ""]
        if table.description:
            lines += [_cell(table.description), ""]
        if not table.keys:
            lines.append("Only the tables below.")
            continue
        lines += ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
        lines += [
            f"| `{k.name}` | {_cell(k.kind)} | {_cell(k.default)} | {_cell(k.description)} |"
            for k in table.keys
        ]
    return "\n".join(lines) + "\n"
