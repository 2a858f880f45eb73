"""Where a handed-out document is written: the destination (a directory, one new file,
or stdout), a private temp file beside it, and the no-overwrite link that gives the
verified copy its name."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

from ingestd.archive.handout_names import MAX_CLASH, clash_names
from ingestd.durable import fsync_dir
from ingestd.errors import ExitCode, IngestdError, NotFound, OutputUnusable, as_whom

TEMP_PREFIX = ".ingestd-get-"


class DestinationTaken(IngestdError):
    """``-o FILE`` names a file that exists: it is never overwritten."""

    exit_code = ExitCode.refused


class DestinationUnusable(OutputUnusable):
    """The destination cannot take the copy (no write permission, disk full): nothing was
    left there."""


@dataclass(frozen=True, slots=True)
class Destination:
    """Where the bytes go: a directory (the original name), one file, or stdout."""

    directory: Path | None = None
    file: Path | None = None
    stdout: BinaryIO | None = None

    @classmethod
    def parse(cls, output: str | None, stdout: BinaryIO) -> Destination:
        """``-o``'s value: ``-`` stdout, an existing directory, else a file to create
        (its directory must exist; an existing file is refused, never overwritten)."""
        if output == "-":
            return cls(stdout=stdout)
        path = Path(output) if output else Path.cwd()
        if _is_dir(path):
            return cls(directory=_writable(path))
        if output and output.endswith("/"):
            raise NotFound(f"{output}: no such directory")
        if not _is_dir(path.parent):
            raise NotFound(f"{path.parent}: no such directory")
        _writable(path.parent)
        if path.exists() or path.is_symlink():
            raise DestinationTaken(f"{path} exists; it is not overwritten (choose another name)")
        return cls(file=path)

    @property
    def where(self) -> Path:
        """The directory the temp file is made in."""
        if self.directory is not None:
            return self.directory
        assert self.file is not None
        return self.file.parent


def _is_dir(path: Path) -> bool:
    """Whether ``path`` is a directory; one this user may not even look at is refused
    here, not mistaken for "no such directory"."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except PermissionError as exc:
        raise DestinationUnusable(f"cannot reach {path}: {exc.strerror}{as_whom(exc)}") from None
    except (FileNotFoundError, NotADirectoryError):
        return False


def _writable(directory: Path) -> Path:
    """``directory``, if this user may create a file in it: refused before the database
    is asked anything, naming whom the command runs as."""
    if not os.access(directory, os.W_OK | os.X_OK):
        denied = PermissionError(13, "Permission denied")
        raise DestinationUnusable(
            f"cannot write into {directory}: {denied.strerror}{as_whom(denied)}"
        )
    return directory


@contextlib.contextmanager
def temp_copy(dest: Destination) -> Iterator[tuple[IO[bytes], Path | None]]:
    """A private temp file: beside the destination (removed unless it got its name), or
    anonymous for stdout."""
    if dest.stdout is not None:
        with tempfile.TemporaryFile() as f:
            yield f, None
        return
    try:
        fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=dest.where)
    except OSError as exc:
        raise DestinationUnusable(
            f"cannot write into {dest.where}: {exc.strerror}{as_whom(exc)}"
        ) from None
    path = Path(name)
    try:
        with os.fdopen(fd, "w+b") as f:
            yield f, path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def place(tmp: IO[bytes], tmp_path: Path, dest: Destination, name: str) -> Path:
    """Give the verified temp file its name without replacing anything: ``-o FILE``
    exactly (refused if it appeared meanwhile), in a directory the first free one of
    ``name``, ``name (2)``, ..."""
    os.fchmod(tmp.fileno(), 0o666 & ~umask())
    candidates: Any = [dest.file] if dest.file else (dest.where / n for n in clash_names(name))
    for target in candidates:
        try:
            os.link(tmp_path, target, follow_symlinks=False)
        except FileExistsError:
            if dest.file is not None:
                raise DestinationTaken(f"{target} exists; it is not overwritten") from None
            continue
        with contextlib.suppress(OSError):
            fsync_dir(Path(target).parent)
        return Path(target)
    raise DestinationTaken(
        f"{dest.where}: {name} and {MAX_CLASH - 1} numbered variants exist; choose -o FILE"
    )
