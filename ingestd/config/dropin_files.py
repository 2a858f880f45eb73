"""Writing and removing the drop-ins of ``ingestd account add|remove`` and ``ingestd watch
add|remove``: one file per scanner account (``conf.d/account-NAME.toml``) and per hot
folder (``conf.d/watch-<slug>.toml``).

A drop-in appears whole or not at all: it is written to a hidden temporary file in
``conf.d/`` (hidden names are never read, ingestd/config/dropins.py), given mode 0640 and
the group of the config file (root:ingestd on a packaged system), fsynced, then linked to
its name, which fails rather than replace a file already there; the directory is fsynced
after each change so that a crash right after the command leaves what it reported.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import tomllib
from collections.abc import Iterable
from pathlib import Path

from ingestd import durable
from ingestd.config.dropins import dropin_dir
from ingestd.errors import ConfigError

MODE = 0o640

# Written at the top of every generated drop-in.
_HEADER = "# Written by `{command}`; `{undo}` removes it.\n"


def _toml(value: str | list[str] | bool) -> str:
    # A JSON string (ASCII, \\uXXXX escapes) is a TOML basic string; a list of them an array.
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=True)


def account_file(config_path: Path, username: str) -> Path:
    return dropin_dir(config_path) / f"account-{username}.toml"


def slug(path: Path) -> str:
    """A file-name form of a folder path: ``/srv/hot/acme/Buchhaltung`` ->
    ``srv-hot-acme-buchhaltung``; a long path keeps its last 80 characters (the folder's
    own name says most); a short hash when nothing of the path is left."""
    text = re.sub(r"[^a-z0-9]+", "-", str(path).lower()).strip("-")[-80:].strip("-")
    return text or hashlib.sha256(str(path).encode()).hexdigest()[:12]


def watch_path_of(path: Path) -> Path | None:
    """The folder of the one ``[[watch]]`` a drop-in holds, if it holds exactly one."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    watches = data.get("watch")
    if isinstance(watches, list) and len(watches) == 1 and isinstance(watches[0], dict):
        value = watches[0].get("path")
        return Path(value) if isinstance(value, str) else None
    return None


def watch_file(config_path: Path, folder: Path) -> Path:
    """The drop-in name for ``folder``: ``watch-<slug>.toml``, with a hash of the path
    added when another folder's drop-in already has that name (``/a b`` and ``/a-b``)."""
    directory = dropin_dir(config_path)
    name = directory / f"watch-{slug(folder)}.toml"
    if name.exists() and watch_path_of(name) != folder:
        digest = hashlib.sha256(str(folder).encode()).hexdigest()[:8]
        name = directory / f"watch-{slug(folder)}-{digest}.toml"
    return name


def find_watch_file(config_path: Path, folder: Path) -> Path | None:
    """The drop-in of ``conf.d/watch-*.toml`` whose one ``[[watch]]`` is ``folder``."""
    directory = dropin_dir(config_path)
    if not directory.is_dir():
        return None
    for candidate in sorted(directory.glob("watch-*.toml")):
        if watch_path_of(candidate) == folder:
            return candidate
    return None


def render_account(
    username: str, tenant: str, password_hash: str | None, keys: Iterable[str]
) -> str:
    lines = [
        _HEADER.format(
            command=f"ingestd account add {username}", undo=f"ingestd account remove {username}"
        ),
        "[[sftp.accounts]]",
        f"username = {_toml(username)}",
        f"tenant = {_toml(tenant)}",
    ]
    if password_hash is not None:
        lines.append(f"password_hash = {_toml(password_hash)}")
    keys = list(keys)
    if keys:
        lines.append(f"authorized_keys = {_toml(keys)}")
    return "\n".join(lines) + "\n"


def render_watch(folder: Path, tenant: str, tags: list[str], polling: bool) -> str:
    lines = [
        _HEADER.format(
            command=f"ingestd watch add {folder}", undo=f"ingestd watch remove {folder}"
        ),
        "[[watch]]",
        f"path = {_toml(str(folder))}",
        f"tenant = {_toml(tenant)}",
    ]
    if tags:
        lines.append(f"tags = {_toml(tags)}")
    if polling:
        lines.append("polling = true")
    return "\n".join(lines) + "\n"


def _group_of(config_path: Path) -> int | None:
    """The group drop-ins get: the config file's (only root may give a file away)."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(OSError):
        return os.stat(config_path).st_gid
    return None


def ensure_dir(config_path: Path) -> Path:
    """conf.d/ beside ``config_path``, made (0750, the config file's group) if missing."""
    directory = dropin_dir(config_path)
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        try:
            directory.mkdir(mode=0o750)
        except OSError as exc:
            raise ConfigError(f"{directory}: cannot create: {exc.strerror}") from None
        gid = _group_of(config_path)
        if gid is not None:
            os.chown(directory, -1, gid)
        durable.fsync_dir(directory.parent)
        return directory
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{directory}: not a directory (a symlink is refused)")
    return directory


def write_new(config_path: Path, path: Path, text: str) -> None:
    """Write ``text`` to the drop-in ``path`` whole or not at all (durable.publish_new:
    a hidden temp file, fsynced, given mode 0640 and the config file's group, linked to
    its name, the directory fsynced); a ConfigError if a file of that name is there."""
    ensure_dir(config_path)
    gid = _group_of(config_path)

    def prepare(tmp: Path) -> None:
        os.chmod(tmp, MODE)  # whatever the umask
        if gid is not None:
            os.chown(tmp, -1, gid)

    try:
        made = durable.publish_new(path, text.encode("utf-8"), MODE, prepare=prepare)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc.strerror}") from None
    if not made:
        raise ConfigError(f"{path}: already exists; nothing was changed")


def remove(path: Path) -> str:
    """Remove the drop-in ``path`` (fsynced); its text, to put it back if need be."""
    try:
        text = path.read_text(encoding="utf-8")
        path.unlink()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot remove: {exc.strerror}") from None
    durable.fsync_dir(path.parent)
    return text
