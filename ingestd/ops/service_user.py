"""Run as root, ``ingestd`` becomes the service user before it touches anything.

The daemon and the workers run as the user that owns ``paths.state_dir`` (the package's
``ingestd``); whatever a command run as root made there (a database file, a key, a
report) would otherwise belong to root and lock them out, and an embedded database or a
``peer``-authenticated one knows that user, not root. So ``main`` (``_as_service_user``)
asks first: the user is ``INGESTD_USER`` if set, else the owner of the state directory,
which is found by a peek at the config (``paths.state_dir`` of the config file and of
its ``conf.d/*.toml`` drop-ins, default ``/var/lib/ingestd``); the real config is then
read as that user. The switch is setgid, initgroups, setuid (the order that cannot
leave root's groups behind), with ``HOME``/``USER``/``LOGNAME`` following, and one
line on stderr says so.

Root stays root when the state directory is missing or root's own and no INGESTD_USER
is set, and for the commands in ``STAY_ROOT``, which touch no state: they write only
where the admin points them (``sample-scan``) or print. ``restore`` switches itself once
it has put back what only root may write (``/etc/ingestd``, the state directory).
Under systemd the units already run as the user: there is nothing to switch.
"""

from __future__ import annotations

import os
import pwd
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ingestd import log
from ingestd.errors import ExitCode, IngestdError

ENV_USER = "INGESTD_USER"
DEFAULT_STATE_DIR = Path("/var/lib/ingestd")
# Commands that keep the caller's identity: config-reference and hash-password print,
# sample-scan and sample-einvoice write where they are told; account/watch add|remove
# write the root-owned /etc/ingestd/conf.d and reload the daemon (systemctl or SIGHUP),
# which only root may.
STAY_ROOT = frozenset(
    {
        "config-reference",
        "account hash-password",
        "sample-scan",
        "sample-einvoice",
        "account add",
        "account remove",
        "watch add",
        "watch remove",
    }
)


class NoSuchUser(IngestdError):
    """INGESTD_USER (or the state directory's owner) names no user on this host: nothing
    was done. Not transient: an admin must create the user or fix the variable."""

    exit_code = ExitCode.config_invalid


@dataclass(frozen=True, slots=True)
class Target:
    """Whom to become and why (the line on stderr names the reason)."""

    user: pwd.struct_passwd
    reason: str


def peek_state_dir(config_path: Path) -> Path:
    """``paths.state_dir`` as the config file (and its drop-ins, in name order, the last
    one winning) sets it, relative paths against the file's directory; the default when
    no file says it or a file cannot be read (the real load, as the user, reports that)."""
    found = DEFAULT_STATE_DIR
    files = [config_path]
    dropins = config_path.parent / "conf.d"
    if dropins.is_dir():
        files += sorted(dropins.glob("*.toml"))
    for f in files:
        try:
            data = tomllib.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        paths = data.get("paths")
        value = paths.get("state_dir") if isinstance(paths, dict) else None
        if isinstance(value, str) and value:
            found = f.parent / value
    return found


def target(state_dir: Path) -> Target | None:
    """The user to become, or None (not root; INGESTD_USER is root; the state directory
    is missing or root's)."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get(ENV_USER, "").strip()
    if name:
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            raise NoSuchUser(
                f"{ENV_USER}={name}: no such user on this host; create it (the package's "
                f"user is ingestd) or unset {ENV_USER}"
            ) from None
        return None if user.pw_uid == 0 else Target(user, f"{ENV_USER}={name}")
    try:
        uid = os.stat(state_dir).st_uid
    except OSError:
        return None
    if uid == 0:
        return None
    try:
        user = pwd.getpwuid(uid)
    except KeyError:
        raise NoSuchUser(
            f"{state_dir} belongs to uid {uid}, which is no user on this host: give it to "
            f"the service user (chown -R ingestd: {state_dir}) or set {ENV_USER}"
        ) from None
    return Target(user, f"owner of {state_dir}")


def become(to: Target) -> None:
    """setgid, initgroups, setuid; the environment follows; one line on stderr."""
    user = to.user
    try:
        os.setgid(user.pw_gid)
        os.initgroups(user.pw_name, user.pw_gid)
        os.setuid(user.pw_uid)
    except OSError as exc:
        raise NoSuchUser(f"cannot run as {user.pw_name}: {exc.strerror}") from None
    os.environ.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    line = f"running as {user.pw_name} ({to.reason})"
    if log.json_output():
        log.get_logger().info("cli.service_user", message=line, user=user.pw_name)
    else:
        print(f"ingestd: {line}", file=sys.stderr)
