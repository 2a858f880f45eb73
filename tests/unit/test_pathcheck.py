"""Configured paths never alias (invariant 8): real directories, real symlinks and real
bind mounts (root; skipped with the reason where mounting is not allowed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ingestd.config.load import parse_config
from ingestd.config.pathcheck import ProtectedPaths, filesystem_problems, read_mounts
from ingestd.config.settings import Config
from ingestd.errors import ConfigError, SourceProtected
from tests.fixtures.bindmounts import BindMounts, bind

__all__ = ["bind"]  # the fixture, used by name


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A layout with the defaults nesting: state/{archive,derived,failed}, its own spool."""
    for d in ("state/archive/acme", "state/derived", "spool", "hot", "other"):
        (tmp_path / d).mkdir(parents=True)
    return tmp_path


def _config(root: Path, watch: list[dict[str, Any]] | None = None, **paths: Any) -> Config:
    p = {"state_dir": str(root / "state"), "spool": str(root / "spool")}
    p |= {k: str(v) for k, v in paths.items()}
    return parse_config({"paths": p, "watch": watch or []})


def _hot(path: Path, **extra: Any) -> dict[str, Any]:
    return {"path": str(path), "tenant": "acme", **extra}


def _one(problems: list[str], *needles: str) -> str:
    """The one problem that contains every needle."""
    hits = [p for p in problems if all(n in p for n in needles)]
    assert len(hits) == 1, f"{needles} in {problems}"
    return hits[0]


# -- what is allowed ----------------------------------------------------------------------
def test_the_default_nesting_passes(root: Path) -> None:
    """archive/derived/failed defaults below state_dir, a spool inside it: no problem."""
    cfg = _config(
        root,
        [_hot(root / "hot", done=str(root / "state" / "done"))],
        spool=root / "state" / "spool",
    )
    assert cfg.paths.archive_dir == root / "state" / "archive"
    assert filesystem_problems(cfg) == []


def test_a_symlinked_state_dir_nests_as_well(root: Path) -> None:
    """state_dir reached through a symlink: its defaults still nest, nothing is reported."""
    (root / "state-link").symlink_to(root / "state")
    cfg = _config(root, [_hot(root / "hot")], state_dir=root / "state-link")
    assert filesystem_problems(cfg) == []


def test_two_watches_of_one_tenant_share_their_failed_folder(root: Path) -> None:
    """Two hot folders of one tenant share <state_dir>/failed/<tenant> and a done folder."""
    done = str(root / "done")
    cfg = _config(root, [_hot(root / "hot", done=done), _hot(root / "other", done=done)])
    assert cfg.watch[0].failed_dir(cfg.paths.state_dir) == cfg.watch[1].failed_dir(root / "state")
    assert filesystem_problems(cfg) == []


# -- symlinks -----------------------------------------------------------------------------
def test_hot_folder_symlinked_into_the_archive(root: Path) -> None:
    """A hot folder that is a symlink into the archive names both keys and the link."""
    link = root / "hot-acme"
    link.symlink_to(root / "state" / "archive" / "acme")
    cfg = _config(root, [_hot(link)])  # the text check cannot see it
    archive = root / "state" / "archive"
    assert _one(filesystem_problems(cfg), "paths.archive") == (
        f"watch[0].path ({link}) is inside paths.archive ({archive}) "
        f"through a symlink ({link} -> {archive}/acme)"
    )


@pytest.mark.parametrize("key", ["state_dir", "spool"])
def test_hot_folder_symlinked_into_spool_or_state(root: Path, key: str) -> None:
    """A hot folder reaching the spool or the state dir through a symlink is refused."""
    target = root / ("state" if key == "state_dir" else "spool") / "inbox"
    target.mkdir()
    link = root / "hot-link"
    link.symlink_to(target)
    problem = _one(filesystem_problems(_config(root, [_hot(link)])), f"paths.{key}")
    assert problem.startswith(f"watch[0].path ({link}) is inside paths.{key} (")
    assert f"through a symlink ({link} -> {target})" in problem


