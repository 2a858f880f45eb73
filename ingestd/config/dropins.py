"""Drop-in config files: ``conf.d/*.toml`` beside the config file, merged into it.

A package upgrade replaces what the package ships (``ingestd.toml``, a dpkg conffile) only
when the administrator left it alone; accounts, hot folders and notification routes kept
in ``conf.d/`` are never the package's, so an upgrade asks nothing. The rules:

- the files of ``conf.d/`` whose names end in ``.toml`` and do not start with a dot are
  read in name order (``10-db.toml`` before ``account-scan1.toml``); everything else
  (editor backups ``x.toml~``, ``.x.toml.swp``, ``x.toml.dpkg-old``/``.dpkg-new``, READMEs)
  is ignored;
- tables merge; arrays of tables (``[[sftp.accounts]]``, ``[[watch]]``, ``[[notify]]``...)
  append, the main file's entries first;
- any other key (a scalar, or a plain array such as ``analysis.languages``) set in two
  files is an error naming both files and the key path: no silent "last one wins";
- a drop-in that is a symlink or not a regular file is refused (``conf.d`` too), as
  configured paths are (ingestd/config/pathcheck.py);
- a drop-in that is not valid TOML is reported with its file and line.

``Origins`` remembers which file each key and each array-of-tables entry came from, so a
schema error found after the merge names the drop-in it is in.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingestd.errors import ConfigError

DIR_NAME = "conf.d"
SUFFIX = ".toml"

Loc = tuple[str | int, ...]


def dropin_dir(config_path: Path) -> Path:
    """The drop-in directory of the config file ``config_path``."""
    return config_path.parent / DIR_NAME


def is_dropin_name(name: str) -> bool:
    """Whether a file called ``name`` in conf.d/ is read: ``*.toml``, not hidden. Editor
    and dpkg leftovers (``~``, ``.swp``, ``.dpkg-old``, ``.dpkg-new``, ``.dpkg-dist``) do
    not end in ``.toml`` and so are never read."""
    return name.endswith(SUFFIX) and not name.startswith(".") and len(name) > len(SUFFIX)


def dropin_files(directory: Path) -> list[Path]:
    """The drop-ins of ``directory`` in name order; none if it does not exist. A
    ConfigError if it (or one of its ``*.toml``) is a symlink or of the wrong kind."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"{directory}: cannot read: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(
            f"{directory}: is a symlink; refused (make it a directory of its own, "
            "as every configured path must be)"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{directory}: not a directory")
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise ConfigError(f"{directory}: cannot read: {exc.strerror}") from None
    return [directory / n for n in names if is_dropin_name(n)]


def read_dropin(path: Path) -> bytes:
    """The bytes of one drop-in, opened without following a symlink; a ConfigError naming
    the file if it is a symlink, not a regular file or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
            raise ConfigError(
                f"{path}: is a symlink; refused (put the file itself in {path.parent})"
            ) from None
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path}: not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


def _key_path(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _is_table_array(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


@dataclass
class Origins:
    """Which file set each key (and each entry of an array of tables) of a merged config."""

    main: str
    files: dict[Loc, str] = field(default_factory=dict)

    def record(self, data: dict[str, Any], source: str, prefix: Loc = ()) -> None:
        for key, value in data.items():
            loc = (*prefix, key)
            if isinstance(value, dict):
                self.record(value, source, loc)
            elif _is_table_array(value):
                for i, entry in enumerate(value):
                    self.files[(*loc, i)] = source
                    self.record(entry, source, (*loc, i))
            else:
                self.files[loc] = source

    def of(self, loc: Loc) -> str | None:
        """The drop-in the key at ``loc`` (or the entry it is in) came from; None for the
        main file or an unknown key."""
        for n in range(len(loc), 0, -1):
            found = self.files.get(tuple(loc[:n]))
            if found is not None:
                return None if found == self.main else found
        return None

    def annotate(self, problem: str) -> str:
        """``problem`` (a line starting with a key path) with the drop-in it is in."""
        loc = loc_from_text(problem)
        source = self.of(loc) if loc else None
        return f"{problem} (in {source})" if source else problem


_KEY_PATH = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z_][A-Za-z0-9_\-]*|\[\d+\])*)")
_PART = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]")


def loc_from_text(text: str) -> Loc:
    """The key path a problem line starts with (``watch[1].path: ...``) as a loc."""
    m = _KEY_PATH.match(text)
    if not m:
        return ()
    return tuple(
        int(p.group(2)) if p.group(2) is not None else p.group(1)
        for p in _PART.finditer(m.group(1))
    )


def merge(
    base: dict[str, Any], extra: dict[str, Any], source: str, origins: Origins, prefix: Loc = ()
) -> list[str]:
    """Merge ``extra`` (read from ``source``) into ``base`` in place; the problems (keys set
    twice, a table in one file and a value in the other), each naming both files."""
    problems: list[str] = []
    for key, value in extra.items():
        loc = (*prefix, key)
        if key not in base:
            base[key] = value
            origins.record({key: value}, source, prefix)
            continue
        old = base[key]
        if isinstance(old, dict) and isinstance(value, dict):
            problems += merge(old, value, source, origins, loc)
        elif (
            isinstance(old, list)
            and isinstance(value, list)
            and all(isinstance(v, dict) for v in old + value)
            and (old or value)
        ):
            for i, entry in enumerate(value):
                origins.files[(*loc, len(old) + i)] = source
                origins.record(entry, source, (*loc, len(old) + i))
            old.extend(value)
        else:
            first = origins.files.get(loc) or _first_of(origins, loc) or origins.main
            problems.append(
                f"{_key_path(loc)}: set in both {first} and {source} "
                "(a key may be set in one file only; remove one of them)"
            )
    return problems


def _first_of(origins: Origins, loc: Loc) -> str | None:
    for other, source in origins.files.items():
        if other[: len(loc)] == loc:
            return source
    return None


def merge_dropins(
    data: dict[str, Any],
    config_path: Path,
    parse: Callable[[Path, bytes], dict[str, Any]],
    resolve: Callable[[dict[str, Any], Path], None],
) -> Origins:
    """Merge the drop-ins of ``config_path``'s conf.d/ into ``data`` (the main file's
    parsed document, its relative paths resolved). ``parse`` turns a file's bytes into a
    document (ConfigError with the file and line on a syntax error) and ``resolve`` makes
    its relative paths absolute against the drop-in's directory. A ConfigError listing
    every problem of every drop-in, each naming its file."""
    origins = Origins(main=str(config_path))
    origins.record(data, origins.main)
    problems: list[str] = []
    for path in dropin_files(dropin_dir(config_path)):
        try:
            extra = parse(path, read_dropin(path))
        except ConfigError as exc:
            problems.append(exc.message)
            continue
        resolve(extra, path.parent)
        problems += merge(data, extra, str(path), origins)
    if problems:
        raise ConfigError(f"{config_path}: {len(problems)} problem(s)", problems)
    return origins
