"""What `ingestd check-config` checks on this machine, beyond the schema.

The schema (ingestd.config.settings) checks what a config file says, wherever it was written;
these checks need the host it will run on: installed OCR languages, the secret files
and environment variables the workers will read. Each problem is one line starting with
its key path, like the schema's.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from ingestd.config import notify as config_notify
from ingestd.config.filemodes import GROUP_READABLE, read_secret_file
from ingestd.config.settings import Config
from ingestd.errors import ConfigError, IngestdError
from ingestd.runtime import statedir


def machine_problems(config: Config, installed_languages: Callable[[], set[str]]) -> list[str]:
    """Every problem of ``config`` on this machine (empty: the runtime will find none).
    ``installed_languages`` lists tesseract's packs (the worker's wrapper of the program;
    an ``IngestdError`` from it is reported as a problem)."""
    return [*missing_ocr_languages(config, installed_languages), *secret_problems(config)]


def missing_ocr_languages(config: Config, installed_languages: Callable[[], set[str]]) -> list[str]:
    """analysis languages without an installed tesseract pack (checked here, where the
    machine is known, not in the schema: the config may be written on another host)."""
    a = config.analysis
    wanted = {"analysis.languages": a.languages}
    wanted |= {f"analysis.tenant_languages.{t}": v for t, v in a.tenant_languages.items()}
    try:
        installed = installed_languages()
    except IngestdError as exc:
        return [f"analysis.languages: cannot list tesseract's languages: {exc.message}"]
    return [
        f"{key}: tesseract language {lang!r} is not installed "
        f"(apt-get install tesseract-ocr-{lang.replace('_', '-')})"
        for key, langs in wanted.items()
        for lang in langs
        if lang not in installed
    ]


def secret_problems(config: Config) -> list[str]:
    """Secret files read as the runtime reads them (present, a regular file, readable,
    not open to others, not empty) and secret environment variables set here. A webhook
    whose secret is missing would fail every delivery, after the OCR ran."""
    problems: list[str] = []
    reader = statedir.owner(config.paths.state_dir)  # root here, the service user there
    for key, path in config.secret_files():
        try:
            read_secret_file(path, str(path), GROUP_READABLE)
        except ConfigError as exc:
            problems.append(f"{key}: {exc.message}")
            continue
        if reader is not None:
            denied = _unreadable_for(path, *reader)
            if denied is not None:
                problems.append(f"{key}: {path}: {denied}")
    problems.extend(_missing_secret_envs(config))
    return problems


def _missing_secret_envs(config: Config) -> list[str]:
    named: list[tuple[str, str]] = []
    for i, w in enumerate(config.workflows):
        hook = w.then.webhook
        if hook is not None and hook.secret_env is not None:
            named.append((f"workflows[{i}].then.webhook.secret_env", hook.secret_env))
    named.extend(config_notify.secret_envs(config.notify))
    return [
        f"{key}: environment variable {name} is not set here; the workers need it in "
        "theirs: set it in the unit (systemctl edit ingestd-worker@.service: Environment= "
        "or LoadCredential=) and export it for check-config"
        for key, name in named
        if not os.environ.get(name, "").rstrip("\r\n").strip()
    ]


def _unreadable_for(path: Path, uid: int, gid: int) -> str | None:
    """Why the service user (uid, gid: the state directory's owner) cannot read ``path``
    when root can, or None. Root reads anything; the workers do not run as root."""
    name = statedir.user_name(uid)
    try:
        groups = set(os.getgrouplist(name, gid))
    except (KeyError, OSError):
        groups = {gid}
    real = Path(os.path.realpath(path))
    for d in real.parents:
        if not _allowed(os.stat(d), uid, groups, 0o1):
            return f"the service user {name} cannot enter {d}"
    st = os.stat(real)
    if _allowed(st, uid, groups, 0o4):
        return None
    return (
        f"the service user {name} (owner of paths.state_dir) cannot read it (owner "
        f"{statedir.user_name(st.st_uid)}:{statedir.group_name(st.st_gid)}, mode "
        f"{stat.S_IMODE(st.st_mode):04o}); e.g. chown root:{statedir.group_name(gid)} "
        f"{path} and chmod 0640 {path}"
    )


def _allowed(st: os.stat_result, uid: int, groups: set[int], bit: int) -> bool:
    """Whether ``uid`` (in ``groups``) has ``bit`` (4 read, 1 search) on the inode."""
    if st.st_uid == uid:
        return bool(st.st_mode & (bit << 6))
    if st.st_gid in groups:
        return bool(st.st_mode & (bit << 3))
    return bool(st.st_mode & bit)
