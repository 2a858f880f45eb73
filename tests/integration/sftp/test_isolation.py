"""Account isolation: an account sees, reads, changes and deletes nothing but its own inbox.

scan1 and scan2 share a tenant; their inboxes are siblings on disk. Every escape attempt
must fail on the client with an SFTP error and leave a ``sftp.refused`` line naming the
account and the path; nothing of the other inbox (or the host) may change.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paramiko
import pytest

from tests.integration.sftp.conftest import Rig

REFUSAL_KEYS = {"reason", "path", "account", "tenant", "remote_ip", "op", "conn"}


# -- helpers --------------------------------------------------------------------------------
class Attempts:
    """Run one client call that must fail; return the refusal lines it produced."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig

    def fails(self, call: Callable[[], Any]) -> list[dict[str, Any]]:
        before = len(self.rig.logs("sftp.refused"))

        def run() -> None:
            out = call()
            if hasattr(out, "close"):  # an open() that wrongly succeeded: do not write
                out.close()

        # IOError is OSError; PermissionError and FileNotFoundError are subclasses.
        with pytest.raises(OSError):  # noqa: PT011 - any SFTP status error is the answer
            run()
        return self.rig.logs("sftp.refused")[before:]

    def refused(
        self, call: Callable[[], Any], reason: str | None = None, account: str = "scan1"
    ) -> dict[str, Any]:
        lines = self.fails(call)
        assert len(lines) == 1, lines
        line = lines[0]
        assert line.keys() >= REFUSAL_KEYS, line
        assert line["account"] == account
        assert line["tenant"] == "acme"
        assert line["remote_ip"] == "127.0.0.1"
        assert line["path"] not in ("", "?")
        if reason is not None:
            assert line["reason"] == reason, line
        return line


def _upload(sftp: paramiko.SFTPClient, name: str, data: bytes) -> None:
    with sftp.open(name, "w") as fh:
        fh.write(data)


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry below ``root`` with its bytes (None for directories and links)."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            out[rel] = p.read_bytes() if p.is_file() and not p.is_symlink() else None
    return out


def _symlinks(root: Path) -> list[Path]:
    return [
        Path(d, n)
        for d, dirs, files in os.walk(root)
        for n in dirs + files
        if Path(d, n).is_symlink()
    ]


@pytest.fixture
def rig2(rig: Rig) -> Rig:
    """The rig with scan2's files in place: a staged temp file and a pending upload.

    Intake is stopped first, so ``pending.pdf`` stays a pending spool entry (visible to
    scan2, claimable by nobody) for the whole test.
    """
    rig.service.loop.stop()
    with rig.paramiko("scan2") as sftp:
        _upload(sftp, "b.pdf.part", b"%PDF-1.4 scan2 temp bytes")
        _upload(sftp, "pending.pdf", b"%PDF-1.4 scan2 pending bytes")
        assert sorted(sftp.listdir("/")) == ["b.pdf.part", "pending.pdf"]
    return rig


def _scan2_state(rig: Rig) -> dict[str, Any]:
    entries = rig.spool.pending("scan2", "")
    return {
        "inbox": _tree(rig.spool.inbox_root / "scan2"),
        "pending": sorted(
            (e.filename, e.subdir, rig.spool.data_path(e).read_bytes()) for e in entries
        ),
    }


