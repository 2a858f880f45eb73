"""Who may log in: bcrypt passwords, authorized keys and allowed source networks.

A refusal costs the same whatever its reason: an unknown user is checked against a dummy
hash of the same cost as the real ones, and the source-network check runs after the
hash, so timing tells an attacker neither which users exist nor which networks are open.
"""

from __future__ import annotations

import base64
import enum
import hmac
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address

import paramiko

from ingestd import passwords
from ingestd.config.settings import SftpAccountConfig
from ingestd.passwords import DEFAULT_ROUNDS, rounds_of


class Verdict(enum.StrEnum):
    ok = "ok"
    unknown_user = "unknown_user"
    wrong_password = "wrong_password"  # noqa: S105 (a verdict name, not a secret)
    wrong_key = "wrong_key"
    source_not_allowed = "source_not_allowed"


@dataclass(frozen=True)
class _Key:
    algorithm: str
    blob: bytes


def _parse_keys(lines: list[str]) -> list[_Key]:
    keys = []
    for line in lines:
        kind, data = line.split()[:2]
        keys.append(_Key(kind, base64.b64decode(data)))
    return keys


class Accounts:
    """Immutable view of ``[[sftp.accounts]]`` for the authentication callbacks."""

    def __init__(self, accounts: list[SftpAccountConfig]) -> None:
        self._by_name = {a.username: a for a in accounts}
        self._keys = {a.username: _parse_keys(a.authorized_keys) for a in accounts}
        costs = [rounds_of(a.password_hash) for a in accounts if a.password_hash]
        rounds = max(costs) if costs else DEFAULT_ROUNDS
        self._dummy = passwords.dummy_hash(rounds)

    def get(self, username: str) -> SftpAccountConfig | None:
        return self._by_name.get(username)

    def __len__(self) -> int:
        return len(self._by_name)

    def auth_methods(self, username: str) -> list[str]:
        # Fix: the same list for every name. A per-account list (["password"] for an
        # account without keys) told a client which names exist; a method an account does
        # not have simply fails (check_password runs the dummy hash for it).
        return ["password", "publickey"]

    def check_password(self, username: str, password: str, remote_ip: str) -> Verdict:
        acct = self._by_name.get(username)
        hashed = acct.password_hash if acct and acct.password_hash else None
        matched = passwords.matches(password, hashed, self._dummy)
        if acct is None:
            return Verdict.unknown_user
        if not matched:
            return Verdict.wrong_password
        return self._source_verdict(acct, remote_ip)

    def check_key(self, username: str, key: paramiko.PKey, remote_ip: str) -> Verdict:
        acct = self._by_name.get(username)
        if acct is None:
            # Fix: a key offered for an unknown name is a key that does not fit, as for a
            # real account (wrong_key: not counted). As unknown_user it counted towards
            # max_auth_attempts and bans, so offering a few keys told which names exist.
            return Verdict.wrong_key
        blob = key.asbytes()
        found = False
        for known in self._keys[username]:
            # Constant-time on the key bytes; the loop length is the account's key count.
            found |= hmac.compare_digest(known.blob, blob)
        if not found:
            return Verdict.wrong_key
        return self._source_verdict(acct, remote_ip)

    def _source_verdict(self, acct: SftpAccountConfig, remote_ip: str) -> Verdict:
        if not acct.allowed_sources:
            return Verdict.ok
        addr: IPv4Address | IPv6Address = ip_address(remote_ip)
        if isinstance(addr, IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        if any(addr in net for net in acct.allowed_sources):
            return Verdict.ok
        return Verdict.source_not_allowed
