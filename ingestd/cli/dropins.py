"""``ingestd account add|remove`` and ``ingestd watch add|remove``: one conf.d drop-in per
scanner account and per hot folder, checked like ``check-config`` before it counts (a
change that fails is undone), then the running daemon is asked to reload.

The files are written by ingestd/config/dropin_files.py; what the config then is comes
from the one loader (ingestd/config/load.py), so the command and the daemon agree.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ingestd.cli.password_input import add_rounds_option
from ingestd.config import dropin_files
from ingestd.config.dropins import dropin_dir
from ingestd.config.load import default_config_path, load_config
from ingestd.config.settings import SFTP_USERNAME, Config
from ingestd.errors import ConfigError, ExitCode, NotFound, UsageError


def _config_path(args: argparse.Namespace) -> Path:
    return Path(args.config) if getattr(args, "config", None) else default_config_path()


def _current(config_path: Path) -> Config:
    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc.message}; the config must pass check-config before it is changed", exc.problems
        ) from None


def _check(config_path: Path) -> Config:
    """check-config's checks of the config as it now is (files, machine, secrets)."""
    from ingestd.ops import machine
    from worker.analysis.ocr import available_languages

    config = load_config(config_path)
    problems = machine.machine_problems(config, available_languages)
    if problems:
        raise ConfigError(f"{config_path}: {len(problems)} problem(s)", problems)
    return config


def _apply(config_path: Path, change: Callable[[], object], undo: Callable[[], object]) -> Config:
    """``change`` the drop-ins, check the result, ``undo`` it if the check fails."""
    change()
    try:
        return _check(config_path)
    except ConfigError as exc:
        undo()
        raise ConfigError(
            f"{exc.message}; the change was undone, the config is as it was", exc.problems
        ) from None


def _add_file(config_path: Path, path: Path, text: str) -> Config:
    """Write the new drop-in ``path``, check the whole config, remove it again if the
    check fails."""
    return _apply(
        config_path,
        lambda: dropin_files.write_new(config_path, path, text),
        lambda: dropin_files.remove(path),
    )


def _remove_file(config_path: Path, path: Path) -> Config:
    """Delete the drop-in ``path``, check the config without it, write it back if the
    check fails."""
    saved: list[str] = []
    return _apply(
        config_path,
        lambda: saved.append(dropin_files.remove(path)),
        lambda: dropin_files.write_new(config_path, path, saved[0]),
    )


def _reloaded(config: Config) -> None:
    from ingestd.daemon.reload_request import request_reload

    print(request_reload(config.paths.state_dir))