# -- scan1 against scan2 and the host ------------------------------------------------------
def test_account_cannot_reach_another_inbox(rig2: Rig) -> None:
    """scan1 can neither list, read, overwrite, rename, delete nor link into scan2's inbox."""
    rig = rig2
    before = _scan2_state(rig)
    assert before["inbox"] == {"b.pdf.part": b"%PDF-1.4 scan2 temp bytes"}
    assert before["pending"] == [("pending.pdf", "", b"%PDF-1.4 scan2 pending bytes")]
    a = Attempts(rig)
    with rig.paramiko("scan1") as sftp:
        _upload(sftp, "mine.pdf.part", b"scan1 temp bytes")
        # Listing the sibling inbox, relative and via the root.
        for path in ("../scan2", "/../scan2", "sub/../../scan2", "..", "/.."):
            line = a.refused(lambda p=path: sftp.listdir(p), "path_escape")
            assert line["path"] == path
        # Reading, stat-ing, overwriting and deleting scan2's files.
        a.refused(lambda: sftp.stat("../scan2/b.pdf.part"), "path_escape")
        a.refused(lambda: sftp.lstat("../scan2/pending.pdf"), "path_escape")
        a.refused(lambda: sftp.open("../scan2/b.pdf.part", "r"))
        a.refused(lambda: sftp.open("../scan2/b.pdf.part", "w"), "path_escape")
        a.refused(lambda: sftp.open("../scan2/pending.pdf", "a"), "path_escape")
        a.refused(lambda: sftp.open("../scan2/new.pdf", "w"), "path_escape")
        a.refused(lambda: sftp.remove("../scan2/b.pdf.part"), "path_escape")
        a.refused(lambda: sftp.remove("../scan2/pending.pdf"), "path_escape")
        a.refused(lambda: sftp.mkdir("../scan2/x"), "path_escape")
        a.refused(lambda: sftp.rmdir("../scan2"), "path_escape")
        a.refused(lambda: sftp.chmod("../scan2/b.pdf.part", 0o777))
        # Renames out of and into the other inbox.
        a.refused(lambda: sftp.rename("../scan2/b.pdf.part", "stolen.pdf"), "path_escape")
        a.refused(lambda: sftp.rename("../scan2/pending.pdf", "stolen2.pdf"), "path_escape")
        a.refused(lambda: sftp.posix_rename("../scan2/b.pdf.part", "stolen3.pdf"), "path_escape")
        a.refused(lambda: sftp.rename("mine.pdf.part", "../scan2/planted.pdf"), "path_escape")
        a.refused(lambda: sftp.posix_rename("mine.pdf.part", "../scan2/b.pdf.part"), "path_escape")
        # Changing directory above the root is refused too (realpath).
        a.refused(lambda: sftp.chdir(".."), "path_escape")
        a.refused(lambda: sftp.normalize("../scan2"), "path_escape")
        # Links: neither made nor read.
        a.refused(lambda: sftp.symlink("/etc/passwd", "x"), "symlink")
        a.refused(lambda: sftp.symlink("../scan2/b.pdf.part", "y"), "symlink")
        a.refused(lambda: sftp.readlink("mine.pdf.part"), "symlink")
        a.refused(lambda: sftp.readlink("../scan2/b.pdf.part"))
        # A NUL byte would cut the path short in any C library below us.
        for call in (
            lambda: sftp.open("a\x00b.pdf", "w"),
            lambda: sftp.stat("a\x00b.pdf"),
            lambda: sftp.listdir("a\x00/../../scan2"),
            lambda: sftp.remove("mine.pdf.part\x00"),
        ):
            line = a.refused(call, "nul_byte")
            assert "\\x00" in line["path"]
        # A drop box: even its own upload cannot be read back.
        a.refused(lambda: sftp.open("mine.pdf.part", "r"), "read_refused")
        a.refused(lambda: sftp.open("/etc/passwd", "r"), "read_refused")
        # Real host paths are taken inside the inbox: they do not exist there.
        for path in (str(rig.spool.inbox_root / "scan2"), "/etc", str(rig.spool.root)):
            with pytest.raises(FileNotFoundError):
                sftp.listdir(path)
        with pytest.raises(FileNotFoundError):
            sftp.stat(str(rig.spool.inbox_root / "scan2" / "b.pdf.part"))
        with pytest.raises(OSError):  # noqa: PT011
            sftp.remove(str(rig.spool.inbox_root / "scan2" / "b.pdf.part"))
        # What scan1 does see: its own inbox only.
        assert sorted(sftp.listdir("/")) == ["mine.pdf.part"]
        assert sorted(sftp.listdir(".")) == ["mine.pdf.part"]
        assert sftp.normalize(".") == "/"
        assert sftp.normalize("/etc/../x") == "/x"
    # scan2's files are byte-for-byte what scan2 uploaded; nothing new was queued.
    assert _scan2_state(rig) == before
    assert _tree(rig.spool.inbox_root / "scan1") == {"mine.pdf.part": b"scan1 temp bytes"}
    assert rig.spool.pending("scan1", "") == []
    assert rig.spool.snapshot()["pending"] == 1
    assert _symlinks(rig.spool.root) == []
    assert rig.documents() == []


