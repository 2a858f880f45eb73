"""What a connection may do: log in (password, key; tenant and algorithms checked), then
open one SFTP subsystem and nothing else.

A login whose credentials are right is still refused while the account's tenant is not
active (``sftp.auth_refused``; not a failure: it never counts towards a ban). The client
is told why: SSH authentication succeeds, and the one session channel it may then open
carries the reason on stderr ("tenant acme is suspended; uploads are refused", which
OpenSSH's sftp prints) and as the status message of the SFTP requests it answers
(lftp shows that), then closes; no SFTP request is ever served (``refusal_channel``). An
authentication failure instead would show the scanner's admin "Permission denied" for a
password that is right. The status comes from ``TenantStatusCache``, never from the
database directly; when the cache cannot tell (database down), the login goes ahead and
the uploads wait in the spool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import paramiko

from ingestd.runtime import metrics
from ingestd.sources.handoff import tenant_reason, tenant_refusal_text
from ingestd.sources.sftp import refusal_channel
from ingestd.sources.sftp.accounts import Verdict
from ingestd.sources.sftp.connections import Connection
from ingestd.sources.sftp.login_context import LoginContext
from ingestd.sources.sftp.session import Session
from ingestd.states import TenantStatus
from ingestd.textsafe import shown


def safe(value: str) -> str:
    """A client-chosen string (user name, client version) as it may appear in a log line:
    the one escaping of outside text (ingestd/textsafe.py: CR/LF, controls, bidi and
    undecodable bytes escaped), cut to 64 characters."""
    return shown(value, limit=64)


# How long a refused login's channel waits for the client's first bytes before it says why.
REFUSAL_WAIT = 2.0


class ServerPolicy(paramiko.ServerInterface):
    """paramiko asks this object what a connection may do; only SFTP after a login.

    ``context`` gives the host's current ``LoginContext``: each step of a login reads it
    once, so a config reload applies to the next attempt, as it always has."""

    def __init__(self, context: Callable[[], LoginContext], conn: Connection) -> None:
        self.context = context
        self.conn = conn
        self.session: Session | None = None
        self.log = context().log.bind(conn=conn.id, remote_ip=conn.remote_ip)
        # The account whose key paramiko may still have to verify (see check_auth_publickey).
        self._key_user: str | None = None
        self._login_lock = threading.Lock()
        # Why the last verified login was refused (its tenant is not active).
        self.refusal: str | None = None
        # What the client of a refused login reads (see the module docstring), and whether
        # it was told.
        self.refusal_text: str | None = None
        self.told = threading.Event()
        self._telling = False

    # -- authentication -------------------------------------------------------------------
    def get_allowed_auths(self, username: str) -> str:
        return ",".join(self.context().accounts.auth_methods(username))

    def check_auth_none(self, username: str) -> int:
        return paramiko.AUTH_FAILED

    def check_auth_password(self, username: str, password: str) -> int:
        verdict = self.context().accounts.check_password(username, password, self.conn.remote_ip)
        return self._conclude(username, "password", verdict)

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        verdict = self.context().accounts.check_key(username, key, self.conn.remote_ip)
        if verdict is not Verdict.ok:
            return self._conclude(username, "publickey", verdict)
        # Fix: paramiko asks this *before* it checks the signature, and also for a client's
        # "would you take this key?" query, which anyone holding the (public) key can send.
        # Logging in here let a forged signature write sftp.login and escape auth_timeout.
        # The login happens in key_login(), once paramiko says the transport is authenticated.
        if self._legacy_refused(username):
            return paramiko.AUTH_FAILED
        self._key_user = username
        return paramiko.AUTH_SUCCESSFUL

    def key_login(self) -> bool:
        """True once logged in; completes a key login whose signature paramiko verified."""
        with self._login_lock:
            transport = self.conn.transport
            if (
                self.session is None
                and self._key_user is not None
                and transport is not None
                and transport.is_authenticated()
                and transport.get_username() == self._key_user
                and not self.conn.kill.is_set()
            ):
                # Checked only now: refusing in check_auth_publickey would tell anyone who
                # holds the *public* key the tenant's status. paramiko already answered
                # "authenticated", so the connection is closed instead of a channel opened.
                if self.refusal_text is not None or self._tenant_refused(
                    self._key_user, "publickey"
                ):
                    pass  # the session channel says why, then the connection closes
                elif not self.context().admission.admit_session(self.conn):
                    self.refusal = "connection_limit"  # logged by admit_session
                    self.conn.kill.set()
                else:
                    self._login(self._key_user, "publickey")
            return self.session is not None

    def _legacy_refused(self, username: str) -> bool:
        ctx = self.context()
        account = ctx.accounts.get(username)
        assert account is not None
        allowed = ctx.legacy_algorithms or account.legacy_algorithms
        if self.conn.legacy and not allowed:
            ctx.auth_log(
                "warning",
                "sftp.legacy_refused",
                self.conn,
                username=safe(username),
                algorithms=self.conn.legacy,
            )
            return True
        return False

    def _tenant_refused(self, username: str, method: str) -> bool:
        """True (and logged) if the verified ``username``'s tenant is known not to be active.

        Unknown (the cache was never filled or is too old: database down) lets the login
        in. Not an auth failure: the credentials were right, so no ban score, no
        ``sftp.auth_failed`` line (fail2ban would ban the scanner), and only after the
        credentials were checked, so nobody without them learns the tenant's status.
        """
        ctx = self.context()
        cache = ctx.tenant_status
        account = ctx.accounts.get(username)
        assert account is not None
        status = cache.status(account.tenant) if cache is not None else None
        if status is None or status == TenantStatus.active:
            return False
        reason = tenant_reason(status)
        self.refusal = reason
        self.refusal_text = tenant_refusal_text(account.tenant, status)
        metrics.SFTP_REFUSED.labels(account.tenant, f"login_{reason}").inc()
        self.log.warning(
            "sftp.auth_refused",
            account=account.username,
            tenant=account.tenant,
            tenant_status=status,
            reason=reason,
            method=method,
        )
        return True

    def _login(self, username: str, method: str) -> None:
        conn = self.conn
        ctx = self.context()
        account = ctx.accounts.get(username)
        assert account is not None
        self.session = Session(
            account=account,
            remote_ip=conn.remote_ip,
            conn_id=conn.id,
            spool=ctx.spool,
            max_file_size=ctx.max_file_size,
            max_filename_bytes=ctx.max_filename_bytes,
            log=self.log.bind(account=account.username, tenant=account.tenant),
            legacy=conn.legacy,
            tenant_status=ctx.tenant_status,
            allowed_types=ctx.allowed_types,
            events=ctx.bans.events,
            max_handles=ctx.max_handles_per_session,
            handle_budget=ctx.handles,
            flood=ctx.flood,
        )
        conn.session = self.session
        conn.authenticated.set()
        self.log.info("sftp.login", username=account.username, tenant=account.tenant, method=method)
        metrics.SFTP_LOGINS.labels(account.tenant, method).inc()

    def _conclude(self, username: str, method: str, verdict: Verdict) -> int:
        conn = self.conn
        ctx = self.context()
        if verdict is Verdict.ok:
            if self._legacy_refused(username):
                return paramiko.AUTH_FAILED
            if self._tenant_refused(username, method):
                # "Authenticated", with no session: the channel the client opens next says
                # why (tell_refusal) and the connection ends; nothing counts towards a ban.
                return paramiko.AUTH_SUCCESSFUL
            with self._login_lock:
                conn.account = username
                if not ctx.admission.admit_session(conn):
                    # The credentials were right: no failure, no ban score. paramiko
                    # answers "authenticated"; no channel opens, the connection closes.
                    self.refusal = "connection_limit"  # logged by admit_session
                    conn.kill.set()
                    return paramiko.AUTH_SUCCESSFUL
                self._login(username, method)
            return paramiko.AUTH_SUCCESSFUL
        if verdict is Verdict.wrong_key:
            # Clients offer every key they hold; a key that does not fit is not an attack.
            ctx.auth_log("info", "sftp.key_rejected", conn, username=safe(username))
            return paramiko.AUTH_FAILED
        conn.auth_failures += 1
        metrics.SFTP_AUTH_FAILURES.labels(str(verdict)).inc()
        # The fail2ban line: fixed event name, remote_ip key (see config/fail2ban/). Its
        # summary under a flood is "sftp.auth_failed.summary", which the filter ignores.
        ctx.auth_log(
            "warning",
            "sftp.auth_failed",
            conn,
            username=safe(username),
            method=method,
            reason=str(verdict),
            attempt=conn.auth_failures,
        )
        if verdict is not Verdict.source_not_allowed:
            banned = ctx.bans.failure(conn.remote_ip, unknown_user=verdict is Verdict.unknown_user)
            if banned is not None:
                conn.kill.set()
        if conn.auth_failures >= ctx.max_auth_attempts:
            ctx.auth_log(
                "warning", "sftp.too_many_auth_failures", conn, attempts=conn.auth_failures
            )
            conn.kill.set()
        return paramiko.AUTH_FAILED

    # -- what an authenticated client may open ----------------------------------------------
    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session" and self.key_login():
            return paramiko.OPEN_SUCCEEDED
        if kind == "session" and self.refusal_text is not None and not self._telling:
            self._telling = True
            return paramiko.OPEN_SUCCEEDED  # only to say why (tell_refusal)
        if self.refusal is not None:
            return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED  # logged at the login
        self._refused("channel", kind=kind)
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_subsystem_request(self, channel: Any, name: str) -> bool:
        if name == "sftp" and self.key_login():
            return bool(super().check_channel_subsystem_request(channel, name))
        if self.tell_refusal(channel):
            return True
        self._refused("subsystem", name=safe(name))
        return False

    def check_channel_shell_request(self, channel: Any) -> bool:
        if self.tell_refusal(channel):
            return True
        self._refused("shell")
        return False

    def check_channel_exec_request(self, channel: Any, command: bytes) -> bool:
        if self.tell_refusal(channel):
            return True
        self._refused("exec", command=safe(command.decode("utf-8", "backslashreplace")))
        return False

    def tell_refusal(self, channel: paramiko.Channel) -> bool:
        """On the channel of a refused login: confirm the request, then the reason on
        stderr and, to an SFTP client, as the status message of its first requests
        (``refusal_channel``), exit status 1 and close; True if this login is refused.

        Confirmed first, so every client reads the reason: OpenSSH exits at once on a
        failed subsystem request, dropping stderr it has not written yet. The reason goes
        out once the client sent its first bytes (an SFTP client's INIT comes right after
        paramiko's confirmation, which is sent after this returns), or after a moment for
        a client that sends nothing."""
        text = self.refusal_text
        if text is None or self.session is not None:
            return False

        def say() -> None:
            refusal_channel.tell(channel, text, REFUSAL_WAIT)
            self.told.set()

        threading.Thread(target=say, name=f"sftp-refusal-{self.conn.id}", daemon=True).start()
        return True

    def check_channel_pty_request(self, *args: Any) -> bool:
        self._refused("pty")
        return False

    def check_channel_x11_request(self, *args: Any) -> bool:
        self._refused("x11")
        return False

    def check_channel_forward_agent_request(self, channel: Any) -> bool:
        self._refused("agent_forwarding")
        return False

    def check_port_forward_request(self, address: str, port: int) -> bool:
        self._refused("remote_port_forwarding", address=safe(address), port=port)
        return False

    def check_channel_direct_tcpip_request(self, chanid: int, origin: Any, destination: Any) -> int:
        self._refused("local_port_forwarding", destination=safe(str(destination)))
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_env_request(self, channel: Any, name: bytes, value: bytes) -> bool:
        return False  # clients send LANG etc. unasked; refusing is silent and harmless

    def _refused(self, what: str, **details: Any) -> None:
        tenant = self.session.account.tenant if self.session is not None else ""
        metrics.SFTP_REFUSED.labels(tenant, f"request_{what}").inc()
        self.log.warning("sftp.request_refused", request=what, **details)
