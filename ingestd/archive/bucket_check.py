"""Whether the S3 archive can work, asked before it matters: the endpoint answers, the
bucket exists and this key may use it, and Object Lock is enabled on it (without it no
original is WORM, and every upload with a retention date is refused).

`ingestd check-config --online` and every daemon start ask (ingestd/ops/preflight.py),
with a short timeout and few attempts: a closed port answers at once, an address that
drops packets within about ``PROBE_TIMEOUT`` x ``PROBE_ATTEMPTS`` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ingestd.archive.backends import s3_client
from ingestd.config.settings import S3Config
from ingestd.errors import ConfigError

PROBE_TIMEOUT = 5.0  # seconds, connect and each read
PROBE_ATTEMPTS = 2


@dataclass(frozen=True, slots=True)
class BucketProblem:
    """Why the archive's bucket cannot be used. ``transient``: the endpoint did not answer
    (down, unreachable), which may pass; else an operator must fix the bucket, the key or
    the config."""

    message: str
    transient: bool


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", "")) or type(exc).__name__


def check(s3: S3Config) -> BucketProblem | None:
    """None if the bucket is there, usable and has Object Lock enabled, else the problem
    (its message starts with the key path, as check-config's lines do)."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    where = f"s3://{s3.bucket} at {s3.endpoint or 'AWS ' + s3.region}"
    try:
        client = s3_client(s3, timeout=min(s3.timeout, PROBE_TIMEOUT), attempts=PROBE_ATTEMPTS)
        client.head_bucket(Bucket=s3.bucket)
        lock = client.get_object_lock_configuration(Bucket=s3.bucket)
    except ConfigError as exc:  # the credentials file
        return BucketProblem(exc.message, transient=False)
    except NoCredentialsError:
        return BucketProblem(
            "archive.s3.credentials_file: no credentials: set the file, or "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the service's environment",
            transient=False,
        )
    except ClientError as exc:
        code = _code(exc)
        if code in ("404", "NoSuchBucket"):
            why = "does not exist (create it with Object Lock enabled)"
        elif code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            why = f"refuses this key ({code}): check the key and the bucket policy"
        elif code == "ObjectLockConfigurationNotFoundError":
            why = (
                "has no Object Lock: originals would not be WORM; Object Lock can only be "
                "enabled on a bucket made with it (or by the provider's support): use one"
            )
        else:
            return BucketProblem(f"archive.s3.bucket: {where}: {code}: {exc}", transient=True)
        return BucketProblem(f"archive.s3.bucket: {where} {why}", transient=False)
    except BotoCoreError as exc:  # no connection, a timeout, a TLS failure
        return BucketProblem(
            f"archive.s3.endpoint: {where} does not answer within "
            f"{min(s3.timeout, PROBE_TIMEOUT):g} s x {PROBE_ATTEMPTS} attempts: {exc}",
            transient=True,
        )
    config = lock.get("ObjectLockConfiguration", {})
    if config.get("ObjectLockEnabled") != "Enabled":
        return BucketProblem(
            f"archive.s3.bucket: {where} has Object Lock {config.get('ObjectLockEnabled')!r}, "
            "not 'Enabled': originals would not be WORM",
            transient=False,
        )
    return None
