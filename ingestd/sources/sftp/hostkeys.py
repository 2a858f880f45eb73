"""Server host keys: ed25519 and RSA, made on first start, stable across restarts.

An admin types the fingerprint into a scanner's web UI once; regenerating keys would make
every scanner refuse to connect, so an existing key is never replaced, and a key file
with loose permissions is refused rather than silently fixed.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from ingestd.config.filemodes import check_secret_file
from ingestd.durable import publish_new
from ingestd.errors import ConfigError
from ingestd.runtime import statedir

KEY_TYPES = ("ed25519", "rsa")
RSA_BITS = 3072


@dataclass(frozen=True)
class HostKey:
    kind: str
    path: Path
    key: paramiko.PKey

    @property
    def algorithm(self) -> str:
        return self.key.get_name()

    @property
    def fingerprint(self) -> str:
        """OpenSSH's SHA256 fingerprint, as `ssh-keygen -lf` and ssh clients print it."""
        digest = hashlib.sha256(self.key.asbytes()).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")

    @property
    def md5_fingerprint(self) -> str:
        """The MD5 form; older scanner UIs still show it."""
        digest = hashlib.md5(self.key.asbytes(), usedforsecurity=False).hexdigest()
        return "MD5:" + ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))

    @property
    def public_line(self) -> str:
        return f"{self.algorithm} {self.key.get_base64()}"


def key_dir(state_dir: Path) -> Path:
    return state_dir / "hostkeys"


def _generate(kind: str) -> bytes:
    key: ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey
    if kind == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )


def key_paths(state_dir: Path) -> list[Path]:
    """The key files, one per KEY_TYPES entry (present or not)."""
    return [key_dir(state_dir) / f"ssh_host_{kind}_key" for kind in KEY_TYPES]


def _load(kind: str, path: Path) -> paramiko.PKey:
    check_secret_file(os.lstat(path), f"host key {path}")
    cls = paramiko.Ed25519Key if kind == "ed25519" else paramiko.RSAKey
    try:
        return cls.from_private_key_file(str(path))
    except (paramiko.SSHException, ValueError) as exc:
        raise ConfigError(f"host key {path} cannot be read: {exc}") from exc


def load_or_create(state_dir: Path, *, create: bool = True) -> list[HostKey]:
    """The host keys under ``state_dir/hostkeys``, generating missing ones if ``create``.

    Made by root (`sudo ingestd hostkeys` before the first start), the directory and
    keys are given to the state directory's owner: the daemon runs as that user. A key
    or directory this user cannot read is StateUnusable, not a traceback."""
    directory = key_dir(state_dir)
    try:
        if create:
            statedir.make_dirs(state_dir, directory, 0o700)
        keys = []
        for kind, path in zip(KEY_TYPES, key_paths(state_dir), strict=True):
            if not os.path.lexists(path):
                if not create:
                    continue
                publish_new(path, _generate(kind), 0o600)
                statedir.adopt(state_dir, path)
            keys.append(HostKey(kind, path, _load(kind, path)))
    except OSError as exc:
        problem = statedir.unusable(exc)
        if problem is None:
            raise
        raise problem from None
    return keys
