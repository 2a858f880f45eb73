"""Which SSH algorithms the server offers: modern by default, legacy only when opted in.

paramiko negotiates from its own preference lists; we switch algorithms off with
``disabled_algorithms``. Legacy (SHA-1 and CBC) exists for multifunction printers whose
SSH stacks stopped in ~2015; it is offered only if the server or some account enables it,
and a session that negotiated it may only log in to an account that allows it.
"""

from __future__ import annotations

from typing import Any

# Never offered: broken beyond any scanner's need.
_NEVER = {
    "ciphers": ["3des-cbc"],
    "macs": ["hmac-md5", "hmac-md5-96"],
    "kex": [
        "diffie-hellman-group1-sha1",
        "gss-group1-sha1-toWM5Slw5Ew8Mqkay+al2g==",
        "gss-group14-sha1-toWM5Slw5Ew8Mqkay+al2g==",
        "gss-gex-sha1-toWM5Slw5Ew8Mqkay+al2g==",
    ],
    "keys": ["ssh-dss"],
    "pubkeys": ["ssh-dss"],
}

# Offered only in legacy mode.
LEGACY = {
    "ciphers": ["aes128-cbc", "aes192-cbc", "aes256-cbc"],
    "macs": ["hmac-sha1", "hmac-sha1-96"],
    "kex": ["diffie-hellman-group14-sha1", "diffie-hellman-group-exchange-sha1"],
    "keys": ["ssh-rsa"],  # RSA host key with SHA-1 signatures
    "pubkeys": ["ssh-rsa"],  # client RSA keys signing with SHA-1
}


def disabled_algorithms(legacy: bool) -> dict[str, list[str]]:
    out = {kind: list(names) for kind, names in _NEVER.items()}
    if not legacy:
        for kind, names in LEGACY.items():
            out[kind].extend(names)
    return out


def record_kex(transport: Any) -> None:
    """Make ``transport`` remember the name of the key exchange it agrees on.

    Fix: paramiko drops its kex engine at NEWKEYS and never stores the agreed name, so
    ``negotiated`` saw no engine ("NoneType") and a SHA-1 key exchange never counted as
    legacy. paramiko builds the engine with ``_kex_info[name](transport)``; each factory
    here notes the name first.
    """

    def factory(name: str, cls: Any) -> Any:
        def make(t: Any) -> Any:
            t.ingestd_kex = name
            return cls(t)

        return make

    kinds = type(transport)._kex_info
    transport._kex_info = {name: factory(name, cls) for name, cls in kinds.items()}


def negotiated(transport: Any) -> dict[str, str]:
    """What a finished key exchange agreed on, for the connect log line."""
    kex = getattr(transport, "ingestd_kex", None)
    if kex is None:
        engine = getattr(transport, "kex_engine", None)
        kex = next(
            (name for name, cls in transport._kex_info.items() if type(engine) is cls),
            type(engine).__name__,
        )
    return {
        "kex": kex,
        "hostkey": str(getattr(transport, "host_key_type", "")),
        "cipher": str(getattr(transport, "remote_cipher", "")),
        "mac": str(getattr(transport, "remote_mac", "")),
    }


def uses_legacy(agreed: dict[str, str]) -> list[str]:
    """The legacy algorithms among ``agreed`` (empty: a modern session)."""
    flat = {name for names in LEGACY.values() for name in names}
    return [value for value in agreed.values() if value in flat]
