"""The WORM archive on S3-compatible object storage with Object Lock (AWS S3, MinIO,
Ceph RGW): the archive that outgrows one disk and serves worker hosts without a shared
file system.

Keys are the local layout under an optional prefix: ``<prefix><tenant>/<yyyy>/<mm>/
<sha256>.<ext>``. Staging copies (and hashes) the source into a local staging directory;
``commit`` uploads it under its final key with

- ``If-None-Match: *``: an existing key is never overwritten (the no-overwrite link of
  the local store); an existing one is compared by checksum and size instead;
- ``x-amz-checksum-sha256``: the server verifies the bytes against our hash; the answer's
  checksum is compared again, and a ``HEAD`` confirms the object before ``commit``
  returns, i.e. before the intake transaction may COMMIT;
- Object Lock in COMPLIANCE mode until the retain-until date (nobody, root account
  included, can delete or shorten it before that).

Our code refuses to shorten a retention or delete an object early even where a server
(or a bucket without Object Lock) would allow it. Reads download to a private temp file
and check the bytes against the stored checksum.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestd.archive.store import CHUNK, FILE_MODE, ArchivedFile, StagedFile, StoredFacts, hash_fd
from ingestd.errors import ArchiveError, ArchiveLocked

LOCK_MODE = "COMPLIANCE"
TEMP_PREFIX = ".tmp-"


def b64_sha256(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


@dataclass(frozen=True, slots=True)
class Located:
    """What HEAD says about an object."""

    size: int
    sha256: str | None  # hex, from the stored checksum
    lock_mode: str | None
    retain_until: datetime.datetime | None
    version: str | None


class S3Archive:
    """``ArchiveStore`` on a bucket with Object Lock. ``client`` is a boto3 S3 client;
    ``retain_until(tenant, when)`` gives the lock date of a file archived at ``when``."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        staging_dir: Path,
        *,
        prefix: str = "",
        retain_until: Callable[[str, datetime.datetime], datetime.datetime | None],
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.staging = Path(staging_dir)
        self.retain_until = retain_until

    # -- keys -------------------------------------------------------------------------------
    def key(self, relpath: str) -> str:
        parts = relpath.split("/")
        if not relpath or any(p in ("", ".", "..") for p in parts) or "\x00" in relpath:
            raise ArchiveError(f"not an archive path: {relpath!r}")
        return self.prefix + relpath

    def _errors(self, what: str, exc: Exception) -> ArchiveError:
        code = _code(exc)
        return ArchiveError(f"s3://{self.bucket}: {what}: {code or type(exc).__name__}: {exc}")

    # -- intake -----------------------------------------------------------------------------
    def stage(
        self, tenant: str, src_fd: int, *, max_bytes: int, when: datetime.datetime
    ) -> StagedFile:
        relative_dir = f"{tenant}/{when:%Y}/{when:%m}"
        d = self.staging / "stage"
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp = d / f"{TEMP_PREFIX}{secrets.token_hex(8)}"
        out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            sha256, size = hash_fd(src_fd, max_bytes, out)
        except BaseException as exc:
            os.close(out)
            temp.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise ArchiveError(f"cannot write {temp}: {exc.strerror}") from exc
            raise
        os.close(out)  # no fsync: the source stays until COMMIT, the object is the copy
        return StagedFile(tenant, temp, d, relative_dir, sha256, size)

    def adopt(
        self, tenant: str, src_path: Path, src_fd: int, *, max_bytes: int, when: datetime.datetime
    ) -> StagedFile:
        """The spool file is uploaded from a copy, like any other (no link to a bucket)."""
        return self.stage(tenant, src_fd, max_bytes=max_bytes, when=when)

    def commit(self, staged: StagedFile, extension: str) -> ArchivedFile:
        relpath = f"{staged.relative_dir}/{staged.sha256}.{extension}"
        key = self.key(relpath)
        until = self.retain_until(staged.tenant, datetime.datetime.now(datetime.UTC))
        reused = False
        try:
            try:
                lock = {} if until is None else {
                    "ObjectLockMode": LOCK_MODE,
                    "ObjectLockRetainUntilDate": until,
                }  # fmt: skip
                with open(staged.temp_path, "rb") as body:
                    answer = self.client.put_object(
                        Bucket=self.bucket,
                        Key=key,
                        Body=body,
                        ContentLength=staged.size,
                        ChecksumAlgorithm="SHA256",
                        ChecksumSHA256=b64_sha256(staged.sha256),
                        IfNoneMatch="*",
                        **lock,
                    )
            except Exception as exc:
                if _code(exc) not in ("PreconditionFailed", "412"):
                    raise self._errors(f"upload of {key}", exc) from exc
                reused = True  # the key exists: the same bytes, or damage (never overwritten)
            else:
                if answer.get("ChecksumSHA256") not in (None, b64_sha256(staged.sha256)):
                    raise ArchiveError(f"s3://{self.bucket}/{key}: the server stored other bytes")
        finally:
            with contextlib.suppress(FileNotFoundError):
                staged.temp_path.unlink()
        # Confirmed before the caller's transaction may COMMIT: the object is there, with
        # our size and checksum.
        found = self.locate(relpath)
        if found is None or found.size != staged.size or found.sha256 != staged.sha256:
            raise ArchiveError(
                f"s3://{self.bucket}/{key} exists with different content; refusing to "
                "overwrite (run 'ingestd audit verify')"
                if reused
                else f"s3://{self.bucket}/{key}: not confirmed after the upload"
            )
        return ArchivedFile(relpath, staged.sha256, staged.size, reused)

    def discard(self, staged: StagedFile, *, prune_dirs: bool = False) -> None:
        with contextlib.suppress(FileNotFoundError):
            staged.temp_path.unlink()

    # -- analysis ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def reading(self, relpath: str) -> Iterator[Path]:
        """The object in a private temp file, its bytes checked against its checksum."""
        d = self.staging / "read"
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = d / f"{TEMP_PREFIX}{secrets.token_hex(8)}{Path(relpath).suffix}"
        try:
            digest = self._download(relpath, path)
            found = self.locate(relpath)
            if found is None or (found.sha256 is not None and found.sha256 != digest):
                raise ArchiveError(f"s3://{self.bucket}/{self.key(relpath)}: bytes do not match")
            os.chmod(path, FILE_MODE)
            yield path
        finally:
            path.unlink(missing_ok=True)

    def _download(self, relpath: str, path: Path) -> str:
        digest = hashlib.sha256()
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.key(relpath))
            with open(path, "xb") as out:
                for chunk in obj["Body"].iter_chunks(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
        except Exception as exc:
            raise self._errors(f"download of {relpath}", exc) from exc
        return digest.hexdigest()

    # -- lifecycle --------------------------------------------------------------------------
    def prepare_tenant(self, tenant: str) -> None:
        """Nothing to make: a key prefix exists when its first object does."""

    def remove(self, relpath: str) -> bool:
        """Delete every version of one object (purge, past retention); refused while its
        lock holds, whatever the server would allow. False if it was gone already."""
        found = self.locate(relpath)
        if found is None:
            return False
        self._refuse_locked(relpath, found)
        self._delete_versions(self.key(relpath))
        return True

    def remove_tenant(self, tenant: str) -> int:
        """Delete every object of the tenant; refused (nothing deleted) while any is locked."""
        rels = list(self._list(f"{tenant}/"))
        for rel in rels:
            found = self.locate(rel)
            if found is not None:
                self._refuse_locked(rel, found)
        for rel in rels:
            self._delete_versions(self.key(rel))
        return len(rels)

    def _refuse_locked(self, relpath: str, found: Located) -> None:
        now = datetime.datetime.now(datetime.UTC)
        if found.retain_until is not None and found.retain_until > now:
            raise ArchiveLocked(
                f"s3://{self.bucket}/{self.key(relpath)} is locked ({found.lock_mode}) until "
                f"{found.retain_until.date().isoformat()}; nothing was deleted"
            )

    def _delete_versions(self, key: str) -> None:
        try:
            pages = self.client.get_paginator("list_object_versions").paginate(
                Bucket=self.bucket, Prefix=key
            )
            for page in pages:
                for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
                    if v["Key"] == key:
                        self.client.delete_object(
                            Bucket=self.bucket, Key=key, VersionId=v["VersionId"]
                        )
        except Exception as exc:
            raise self._errors(f"delete of {key}", exc) from exc

    def extend_retention(self, relpath: str, until: datetime.datetime) -> bool:
        """Lock an object longer (a document's class turned out to keep it longer); never
        shorter. True if the date was moved."""
        found = self.locate(relpath)
        if found is None:
            raise ArchiveError(f"s3://{self.bucket}/{self.key(relpath)} does not exist")
        if found.retain_until is not None and until <= found.retain_until:
            return False
        try:
            self.client.put_object_retention(
                Bucket=self.bucket,
                Key=self.key(relpath),
                Retention={"Mode": LOCK_MODE, "RetainUntilDate": until},
            )
        except Exception as exc:
            raise self._errors(f"retention of {relpath}", exc) from exc
        return True

    # -- verify -----------------------------------------------------------------------------
    def locate(self, relpath: str) -> Located | None:
        try:
            h = self.client.head_object(
                Bucket=self.bucket, Key=self.key(relpath), ChecksumMode="ENABLED"
            )
        except Exception as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._errors(f"HEAD of {relpath}", exc) from exc
        checksum = h.get("ChecksumSHA256")
        return Located(
            size=int(h["ContentLength"]),
            sha256=base64.b64decode(checksum).hex() if checksum else None,
            lock_mode=h.get("ObjectLockMode"),
            retain_until=h.get("ObjectLockRetainUntilDate"),
            version=h.get("VersionId"),
        )

    def iter_files(self) -> Iterator[str]:
        yield from self._list("")

    def _list(self, under: str) -> Iterator[str]:
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + under
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    yield str(obj["Key"])[len(self.prefix) :]
        except Exception as exc:
            raise self._errors("listing", exc) from exc

    def inspect(self, relpath: str) -> StoredFacts | None:
        """An object is a regular, read-only file by nature (its lock is the store's own
        business: ``locate``)."""
        found = self.locate(relpath)
        return None if found is None else StoredFacts(True, found.size, FILE_MODE)

    def sha256(self, relpath: str) -> str | None:
        """Re-hash the object's bytes (downloads all of them)."""
        digest = hashlib.sha256()
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.key(relpath))
            for chunk in obj["Body"].iter_chunks(CHUNK):
                digest.update(chunk)
        except Exception as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._errors(f"download of {relpath}", exc) from exc
        return digest.hexdigest()


def _code(exc: Exception) -> str | None:
    """The S3 error code of a botocore ClientError (None for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error") or {}
        return str(err.get("Code")) if err.get("Code") else None
    return None