def test_scan2_still_sees_its_files_after_the_attempts(rig2: Rig) -> None:
    """After scan1's failed attempts, scan2 still lists and completes its own upload."""
    rig = rig2
    with rig.paramiko("scan1") as sftp:
        for path in ("../scan2/b.pdf.part", "/../scan2/pending.pdf"):
            with pytest.raises(OSError):  # noqa: PT011
                sftp.remove(path)
    with rig.paramiko("scan2") as sftp:
        assert sorted(sftp.listdir("/")) == ["b.pdf.part", "pending.pdf"]
        sftp.rename("b.pdf.part", "b.pdf")
        assert sorted(sftp.listdir("/")) == ["b.pdf", "pending.pdf"]
    entries = rig.spool.pending("scan2", "")
    assert sorted(e.filename for e in entries) == ["b.pdf", "pending.pdf"]
    assert {rig.spool.data_path(e).read_bytes() for e in entries} == {
        b"%PDF-1.4 scan2 temp bytes",
        b"%PDF-1.4 scan2 pending bytes",
    }


def test_refused_rename_logs_the_escaping_target(rig2: Rig) -> None:
    """A rename refused because of its target names that target in the refusal line."""
    rig = rig2
    a = Attempts(rig)
    with rig.paramiko("scan1") as sftp:
        _upload(sftp, "mine.pdf.part", b"x")
        line = a.refused(
            lambda: sftp.rename("mine.pdf.part", "../scan2/planted.pdf"), "path_escape"
        )
    assert "../scan2/planted.pdf" in line["path"]


# -- symlinks planted by an admin ----------------------------------------------------------
@pytest.fixture
def planted(rig: Rig) -> dict[str, Path]:
    """Symlinks in scan1's inbox, made on disk as an admin might: to /etc and to files of
    our own outside the spool (the write attempts point there, never at /etc: we run as
    root in CI and a followed link must not be able to damage the host)."""
    outside = rig.root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"outside secret")
    inbox = rig.spool.inbox("scan1")
    links = {
        "etc_link": Path("/etc"),
        "dir_link": outside,
        "file_link": outside / "secret.txt",
        "dangling_link": outside / "missing.txt",
        "scan2_link": rig.spool.inbox("scan2"),
    }
    for name, target in links.items():
        os.symlink(target, inbox / name)
    return links


def test_planted_symlinks_are_refused_not_followed(rig: Rig, planted: dict[str, Path]) -> None:
    """Symlinks found in an inbox are hidden from listings and refused for every request."""
    outside = planted["dir_link"]
    before = _tree(outside)
    a = Attempts(rig)
    with rig.paramiko("scan1") as sftp:
        _upload(sftp, "mine.pdf.part", b"mine")
        assert sftp.listdir("/") == ["mine.pdf.part"]
        for name in planted:
            a.refused(lambda n=name: sftp.stat(n), "symlink")
            a.refused(lambda n=name: sftp.lstat(n), "symlink")
            a.refused(lambda n=name: sftp.remove(n), "symlink")
            a.refused(lambda n=name: sftp.open(n, "w"), "symlink")
            a.refused(lambda n=name: sftp.rename(n, "taken.pdf"), "symlink")
        for name in ("etc_link", "dir_link", "scan2_link"):
            a.refused(lambda n=name: sftp.listdir(n), "symlink")
            a.refused(lambda n=name: sftp.open(f"{n}/new.pdf", "w"), "symlink")
            a.refused(lambda n=name: sftp.mkdir(f"{n}/sub"), "symlink")
            a.refused(lambda n=name: sftp.rename("mine.pdf.part", f"{n}/moved.pdf"), "symlink")
            a.refused(lambda n=name: sftp.rmdir(n), "symlink")
        a.refused(lambda: sftp.stat("etc_link/passwd"), "symlink")
        a.refused(lambda: sftp.listdir("etc_link/ssh"), "symlink")
        a.refused(lambda: sftp.stat("dir_link/secret.txt"), "symlink")
        a.refused(lambda: sftp.remove("dir_link/secret.txt"), "symlink")
        a.refused(lambda: sftp.open("etc_link/passwd", "r"))
        a.refused(lambda: sftp.open("file_link", "r"))
        a.refused(lambda: sftp.readlink("file_link"), "symlink")
        assert sftp.listdir("/") == ["mine.pdf.part"]
    # Nothing outside was read into the spool, changed or removed; the links are intact.
    assert _tree(outside) == before
    inbox = rig.spool.inbox_root / "scan1"
    for name, target in planted.items():
        assert os.readlink(inbox / name) == str(target)
    assert rig.spool.snapshot()["pending"] == 0
    assert rig.documents() == []


