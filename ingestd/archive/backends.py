"""The archive store the config names: the local WORM file system, or an S3 bucket with
Object Lock. The one place that speaks to boto3 (imported only when S3 is configured)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestd.archive.retention import lock_until
from ingestd.archive.s3 import S3Archive
from ingestd.archive.store import ArchiveStore, LocalArchive
from ingestd.config.filemodes import read_secret_file
from ingestd.config.settings import ArchiveConfig, Config, PathsConfig, RetentionConfig, S3Config
from ingestd.errors import ConfigError

STAGING_DIR = "s3-staging"


@dataclass(frozen=True, slots=True)
class ArchiveLocation:
    """The config's word on where the archive is, as plain data (it crosses the job
    child's pipe: the split applier stores children in the worker)."""

    paths: PathsConfig
    archive: ArchiveConfig
    retention: RetentionConfig

    def store(self) -> ArchiveStore:
        return archive_for(self.paths, self.archive, self.retention)


def make_archive(config: Config) -> ArchiveStore:
    """The archive backend the config names: the local WORM file system or S3."""
    return archive_for(config.paths, config.archive, config.retention)


def archive_for(
    paths: PathsConfig, archive: ArchiveConfig, retention: RetentionConfig
) -> ArchiveStore:
    if archive.backend == "local" or archive.s3 is None:
        return LocalArchive(paths.archive_dir)
    s3 = archive.s3

    def retain_until(tenant: str, now: datetime.datetime) -> datetime.datetime | None:
        return lock_until(now, retention.years_for(tenant))

    return S3Archive(
        s3_client(s3),
        s3.bucket,
        paths.state_dir / STAGING_DIR,
        prefix=s3.prefix,
        retain_until=retain_until,
    )


def credentials(path: Path) -> tuple[str, str]:
    """``access_key_id`` and ``secret_access_key`` from a 0600 file of ``key = value``
    lines (the shape of ~/.aws/credentials without its section header)."""
    text = read_secret_file(path, "archive.s3.credentials_file").decode(errors="replace")
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in ("access_key_id", "aws_access_key_id", "secret_access_key",
                                   "aws_secret_access_key"):  # fmt: skip
            found[key.strip().removeprefix("aws_")] = value.strip()
    if not found.get("access_key_id") or not found.get("secret_access_key"):
        raise ConfigError(
            f"archive.s3.credentials_file {path}: needs the lines access_key_id = ... and "
            "secret_access_key = ..."
        )
    return found["access_key_id"], found["secret_access_key"]


def s3_client(s3: S3Config, *, timeout: float | None = None, attempts: int = 3) -> Any:
    """A boto3 client for the bucket; ``timeout`` (default ``s3.timeout``) and ``attempts``
    smaller for a probe that must answer soon (bucket_check)."""
    import boto3
    from botocore.config import Config as BotoConfig

    keys: dict[str, str] = {}
    if s3.credentials_file is not None:
        key_id, secret = credentials(s3.credentials_file)
        keys = {"aws_access_key_id": key_id, "aws_secret_access_key": secret}
    return boto3.session.Session().client(
        "s3",
        endpoint_url=s3.endpoint or None,
        region_name=s3.region,
        config=BotoConfig(
            s3={"addressing_style": s3.addressing_style},
            connect_timeout=timeout or s3.timeout,
            read_timeout=timeout or s3.timeout,
            retries={"max_attempts": attempts, "mode": "standard"},
            # The SHA-256 we send is what the server checks; no second checksum of its own.
            request_checksum_calculation="when_required",
        ),
        **keys,
    )
