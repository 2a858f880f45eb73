"""The WORM archive: streamed SHA-256, atomic no-overwrite placement, read-only files.

Layout: ``<root>/<tenant>/<yyyy>/<mm>/<sha256>.<ext>``. A file is first copied into a
temp file *in its target directory* (same filesystem, so the final step is a link),
hashed while copying, fsynced and made 0440; then hard-linked to its final name, which
fails instead of overwriting if the name exists, and the directory is fsynced. Only
after that may a database row point at it.

``ArchiveStore`` is the seam for other backends (S3 with Object Lock in compliance mode
is the natural WORM equivalent); intake only speaks to the protocol.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from ingestd.durable import fsync_dir
from ingestd.errors import ArchiveError, ExitCode, IngestdError
from ingestd.runtime import statedir

TEMP_PREFIX = ".tmp-"
CHUNK = 1024 * 1024
FILE_MODE = 0o440
DIR_MODE = 0o750


class TooLarge(IngestdError):
    """Permanent: the source grew past the size limit while it was being copied."""

    exit_code = ExitCode.refused


@dataclass(frozen=True, slots=True)
class StagedFile:
    """A complete, fsynced copy with its hash, not yet under its final name."""

    tenant: str
    temp_path: Path
    target_dir: Path
    relative_dir: str
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class ArchivedFile:
    relpath: str
    sha256: str
    size: int
    reused: bool  # an identical file was already there (crash recovery); not rewritten


@dataclass(frozen=True, slots=True)
class StoredFacts:
    """What the store can say about one stored file, for ``verify``."""

    regular: bool  # a file as the store writes it (not a link, directory or device)
    size: int
    mode: int  # permission bits as stored (0440 when nothing changed them)


class ArchiveStore(Protocol):
    """Everything the rest of ingestd does with archived files; nothing outside the
    archive package touches their paths."""

    # -- intake: store a file (stage it, then commit or discard) -----------------------
    def stage(self, tenant: str, src_fd: int, *, max_bytes: int, when: datetime) -> StagedFile: ...
    def adopt(
        self, tenant: str, src_path: Path, src_fd: int, *, max_bytes: int, when: datetime
    ) -> StagedFile: ...
    def commit(self, staged: StagedFile, extension: str) -> ArchivedFile: ...
    def discard(self, staged: StagedFile, *, prune_dirs: bool = False) -> None: ...

    # -- analysis: read a file as a local path (a remote backend would fetch it) --------
    def reading(self, relpath: str) -> contextlib.AbstractContextManager[Path]: ...

    # -- lifecycle: a tenant's room, a purged document, a deleted tenant ----------------
    def prepare_tenant(self, tenant: str) -> None: ...
    def remove(self, relpath: str) -> bool: ...
    def remove_tenant(self, tenant: str) -> int: ...
    def extend_retention(self, relpath: str, until: datetime) -> bool: ...

    # -- verify -------------------------------------------------------------------------
    def iter_files(self) -> Iterator[str]: ...
    def inspect(self, relpath: str) -> StoredFacts | None: ...
    def sha256(self, relpath: str) -> str | None: ...


def makedirs_durable(
    path: Path, mode: int = DIR_MODE, owner: tuple[int, int] | None = None
) -> None:
    """mkdir -p where every newly created entry is fsynced into its parent (and given to
    ``owner``, if set)."""
    if path.is_dir():
        return
    makedirs_durable(path.parent, mode, owner)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return
    if owner is not None:
        os.chown(path, *owner, follow_symlinks=False)
    # Only when a directory is new (a tenant's first file of a month): the fsync of the
    # directory a file is linked in does not make that directory's own name durable.
    fsync_dir(path.parent)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(view):
            digest.update(view[:n])
    return digest.hexdigest()


class LocalArchive:
    """WORM store on a local (or mounted) POSIX filesystem."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        # Root running `ingestd ingest` must not leave root-owned month directories (or
        # 0440 root:root files) that the daemon and workers, running as the archive's
        # owner, can then neither write into nor read: what root makes is the owner's.
        existing = self.root
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent  # not made yet: its parent's owner is the one
        self._owner = statedir.owner(existing)

    def path_of(self, relpath: str) -> Path:
        path = (self.root / relpath).resolve()
        if self.root.resolve() not in path.parents:
            raise ArchiveError(f"archive path escapes the archive root: {relpath!r}")
        return path

    def _target_dir(self, tenant: str, when: datetime) -> tuple[str, Path, Path]:
        relative_dir = f"{tenant}/{when:%Y}/{when:%m}"
        target_dir = self.root / relative_dir
        try:
            makedirs_durable(target_dir, owner=self._owner)
        except OSError as exc:
            raise ArchiveError(f"cannot create {target_dir}: {exc.strerror}") from exc
        return relative_dir, target_dir, target_dir / f"{TEMP_PREFIX}{secrets.token_hex(8)}"

    def stage(self, tenant: str, src_fd: int, *, max_bytes: int, when: datetime) -> StagedFile:
        relative_dir, target_dir, temp_path = self._target_dir(tenant, when)
        try:
            out = os.open(
                temp_path,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
        except OSError as exc:
            raise ArchiveError(f"cannot create a file in {target_dir}: {exc.strerror}") from exc
        try:
            sha256, size = hash_fd(src_fd, max_bytes, out)
            # Read-only before it ever gets its final name: there is no instant at which
            # the archived name refers to a writable file.
            os.fchmod(out, FILE_MODE)
            if self._owner is not None:
                os.fchown(out, *self._owner)
            # The one flush of the file, after the mode and owner changed so that it
            # covers them too: bytes, 0440 and owner are on disk before commit() links
            # the name (a crash can then never leave a short or writable WORM file).
            os.fsync(out)
        except BaseException as exc:
            os.close(out)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_path)
            if isinstance(exc, OSError):
                raise ArchiveError(f"cannot write {temp_path}: {exc.strerror}") from exc
            raise
        os.close(out)
        return StagedFile(tenant, temp_path, target_dir, relative_dir, sha256, size)

    def adopt(
        self, tenant: str, src_path: Path, src_fd: int, *, max_bytes: int, when: datetime
    ) -> StagedFile:
        """Stage a file ingestd itself wrote and fsynced (the SFTP spool) by hard-linking it.

        Hashing reads it (usually from the page cache); the bytes are not written a
        second time. The source name stays until intake removes it after COMMIT, so a
        crash in between still finds the upload in the spool. Falls back to a copy when
        the archive is on another filesystem.
        """
        relative_dir, target_dir, temp_path = self._target_dir(tenant, when)
        sha256, size = hash_fd(src_fd, max_bytes, None)
        try:
            os.link(src_path, temp_path, follow_symlinks=False)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                return self.stage(tenant, src_fd, max_bytes=max_bytes, when=when)
            raise ArchiveError(f"cannot link into {target_dir}: {exc.strerror}") from exc
        try:
            st, linked = os.fstat(src_fd), os.lstat(temp_path)
            if (st.st_dev, st.st_ino) != (linked.st_dev, linked.st_ino):
                raise ArchiveError(f"{src_path} was replaced while it was archived")
            os.fchmod(src_fd, FILE_MODE)
            # The mode change must be on disk before commit() links the name (the bytes
            # were fsynced at upload).
            os.fsync(src_fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_path)
            raise
        return StagedFile(tenant, temp_path, target_dir, relative_dir, sha256, size)

    def commit(self, staged: StagedFile, extension: str) -> ArchivedFile:
        name = f"{staged.sha256}.{extension}"
        final = staged.target_dir / name
        relpath = f"{staged.relative_dir}/{name}"
        reused = False
        try:
            # link(2) never replaces an existing name: no-overwrite by construction.
            os.link(staged.temp_path, final, follow_symlinks=False)
        except FileExistsError:
            self._check_existing(final, staged)
            reused = True
        except OSError as exc:
            raise ArchiveError(f"cannot link {final}: {exc.strerror}") from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged.temp_path)
        # The one flush of the directory, after both changes to it: the new name must be
        # on disk before the caller's COMMIT makes a row point at it; the temp name's
        # removal rides along.
        fsync_dir(staged.target_dir)
        return ArchivedFile(relpath, staged.sha256, staged.size, reused)

    def _check_existing(self, final: Path, staged: StagedFile) -> None:
        # Same name means same content unless the archive was damaged. Re-hash (rare:
        # only crash recovery gets here) and never overwrite: verify reports the damage.
        st = os.lstat(final)
        if not stat.S_ISREG(st.st_mode):
            raise ArchiveError(f"archive entry {final} exists and is not a regular file")
        if st.st_size != staged.size or sha256_of(final) != staged.sha256:
            raise ArchiveError(
                f"archive file {final} exists with different content; refusing to overwrite "
                "(run 'ingestd verify')"
            )

    def discard(self, staged: StagedFile, *, prune_dirs: bool = False) -> None:
        """Remove a staged file; with ``prune_dirs`` also its directories up to the tenant's
        root while they are empty (staging for a tenant being deleted must not leave the
        directories it re-created behind the wipe)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged.temp_path)
        if not prune_dirs:
            return
        tenant_root = self.root / staged.tenant
        d = staged.target_dir
        while d == tenant_root or tenant_root in d.parents:
            try:
                os.rmdir(d)  # only ever an empty directory
            except FileNotFoundError:
                pass
            except OSError:
                return  # not empty (or not ours to remove): stop there
            d = d.parent

    @contextlib.contextmanager
    def reading(self, relpath: str) -> Iterator[Path]:
        """The stored file itself (read-only, 0440): nothing to fetch on a local disk."""
        yield self.path_of(relpath)

    def prepare_tenant(self, tenant: str) -> None:
        """The tenant's directory, made before its first file (provision-tenant)."""
        makedirs_durable(self._tenant_root(tenant), owner=self._owner)

    def remove(self, relpath: str) -> bool:
        """Unlink one stored file (purge, past retention); False if it was already gone
        (a retried purge). WORM files are 0440 in 0750 directories: unlinking needs the
        directory's write bit only, which the service user has."""
        path = self.path_of(relpath)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        # The removal is recorded (document.purged) once this returns: a crash must not
        # bring the file back.
        fsync_dir(path.parent)
        return True

    def remove_tenant(self, tenant: str) -> int:
        """Remove the tenant's directory and everything in it (delete-tenant, after the
        signed request was checked); the number of files removed."""
        return remove_tree(self._tenant_root(tenant))

    def extend_retention(self, relpath: str, until: datetime) -> bool:
        """Nothing to lock on a local disk: the retention checks of purge and delete-tenant
        are the lock (False: nothing moved)."""
        return False

    def inspect(self, relpath: str) -> StoredFacts | None:
        """Facts about a stored file as it is on disk, None if it is gone. Links are not
        followed: a link where a file should be is reported as not regular."""
        try:
            st = os.lstat(self.root / relpath)
        except FileNotFoundError:
            return None
        return StoredFacts(stat.S_ISREG(st.st_mode), st.st_size, stat.S_IMODE(st.st_mode))

    def sha256(self, relpath: str) -> str | None:
        """The SHA-256 of a stored file's bytes (reads all of them); None if it is gone or
        is not a regular file (a link is never followed)."""
        facts = self.inspect(relpath)
        return sha256_of(self.root / relpath) if facts is not None and facts.regular else None

    def _tenant_root(self, tenant: str) -> Path:
        # The name is a path component: one plain name, nothing that walks elsewhere.
        if not tenant or tenant in (".", "..") or "/" in tenant or "\x00" in tenant:
            raise ArchiveError(f"not a tenant name: {tenant!r}")
        return self.root / tenant

    def iter_files(self) -> Iterator[str]:
        """Every file below the root as a relative path, temp files included."""
        if not self.root.is_dir():
            return
        for dirpath, _dirs, files in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for f in files:
                yield f if rel == "." else f"{rel}/{f}"


def remove_tree(root: Path) -> int:
    """Remove ``root`` and everything below it; the number of files. Symlinks are
    removed, never followed (the archive's and the derived tree's own clean-up)."""
    if root.is_symlink():
        root.unlink()
        return 1
    if not root.exists():
        return 0
    count = sum(len(files) for _, _, files in os.walk(root))
    shutil.rmtree(root)
    return count


def hash_fd(src_fd: int, max_bytes: int, out: int | None) -> tuple[str, int]:
    """SHA-256 and size of ``src_fd`` from offset 0, copying to ``out`` if given."""
    digest = hashlib.sha256()
    size = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    src = os.fdopen(src_fd, "rb", buffering=0, closefd=False)
    os.lseek(src_fd, 0, os.SEEK_SET)
    while n := src.readinto(view):
        size += n
        if size > max_bytes:
            raise TooLarge(f"larger than the limit of {max_bytes} bytes")
        digest.update(view[:n])
        if out is not None:
            written = 0
            while written < n:
                written += os.write(out, view[written:n])
    return digest.hexdigest(), size


def is_temp(relpath: str) -> bool:
    return os.path.basename(relpath).startswith(TEMP_PREFIX)


def errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "EIO")
