"""The link an owner hands a new member to set their first password: a signed, dated token
naming the person, the archive and the owner who asked for it.

Invariants enforced here and where the link is used (app.py, accounts.first_password_refusal):
- only the console can make one (signed with the session key, its own salt: a session
  cookie is no link and a link no session);
- it is good for WELCOME_DAYS, and only while the person still has no password and is a
  member of that archive alone: once used (or once the person reaches more), it is void;
- the token itself is never logged or stored; the password set through it is audited
  with the owner who handed the link out.
"""

from __future__ import annotations

from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

WELCOME_DAYS = 7
_SALT = "ingestd first password"


@dataclass(frozen=True, slots=True)
class Welcome:
    """What a valid link says."""

    login: str
    tenant: str
    by: str  # the owner who asked for the link


def _serializer(secret: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret, salt=_SALT)


def make(secret: str, login: str, tenant: str, by: str) -> str:
    """A token for ``login``'s first password, asked for by ``by``, an owner of ``tenant``."""
    return str(_serializer(secret).dumps({"login": login, "tenant": tenant, "by": by}))


def read(secret: str, token: str) -> Welcome | None:
    """What ``token`` says if the console made it less than WELCOME_DAYS ago; else None
    (altered, expired, or no token at all)."""
    if len(token) > 2000:
        return None
    try:
        data = _serializer(secret).loads(token, max_age=WELCOME_DAYS * 86400)
    except BadSignature:  # SignatureExpired is one
        return None
    if not isinstance(data, dict):
        return None
    fields = (data.get("login"), data.get("tenant"), data.get("by"))
    if not all(isinstance(f, str) for f in fields):
        return None
    login, tenant, by = fields
    assert isinstance(login, str) and isinstance(tenant, str) and isinstance(by, str)
    return Welcome(login, tenant, by)