def test_archive_symlinked_into_a_hot_folder(root: Path) -> None:
    """The other direction: an archive that really lives inside a hot folder."""
    (root / "hot" / "archive").mkdir()
    link = root / "archive-link"
    link.symlink_to(root / "hot" / "archive")
    problems = filesystem_problems(_config(root, [_hot(root / "hot")], archive=link))
    assert _one(problems, "watch[0].path", "paths.archive") == (
        f"watch[0].path ({root / 'hot'}) contains paths.archive ({link}) "
        f"through a symlink ({link} -> {root / 'hot' / 'archive'})"
    )


@pytest.mark.parametrize("key", ["done", "failed"])
def test_done_or_failed_symlinked_into_the_archive(root: Path, key: str) -> None:
    """A done or failed folder inside the archive (through a symlink) is refused."""
    link = root / f"{key}-link"
    link.symlink_to(root / "state" / "archive" / "acme")
    problems = filesystem_problems(_config(root, [_hot(root / "hot", **{key: str(link)})]))
    problem = _one(problems, f"watch[0].{key}", "paths.archive")
    assert problem.startswith(f"watch[0].{key} ({link}) is inside paths.archive (")
    assert "through a symlink" in problem


@pytest.mark.parametrize("key", ["done", "failed"])
def test_done_or_failed_written_inside_the_archive(root: Path, key: str) -> None:
    """Plainly inside the archive: already the text check (parse_config) refuses it."""
    inside = root / "state" / "archive" / key
    with pytest.raises(ConfigError) as exc:
        _config(root, [_hot(root / "hot", **{key: str(inside)})])
    assert _one(exc.value.problems, f"watch[0].{key}", "paths.archive") == (
        f"watch[0].{key} ({inside}) overlaps paths.archive ({root / 'state' / 'archive'}): "
        "it is inside it"
    )


def test_done_folder_symlinked_into_its_own_hot_folder(root: Path) -> None:
    """A watch's done folder that resolves into the folder it watches is refused."""
    (root / "hot" / "done").mkdir()
    link = root / "done-link"
    link.symlink_to(root / "hot" / "done")
    problems = filesystem_problems(_config(root, [_hot(root / "hot", done=str(link))]))
    assert _one(problems, "watch[0].done", "watch[0].path").startswith(
        f"watch[0].done ({link}) is inside watch[0].path ({root / 'hot'}) through a symlink"
    )


def test_two_hot_folders_alias_through_a_symlink(root: Path) -> None:
    """watch[1] reaching a sub-folder of watch[0] through a symlink is refused."""
    (root / "hot" / "sub").mkdir()
    link = root / "dept"
    link.symlink_to(root / "hot" / "sub")
    problems = filesystem_problems(_config(root, [_hot(root / "hot"), _hot(link)]))
    assert _one(problems, "watch[1].path", "watch[0].path").startswith(
        f"watch[1].path ({link}) is inside watch[0].path ({root / 'hot'}) through a symlink"
    )


def test_state_dir_inside_the_archive_is_the_wrong_way_round(root: Path) -> None:
    """archive may be inside state_dir, never state_dir inside the archive."""
    (root / "state" / "archive" / "state").mkdir()
    link = root / "state-link"
    link.symlink_to(root / "state" / "archive" / "state")
    cfg = _config(root, archive=root / "state" / "archive", state_dir=link)
    problem = _one(filesystem_problems(cfg), "paths.archive", "paths.state_dir")
    assert problem.startswith(
        f"paths.archive ({root / 'state' / 'archive'}) contains "
        f"paths.state_dir ({link}) through a symlink"
    )
    assert problem.endswith("(paths.archive may only be a sub-folder of paths.state_dir)")


def test_spool_and_state_dir_must_not_be_one_folder(root: Path) -> None:
    """The spool may be inside state_dir, but not be state_dir itself."""
    with pytest.raises(ConfigError) as exc:
        _config(root, spool=root / "state")
    _one(exc.value.problems, "paths.spool", "paths.state_dir", "they are the same folder")