def test_planted_symlink_gives_no_existence_oracle(rig: Rig, planted: dict[str, Path]) -> None:
    """Paths below a planted dir symlink are refused whether or not the target has them."""
    a = Attempts(rig)
    with rig.paramiko("scan1") as sftp:
        a.refused(lambda: sftp.stat("etc_link/passwd"), "symlink")
        a.refused(lambda: sftp.stat("etc_link/no-such-file-here"), "symlink")
        a.refused(lambda: sftp.listdir("etc_link/no-such-dir-here"), "symlink")
        a.refused(lambda: sftp.remove("scan2_link/no-such-file.pdf"), "symlink")


# -- OpenSSH sftp -b ------------------------------------------------------------------------
def _batch(rig: Rig, commands: list[str]) -> subprocess.CompletedProcess[str]:
    return rig.sftp_batch("scan1", commands)


def test_openssh_batch_escapes_fail(rig2: Rig) -> None:
    """OpenSSH sftp -b: cd .., get and ls of the other inbox fail and abort the batch."""
    rig = rig2
    upload = rig.root / "upload"
    local = rig.root / "local.bin"
    local.write_bytes(b"local")
    for cmd in (
        "cd ..",
        "cd /../scan2",
        "get ../scan2/b.pdf.part",
        "ls ../scan2",
        "get /etc/passwd",
        "rm ../scan2/b.pdf.part",
        "rename ../scan2/pending.pdf x.pdf",
        "symlink /etc/passwd x",
        "get ../scan2/pending.pdf",
    ):
        res = _batch(rig, [cmd, f"put {local} should-not-run.part"])
        assert res.returncode != 0, (cmd, res.stdout, res.stderr)
        assert "should-not-run" not in res.stdout
    assert not (rig.spool.inbox_root / "scan1" / "should-not-run.part").exists()
    assert sorted(p.name for p in upload.iterdir()) == []
    refusals = rig.logs("sftp.refused")
    assert {r["reason"] for r in refusals} >= {"path_escape", "symlink"}
    assert {r["account"] for r in refusals} == {"scan1"}
    assert _tree(rig.spool.inbox_root / "scan2") == {"b.pdf.part": b"%PDF-1.4 scan2 temp bytes"}


def test_openssh_batch_sees_only_its_inbox(rig2: Rig) -> None:
    """With '-' the batch goes on after a refused command; '/' stays the account's inbox."""
    rig = rig2
    local = rig.root / "local.bin"
    local.write_bytes(b"local")
    res = _batch(
        rig,
        [
            f"put {local} mine.part",
            "-cd ..",
            "-get ../scan2/b.pdf.part",
            "-get mine.part",
            "pwd",
            "ls -1 /",
        ],
    )
    assert res.returncode == 0, res.stderr
    assert "Remote working directory: /\n" in res.stdout
    listed = res.stdout.split("ls -1 /", 1)[1].split()
    assert listed == ["/mine.part"]
    # Neither the other account's file nor its own came back.
    assert sorted(p.name for p in (rig.root / "upload").iterdir()) == []
    reasons = [r["reason"] for r in rig.logs("sftp.refused")]
    assert "path_escape" in reasons and "read_refused" in reasons
