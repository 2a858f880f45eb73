"""conf.d/*.toml drop-ins: merged in name order into the config file, tables merged,
arrays of tables appended, a key set twice an error naming both files, broken or
symlinked drop-ins refused with their file, editor and dpkg leftovers ignored."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ingestd.config.load import load_config
from ingestd.errors import ConfigError

HASH = "$2b$04$" + "a" * 53


def _main(tmp_path: Path, extra: str = "") -> Path:
    cfg = tmp_path / "ingestd.toml"
    cfg.write_text(
        f"""
[paths]
state_dir = "{tmp_path}/state"
archive = "{tmp_path}/archive"
derived = "{tmp_path}/derived"
spool = "{tmp_path}/spool"

[sftp]
listen = "127.0.0.1:2222"
{extra}"""
    )
    (tmp_path / "conf.d").mkdir(exist_ok=True)
    return cfg


def _account(name: str, tenant: str = "acme") -> str:
    return (
        f'[[sftp.accounts]]\nusername = "{name}"\ntenant = "{tenant}"\npassword_hash = "{HASH}"\n'
    )


def _dropin(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "conf.d" / name
    path.write_text(text)
    return path


def _problems(cfg: Path) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    return exc.value.problems or [exc.value.message]


def test_dropins_append_accounts_and_watches_in_name_order(tmp_path: Path) -> None:
    """Arrays of tables from the main file and from drop-ins are appended, main file first,
    then drop-ins in name order; tables of different files merge key by key."""
    (tmp_path / "hot" / "a").mkdir(parents=True)
    (tmp_path / "hot" / "b").mkdir(parents=True)
    cfg = _main(tmp_path, _account("main-scan"))
    _dropin(tmp_path, "b-scan.toml", _account("b-scan"))
    _dropin(tmp_path, "a-scan.toml", _account("a-scan"))
    _dropin(tmp_path, "watch-b.toml", f'[[watch]]\npath = "{tmp_path}/hot/b"\ntenant = "acme"\n')
    _dropin(tmp_path, "watch-a.toml", f'[[watch]]\npath = "{tmp_path}/hot/a"\ntenant = "acme"\n')
    _dropin(tmp_path, "10-worker.toml", "[worker]\nmax_retries = 9\n")
    config = load_config(cfg)
    assert [a.username for a in config.sftp.accounts] == ["main-scan", "a-scan", "b-scan"]
    assert [w.path.name for w in config.watch] == ["a", "b"]
    assert config.worker.max_retries == 9
    assert config.sftp.listen == "127.0.0.1:2222"


def test_leftovers_and_hidden_files_are_ignored(tmp_path: Path) -> None:
    """Only *.toml that are not hidden are read: editor backups, swap files, dpkg's
    .dpkg-old/.dpkg-new and other names (all holding broken TOML here) are not."""
    cfg = _main(tmp_path)
    for name in (
        "x.toml~",
        ".x.toml.swp",
        "x.toml.dpkg-old",
        "x.toml.dpkg-new",
        ".hidden.toml",
        "README",
        "x.toml.bak",
    ):
        _dropin(tmp_path, name, "this is [not toml\n")
    _dropin(tmp_path, "ok.toml", _account("ok"))
    assert [a.username for a in load_config(cfg).sftp.accounts] == ["ok"]


def test_scalar_set_in_main_file_and_dropin_names_both(tmp_path: Path) -> None:
    """A key set in the main file and again in a drop-in is an error naming the key path
    and both files: no silent last-one-wins."""
    cfg = _main(tmp_path)
    drop = _dropin(tmp_path, "20-sftp.toml", '[sftp]\nlisten = "0.0.0.0:2222"\n')
    [problem] = _problems(cfg)
    assert problem.startswith("sftp.listen: set in both")
    assert str(cfg) in problem and str(drop) in problem


def test_scalar_set_in_two_dropins_names_both(tmp_path: Path) -> None:
    """The same key in two drop-ins is an error naming both drop-ins."""
    cfg = _main(tmp_path)
    one = _dropin(tmp_path, "10-a.toml", "[worker]\nmax_retries = 3\n")
    two = _dropin(tmp_path, "20-b.toml", "[worker]\nmax_retries = 4\n")
    [problem] = _problems(cfg)
    assert problem == (
        f"worker.max_retries: set in both {one} and {two} "
        "(a key may be set in one file only; remove one of them)"
    )


def test_invalid_toml_names_file_and_line(tmp_path: Path) -> None:
    """A drop-in that is not TOML is reported with its path and the line of the error."""
    cfg = _main(tmp_path)
    bad = _dropin(tmp_path, "account-x.toml", '[[sftp.accounts]]\nusername = "x"\ntenant = \n')
    [problem] = _problems(cfg)
    assert problem.startswith(f"{bad}: TOML syntax error")
    assert "line 3" in problem


def test_schema_error_in_dropin_names_the_dropin(tmp_path: Path) -> None:
    """A schema problem in an entry that came from a drop-in names that drop-in."""
    cfg = _main(tmp_path, _account("good"))
    bad = _dropin(tmp_path, "account-bad.toml", _account("bad", tenant="Not A Tenant!"))
    problems = _problems(cfg)
    assert any(p.startswith("sftp.accounts[1].tenant") and f"(in {bad})" in p for p in problems)


def test_symlinked_dropin_is_refused(tmp_path: Path) -> None:
    """A drop-in that is a symlink is refused, naming it; so is a symlinked conf.d."""
    cfg = _main(tmp_path)
    target = tmp_path / "elsewhere.toml"
    target.write_text(_account("linked"))
    (tmp_path / "conf.d" / "linked.toml").symlink_to(target)
    [problem] = _problems(cfg)
    assert "linked.toml: is a symlink; refused" in problem
    (tmp_path / "conf.d" / "linked.toml").unlink()
    (tmp_path / "conf.d").rmdir()
    (tmp_path / "real.d").mkdir()
    (tmp_path / "conf.d").symlink_to(tmp_path / "real.d")
    [problem] = _problems(cfg)
    assert "conf.d: is a symlink; refused" in problem


def test_check_config_reports_the_dropin(tmp_path: Path) -> None:
    """`ingestd check-config` fails (exit 3) and prints the drop-in's path and line."""
    cfg = _main(tmp_path)
    bad = _dropin(tmp_path, "watch-x.toml", "[[watch]\n")
    result = subprocess.run(
        [sys.executable, "-m", "ingestd.cli", "check-config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"{bad}: TOML syntax error" in result.stdout and "line 1" in result.stdout