# -- '..' ---------------------------------------------------------------------------------
def test_dotdot_in_the_text_is_caught_without_a_filesystem() -> None:
    """'..' no longer hides a hot folder inside the archive from the text check."""
    sneaky = "/srv/hot/../../var/lib/ingestd/archive/acme"
    with pytest.raises(ConfigError) as exc:
        parse_config({"watch": [{"path": sneaky, "tenant": "acme"}]})
    assert _one(exc.value.problems, "paths.archive") == (
        f"watch[0].path ({sneaky}) overlaps paths.archive (/var/lib/ingestd/archive): "
        f"it is inside it once '..' is resolved ({sneaky} is /var/lib/ingestd/archive/acme)"
    )


def test_dotdot_after_a_symlink_is_resolved_as_the_kernel_does(root: Path) -> None:
    """link/../x is the parent of the link's target, not the link's parent: caught."""
    (root / "state" / "archive" / "acme" / "2026").mkdir()
    (root / "in").symlink_to(root / "state" / "archive" / "acme" / "2026")
    path = f"{root}/in/../scans"  # the text says <root>/scans; the kernel: archive/acme/scans
    problems = filesystem_problems(_config(root, [{"path": path, "tenant": "acme"}]))
    problem = _one(problems, "watch[0].path", "paths.archive")
    assert f"through a symlink ({path} -> {root}/state/archive/acme/scans)" in problem


# -- bind mounts --------------------------------------------------------------------------
def test_hot_folder_bind_mounted_from_the_archive(root: Path, bind: BindMounts) -> None:
    """A hot folder that is a bind mount of an archive folder: same device and path."""
    archive = root / "state" / "archive"
    bind(archive / "acme", root / "hot")
    problem = _one(filesystem_problems(_config(root, [_hot(root / "hot")])), "paths.archive")
    assert problem.startswith(
        f"watch[0].path ({root / 'hot'}) is inside paths.archive "
        f"({archive}) through a bind mount (on device "
    )
    assert f"{root / 'hot'} is {archive / 'acme'} and {archive} is {archive})" in problem


def test_archive_bind_mounted_below_a_hot_folder(root: Path, bind: BindMounts) -> None:
    """The other direction: the archive shows up below a hot folder through a bind mount."""
    archive = root / "state" / "archive"
    bind(archive, root / "hot" / "scans")
    problem = _one(filesystem_problems(_config(root, [_hot(root / "hot")])), "paths.archive")
    assert problem.startswith(
        f"watch[0].path ({root / 'hot'}) contains paths.archive "
        f"({archive}) through a bind mount ({root / 'hot' / 'scans'} "
        f"shows {archive} of device "
    )


def test_two_hot_folders_are_one_through_a_bind_mount(root: Path, bind: BindMounts) -> None:
    """Two hot folders that are the same directory through a bind mount are refused."""
    bind(root / "hot", root / "other")
    problems = filesystem_problems(_config(root, [_hot(root / "hot"), _hot(root / "other")]))
    assert _one(problems, "watch[1].path", "watch[0].path").startswith(
        f"watch[1].path ({root / 'other'}) is the same folder as watch[0].path "
        f"({root / 'hot'}) through a bind mount"
    )


def test_inodes_catch_a_bind_mount_without_a_mount_table(root: Path, bind: BindMounts) -> None:
    """With no /proc/self/mountinfo, equal (st_dev, st_ino) still give the alias away."""
    archive = root / "state" / "archive"
    bind(archive, root / "hot")
    problems = filesystem_problems(_config(root, [_hot(root / "hot")]), mounts=())
    ino = os.stat(archive).st_ino
    assert _one(problems, "watch[0].path", "paths.archive") == (
        f"watch[0].path ({root / 'hot'}) is the same folder as paths.archive ({archive}) "
        f"through a bind mount (both are inode {ino} on device "
        f"{os.major(os.stat(archive).st_dev)}:{os.minor(os.stat(archive).st_dev)})"
    )