# -- account ------------------------------------------------------------------------------
def _read_keys(files: list[Path]) -> list[str]:
    keys: list[str] = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--key {f}: cannot read: {getattr(exc, 'strerror', exc)}") from None
        found = [
            line.strip()
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if not found:
            raise UsageError(f"--key {f}: no public key in it")
        keys += found
    return keys


def cmd_account_add(args: argparse.Namespace) -> int:
    from ingestd.cli.password_input import read_new_password
    from ingestd.passwords import hash_password

    config_path = _config_path(args)
    name: str = args.name
    if not re.fullmatch(SFTP_USERNAME, name):
        raise UsageError(
            f"{name!r} is not an account name: letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 64 characters"
        )
    current = _current(config_path)
    if any(a.username == name for a in current.sftp.accounts):
        where = dropin_files.account_file(config_path, name)
        raise ConfigError(
            f"account {name} exists already (in {where if where.exists() else config_path}); "
            "nothing was changed"
        )
    keys = _read_keys(args.key or [])
    password_hash = None
    if args.password_stdin or not keys:
        if not args.password_stdin and not sys.stdin.isatty():
            raise UsageError(
                "give the password on stdin with --password-stdin, or a public key with "
                "--key FILE (no terminal to ask at); nothing was changed"
            )
        password = read_new_password(stdin_only=args.password_stdin)
        if password is None:
            return ExitCode.usage
        password_hash = hash_password(password, args.rounds)
    path = dropin_files.account_file(config_path, name)
    text = dropin_files.render_account(name, args.tenant, password_hash, keys)
    config = _add_file(config_path, path, text)
    print(f"account {name} (tenant {args.tenant}) added: {path}")
    _reloaded(config)
    return ExitCode.ok


def cmd_account_remove(args: argparse.Namespace) -> int:
    config_path = _config_path(args)
    name: str = args.name
    path = dropin_files.account_file(config_path, name)
    if not path.is_file():
        current = _current(config_path)
        if any(a.username == name for a in current.sftp.accounts):
            raise ConfigError(
                f"account {name} is not in a drop-in of its own ({path}); remove its "
                f"[[sftp.accounts]] table where it is written ({config_path} or conf.d/)"
            )
        raise NotFound(f"no account {name}: {path} does not exist")
    config = _remove_file(config_path, path)
    print(f"account {name} removed ({path} deleted)")
    _reloaded(config)
    return ExitCode.ok


# -- watch --------------------------------------------------------------------------------
def _folder(text: str) -> Path:
    if not text.strip():
        raise UsageError("the folder path is empty")
    return Path(os.path.abspath(text))


def cmd_watch_add(args: argparse.Namespace) -> int:
    config_path = _config_path(args)
    folder = _folder(args.path)
    current = _current(config_path)
    if any(w.path == folder for w in current.watch):
        found = dropin_files.find_watch_file(config_path, folder)
        raise ConfigError(
            f"{folder} is a hot folder already (in {found or config_path}); nothing was changed"
        )
    path = dropin_files.watch_file(config_path, folder)
    text = dropin_files.render_watch(folder, args.tenant, args.tag or [], args.polling)
    config = _add_file(config_path, path, text)
    print(f"hot folder {folder} (tenant {args.tenant}) added: {path}")
    _reloaded(config)
    return ExitCode.ok


def cmd_watch_remove(args: argparse.Namespace) -> int:
    config_path = _config_path(args)
    folder = _folder(args.path)
    path = dropin_files.find_watch_file(config_path, folder)
    if path is None:
        current = _current(config_path)
        if any(w.path == folder for w in current.watch):
            raise ConfigError(
                f"{folder} is not in a drop-in of its own; remove its [[watch]] table where "
                f"it is written ({config_path} or conf.d/)"
            )
        raise NotFound(f"no hot folder {folder} in {dropin_dir(config_path)}")
    config = _remove_file(config_path, path)
    print(f"hot folder {folder} removed ({path} deleted); files in it stay where they are")
    _reloaded(config)
    return ExitCode.ok


# -- parsers ------------------------------------------------------------------------------
def add_account_parsers(asub: Any, common: argparse.ArgumentParser) -> None:
    """account add / account remove, below ``ingestd account`` (ingestd/cli/sftp.py)."""
    a = asub.add_parser(
        "add",
        parents=[common],
        help="add an SFTP account as conf.d/account-NAME.toml, check it, reload the daemon",
    )
    a.add_argument("name", metavar="NAME", help="the login name")
    a.add_argument("--tenant", required=True, metavar="T", help="the tenant its uploads go to")
    how = a.add_mutually_exclusive_group()
    how.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from one line of stdin (without it and --key: prompted)",
    )
    how.add_argument(
        "--key",
        type=Path,
        action="append",
        metavar="FILE",
        help="a public key file (authorized_keys lines) to log in with (repeatable)",
    )
    add_rounds_option(a)
    a.set_defaults(func=cmd_account_add)
    a = asub.add_parser(
        "remove",
        parents=[common],
        help="remove the SFTP account of conf.d/account-NAME.toml and reload the daemon",
    )
    a.add_argument("name", metavar="NAME", help="the login name")
    a.set_defaults(func=cmd_account_remove)


def add_watch_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """watch add / watch remove."""
    s = sub.add_parser("watch", parents=[common], help="hot folders kept as conf.d drop-ins")
    wsub = s.add_subparsers(dest="watch_cmd", required=True)
    a = wsub.add_parser(
        "add",
        parents=[common],
        help="add a hot folder as conf.d/watch-<slug>.toml, check it, reload the daemon",
    )
    a.add_argument("path", metavar="PATH", help="the folder to watch (absolute, or from here)")
    a.add_argument("--tenant", required=True, metavar="T", help="the tenant its files go to")
    a.add_argument(
        "--tag", action="append", metavar="TAG", help="a tag its documents get (repeatable)"
    )
    a.add_argument(
        "--polling", action="store_true", help="poll (network mounts: NFS, SMB) instead of inotify"
    )
    a.set_defaults(func=cmd_watch_add)
    a = wsub.add_parser(
        "remove",
        parents=[common],
        help="remove the hot folder's conf.d drop-in and reload the daemon",
    )
    a.add_argument("path", metavar="PATH", help="the watched folder")
    a.set_defaults(func=cmd_watch_remove)
