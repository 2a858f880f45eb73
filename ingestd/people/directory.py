"""Directory login (issue 31): LDAP or Active Directory checks a password, and its groups
say which tenants a person belongs to with which capability set ([web.ldap]).

The steps of one login, top-down: look the person up with the service account (the login
escaped into the filter), bind as that person with the password typed (never an empty
one: an LDAP "unauthenticated bind" succeeds without any), read their groups, map them.

Invariants enforced here:
- an empty password never reaches the directory (RFC 4513 5.1.2: it would "succeed");
- the login and the DN are escaped into the filters (no filter injection);
- passwords go only over TLS (ldaps://, StartTLS), unless `allow_plaintext` was set for a
  directory on loopback; certificates are checked;
- exactly one entry must match the login: none or several is a refused login;
- the tenants named in the group map take their members from the directory at every login
  (a person removed from the group loses the membership at their next login); other
  tenants' memberships are left as `ingestd user` set them.
"""

from __future__ import annotations

import math
import ssl
from dataclasses import dataclass, field
from typing import Any

from ingestd import log
from ingestd.config.filemodes import GROUP_READABLE, read_secret_file
from ingestd.config.settings import LdapConfig
from ingestd.textsafe import shown

# The order a person in several groups of one tenant is given a set in: the most first.
_PREFERENCE = ("owner", "user", "readonly", "webdav")


@dataclass(frozen=True, slots=True)
class DirectoryPerson:
    """What the directory says of one login."""

    login: str
    dn: str
    memberships: dict[str, str] = field(default_factory=dict)  # tenant -> set
    admin: bool = False


class Directory:
    """One configured directory; ``authenticate`` is the whole login."""

    def __init__(self, config: LdapConfig) -> None:
        self.config = config

    @property
    def managed_tenants(self) -> set[str]:
        """Tenants whose members come from the directory."""
        return {g.tenant for g in self.config.groups}

    def _server(self) -> Any:
        import ldap3

        cfg = self.config
        tls = ldap3.Tls(
            validate=ssl.CERT_REQUIRED,
            ca_certs_file=str(cfg.ca_file) if cfg.ca_file else None,
            version=ssl.PROTOCOL_TLS_CLIENT,
        )
        return ldap3.Server(
            cfg.url,
            use_ssl=cfg.url.startswith("ldaps://"),
            tls=tls,
            connect_timeout=max(1, math.ceil(cfg.timeout)),
            get_info=ldap3.NONE,
        )

    def _connection(self, server: Any, user: str | None, password: str | None) -> Any:
        import ldap3

        conn = ldap3.Connection(
            server,
            user=user,
            password=password,
            receive_timeout=max(1, math.ceil(self.config.timeout)),
            raise_exceptions=False,
            read_only=True,
            auto_referrals=False,
        )
        conn.open()
        if self.config.start_tls and not conn.start_tls():
            raise ldap3.core.exceptions.LDAPStartTLSError("StartTLS was refused")
        return conn

    def authenticate(self, login: str, password: str) -> DirectoryPerson | None:
        """The person, if the directory takes ``password`` for ``login``; None for a
        refusal (and for a directory that cannot be reached: logged, never a crash)."""
        if not login or not password:
            return None
        try:
            return self._authenticate(login, password)
        except Exception as exc:
            log.get_logger().error(
                "web.ldap_unavailable",
                url=self.config.url,
                login=shown(login),
                error=f"{type(exc).__name__}: {exc}",
            )
            return None

    def _authenticate(self, login: str, password: str) -> DirectoryPerson | None:
        import ldap3
        from ldap3.utils.conv import escape_filter_chars

        cfg = self.config
        server = self._server()
        service_password = None
        if cfg.bind_password_file is not None:
            what = f"web.ldap bind_password_file {cfg.bind_password_file}"
            service_password = read_secret_file(
                cfg.bind_password_file, what, GROUP_READABLE
            ).decode("utf-8")
        svc = self._connection(server, cfg.bind_dn, service_password)
        try:
            if cfg.bind_dn is not None and not svc.bind():
                log.get_logger().error("web.ldap_service_bind_failed", url=cfg.url)
                return None
            query = cfg.user_filter.replace("{login}", escape_filter_chars(login))
            svc.search(cfg.user_base, query, search_scope=ldap3.SUBTREE, attributes=[],
                       size_limit=2)  # fmt: skip
            entries = [e for e in svc.response or [] if e.get("type") == "searchResEntry"]
            if len(entries) != 1:
                return None
            dn = str(entries[0]["dn"])
            groups_query = cfg.group_filter.replace("{dn}", escape_filter_chars(dn))
            svc.search(cfg.group_base, groups_query, search_scope=ldap3.SUBTREE, attributes=[])
            groups = {
                str(e["dn"]).lower()
                for e in svc.response or []
                if e.get("type") == "searchResEntry"
            }
        finally:
            svc.unbind()
        person = self._connection(server, dn, password)
        try:
            if not person.bind():
                return None
        finally:
            person.unbind()
        return DirectoryPerson(login, dn, self._memberships(groups), self._admin(groups))

    def _memberships(self, groups: set[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for g in self.config.groups:
            if g.group.lower() not in groups:
                continue
            have = found.get(g.tenant)
            if have is None or _PREFERENCE.index(g.set) < _PREFERENCE.index(have):
                found[g.tenant] = g.set
        return found

    def _admin(self, groups: set[str]) -> bool:
        return any(g.lower() in groups for g in self.config.admin_groups)