def test_mount_points_with_spaces_are_read_back(root: Path, bind: BindMounts) -> None:
    """mountinfo escapes (\\040 for a space) are decoded: the bind mount is found."""
    target = bind(root / "state" / "archive", root / "hot folder")
    [mount] = [m for m in read_mounts() if m.point == str(target)]
    assert mount.root.endswith("/state/archive")
    problems = filesystem_problems(_config(root, [_hot(target)]))
    _one(problems, "watch[0].path", "paths.archive", "through a bind mount")


# -- the runtime guard --------------------------------------------------------------------
@pytest.fixture
def guard(root: Path) -> ProtectedPaths:
    return ProtectedPaths.from_config(
        _config(root, [_hot(root / "hot")], spool=root / "state" / "spool")
    )


def test_guard_lets_hot_folder_files_go(root: Path, guard: ProtectedPaths) -> None:
    """A file in a plain hot folder may be removed."""
    guard.check(root / "hot" / "a.pdf", action="remove")


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ("state/archive/acme", "paths.archive"),
        ("state/derived", "paths.derived"),
        ("state", "paths.state_dir"),
    ],
)
def test_guard_refuses_files_in_protected_folders(
    root: Path, guard: ProtectedPaths, where: str, key: str
) -> None:
    """A source in the archive, derived or state directory is never removed."""
    with pytest.raises(SourceProtected) as exc:
        guard.check(root / where / "a.pdf", action="remove")
    assert exc.value.message.startswith(f"refusing to remove {root / where / 'a.pdf'}: ")
    assert f"inside {key} (" in exc.value.message


def test_guard_sees_a_hot_folder_swapped_for_a_symlink(root: Path, guard: ProtectedPaths) -> None:
    """A hot folder replaced by a symlink into the archive after start is refused."""
    (root / "hot").rmdir()
    (root / "hot").symlink_to(root / "state" / "archive" / "acme")
    with pytest.raises(SourceProtected, match=r"inside paths\.archive .* through a symlink"):
        guard.check(root / "hot" / "a.pdf", action="move")


def test_guard_sees_a_bind_mount_made_after_start(
    root: Path, guard: ProtectedPaths, bind: BindMounts
) -> None:
    """A bind mount of the archive over a hot folder after start is refused, and allowed
    again once it is unmounted (the mount table is read again after every change)."""
    guard.check(root / "hot" / "a.pdf", action="remove")
    target = bind(root / "state" / "archive" / "acme", root / "hot")
    with pytest.raises(SourceProtected, match=r"inside paths\.archive .* through a bind mount"):
        guard.check(root / "hot" / "2026" / "a.pdf", action="remove")
    bind.unmount(target)
    guard.check(root / "hot" / "2026" / "a.pdf", action="remove")


def test_guard_exempts_owned_files_only_inside_the_spool(root: Path, guard: ProtectedPaths) -> None:
    """Intake's own spool files may go although the spool is inside state_dir; an owned
    file elsewhere in state_dir, or a foreign one in the spool, may not."""
    spooled = root / "state" / "spool" / "queue" / "1.data"
    guard.check(spooled, action="remove", owned=True)
    with pytest.raises(SourceProtected, match=r"inside paths\.state_dir"):
        guard.check(spooled, action="remove", owned=False)
    with pytest.raises(SourceProtected, match=r"inside paths\.state_dir"):
        guard.check(root / "state" / "pgdata" / "x", action="remove", owned=True)


def test_guard_protects_an_archive_created_after_start(tmp_path: Path) -> None:
    """An archive that did not exist when the guard was built is protected once it does,
    also when it is created as a symlink to somewhere else."""
    (tmp_path / "elsewhere").mkdir()
    cfg = parse_config(
        {"paths": {"state_dir": str(tmp_path / "state"), "archive": str(tmp_path / "archive")}}
    )
    guard = ProtectedPaths.from_config(cfg)
    (tmp_path / "archive").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SourceProtected, match=r"inside paths\.archive"):
        guard.check(tmp_path / "elsewhere" / "a.pdf", action="remove")
