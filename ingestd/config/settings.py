"""One validated TOML schema for every ingestd process.

Every problem is reported with its key path, the bad value and what is allowed, e.g.
``intake.duplicates: must be one of 'skip', 'refuse' (got 'keep')``. All problems of a
file are collected, so a sysadmin fixes them in one round instead of one per restart.
"""

from __future__ import annotations

import os
import re
from ipaddress import IPv4Network, IPv6Network, ip_address
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ByteSize, Field, PrivateAttr, field_validator, model_validator

from ingestd.config import pathcheck
from ingestd.config.notify import NotifySink, SmtpConfig, check_notify
from ingestd.config.notify import secret_files as notify_secret_files
from ingestd.config.rules import (
    REGEX_TIMEOUT,
    SECONDS,
    ConfigModel,
    Shown,
    TaxonomyRule,
    WorkflowRule,
)
from ingestd.config.split import SourceSplit, SplitPolicy, effective
from ingestd.jobkinds import JobKind

# A type, or a family of them (ingestd/intake/filetypes.py: image = tiff, jpeg, png).
FileType = Literal["pdf", "tiff", "jpeg", "png", "image", "einvoice"]
# Which date a document gets when its file name and its text both have one.
DateSource = Literal["filename-first", "text-first"]
OcrEngine = Literal["tesseract", "tesseract-cli", "ocrmypdf"]
_ALL_TYPES: tuple[FileType, ...] = ("pdf", "image", "einvoice")


class _Section(ConfigModel):
    """A config table: unknown keys are errors (a typo like `max_file_sise` must not
    silently keep a default), values are immutable, a boolean is never a number."""


class DatabaseConfig(_Section):
    url: str | None = Field(
        default=None,
        description="libpq URL or key=value string, never with a password; omit it to run an "
        "embedded private cluster under `paths.state_dir`.",
    )
    pool_min_size: Annotated[int, Field(ge=1, le=64)] = 1
    """Connections each process keeps open at least."""
    pool_max_size: Annotated[int, Field(ge=1, le=256)] = 4
    """Connections each process opens at most (one intake needs one at a time)."""
    connect_timeout: Annotated[float, Field(gt=0, le=300), SECONDS] = 5.0
    """Seconds to wait for a connection before the database counts as down."""
    standby_wait: Annotated[float, Field(ge=0, le=300), SECONDS] = 10.0
    """After each intake COMMIT, seconds to wait at most for every streaming standby to
    have the WAL before the source is dropped, so a failover keeps it (README "High
    availability"); 0: do not wait. No standby: no wait."""

    @model_validator(mode="before")
    @classmethod
    def _hide_password(cls, data: Any) -> Any:
        # An error message shows the value it refuses: never the password it refuses.
        from ingestd.db.conninfo import redact_conninfo

        if isinstance(data, dict) and isinstance(data.get("url"), str):
            return {**data, "url": redact_conninfo(data["url"])}
        return data

    @field_validator("url")
    @classmethod
    def _url_shape(cls, v: str | None) -> str | None:
        # Parsed by psycopg as libpq will parse it, so check-config sees what the
        # processes will connect with; only ingestd.db.database speaks psycopg.
        from ingestd.db.conninfo import check_conninfo

        if v is not None:
            check_conninfo(v)  # ValueError: unparsable, or a password in any of its forms
        return v


class PathsConfig(_Section):
    state_dir: Path = Path("/var/lib/ingestd")
    """Host keys, the embedded database, the OCR page slots and the audit seal key."""
    archive: Annotated[Path | None, Shown(default="`<state_dir>/archive`")] = None
    """The WORM archive of originals (`<tenant>/<yyyy>/<mm>/<sha256>.<ext>`, mode 0440)."""
    derived: Annotated[Path | None, Shown(default="`<state_dir>/derived`")] = None
    """Derived data: OCR text, searchable PDFs, thumbnails."""
    spool: Path = Path("/var/spool/ingestd")
    """The durable spool of SFTP uploads waiting for intake."""

    @property
    def archive_dir(self) -> Path:
        return self.archive or self.state_dir / "archive"

    @property
    def derived_dir(self) -> Path:
        return self.derived or self.state_dir / "derived"

    @property
    def pgdata(self) -> Path:
        return self.state_dir / "pgdata"

    @property
    def ocr_slots_dir(self) -> Path:
        """The host-wide OCR page slots (lock files; worker.concurrency of them)."""
        return self.state_dir / "ocr-slots"


class IntakeConfig(_Section):
    max_file_size: ByteSize = ByteSize(512 * 1024 * 1024)
    """Largest file accepted."""
    allowed_types: list[FileType] = Field(default_factory=lambda: list(_ALL_TYPES))
    """File types accepted, detected from the content (magic bytes, an XML file's root
    element), never from the name: `pdf`, `tiff`, `jpeg`, `png`, or a family: `image` (the
    three image types), `einvoice` (XRechnung and other EN 16931 invoices as UBL or CII
    XML; a ZUGFeRD/Factur-X PDF is a `pdf`)."""
    duplicates: Literal["skip", "refuse"] = "skip"
    """The same bytes again for the same tenant: `skip` makes no second document (the source
    is removed), `refuse` refuses the file as a duplicate."""
    max_filename_bytes: Annotated[int, Field(ge=16, le=240)] = 200
    """Longest file name accepted, in UTF-8 bytes."""

    @field_validator("max_file_size")
    @classmethod
    def _positive(cls, v: ByteSize) -> ByteSize:
        if v <= 0:
            raise ValueError("must be greater than 0 bytes")
        return v

    @field_validator("allowed_types")
    @classmethod
    def _nonempty(cls, v: list[FileType]) -> list[FileType]:
        if not v:
            raise ValueError("must name at least one type")
        return v


class TitlesConfig(_Section):
    placeholder_patterns: list[str] = Field(default_factory=list)
    """More regular expressions (full match, case-insensitive) for scanner auto-names that
    get a placeholder title, replaced later from the OCR text."""

    @field_validator("placeholder_patterns")
    @classmethod
    def _compile(cls, v: list[str]) -> list[str]:
        from ingestd.filenames.titles import TitleRules  # compiled exactly as they will be used

        TitleRules(v)  # raises ValueError naming the bad pattern
        return v


TENANT_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}$"
# A tenant name as a key of a per-tenant table ([analysis.tenant_languages] ...).
TenantName = Annotated[str, Field(pattern=TENANT_NAME)]

# Names that file managers, sync tools, Office and upload clients use while a file is
# incomplete or that are not documents at all. Matched case-insensitively against every
# path component below the watched folder.
DEFAULT_IGNORE = [
    ".*",  # dotfiles: .DS_Store, ._resource forks, .stfolder, rsync's .name.XXXXXX
    "~$*",  # Office lock files
    "*.part",
    "*.filepart",  # WinSCP
    "*.crdownload",  # Chrome
    "*.download",  # Safari
    "*.tmp",
    "*.temp",
    "*.partial",  # Firefox
    "*.!sync",  # Syncthing-like
    "*.sb-*",  # BBEdit/macOS safe-save
    "Thumbs.db",
    "desktop.ini",
    "@eaDir",  # Synology thumbnails
    "#recycle",  # Synology recycle bin
    "$RECYCLE.BIN",
    "lost+found",
]


class HotfoldersConfig(_Section):
    stable_seconds: Annotated[float, Field(ge=0.1, le=3600), SECONDS] = 2.0
    """A file is taken once its size and mtime stayed unchanged this long (and, where the
    kernel can tell, no local process still has it open for writing)."""
    rescan_interval: Annotated[float, Field(ge=1, le=86400), SECONDS] = 60.0
    """Seconds between full walks of every hot folder, which pick up files whose events
    were lost."""
    folder_check_interval: Annotated[float, Field(ge=0.1, le=3600), SECONDS] = 2.0
    """Seconds between checks (one `stat()`) of each folder's root: a folder deleted and
    recreated, or a share unmounted or mounted again, is watched anew and scanned, without
    a restart."""
    poll_interval: Annotated[float, Field(ge=0.1, le=3600), SECONDS] = 5.0
    """Seconds between polls of the folders with `polling = true` (NFS/SMB mounts)."""
    retry_max_delay: Annotated[float, Field(ge=1, le=86400), SECONDS] = 300.0
    """Longest delay of the backoff with which transient failures (database down) are
    retried; the file stays where it is meanwhile."""
    workers: Annotated[int, Field(ge=1, le=32)] = 2
    """Intake threads shared by all hot folders."""
    ignore: list[str] = Field(default_factory=lambda: list(DEFAULT_IGNORE))
    """Names never taken (upload clients' temp files, Office locks, system files): globs
    matched case-insensitively against the file name and every sub-folder name; replaces
    the default list."""


class WatchConfig(_Section):
    path: Path
    """The folder to watch: absolute, outside every `paths.*` directory."""
    tenant: TenantName
    """The tenant its files belong to."""
    tags: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(default_factory=list)
    """Tags every document from this folder gets."""
    subfolder_tags: bool = False
    """Sub-folder names below `path` become tags too (`Buchhaltung/2026/11/x.pdf`:
    `Buchhaltung`; not the date folders, see `date_folder_tags`)."""
    date_folder_tags: bool = False
    """With `subfolder_tags`, folder names that only say when (`2026`, `11` below a year,
    `2026-11-30`, `20261130`, `30.11.2026`) become tags too."""
    date_source: DateSource = "filename-first"
    """Which date a document gets when its file name and its text both have one:
    `filename-first` (the file name's, `2026-11-03 Rechnung.pdf`) or `text-first` (the
    text's, e.g. for a scanner that names files by the time of the scan); the other one
    when only it has a date. A date set by a person is kept either way."""
    polling: bool = False
    """Poll instead of using inotify, which sees nothing on network mounts (NFS, SMB/CIFS)."""
    done: Path | None = None
    """Where ingested files are moved (after the commit), instead of being deleted."""
    failed: Annotated[Path | None, Shown(default="`<state_dir>/failed/<tenant>`")] = None
    """Where permanently refused files go, each with a `<name>.error.txt` saying why."""
    split: SourceSplit = None
    """How batch scans dropped here are split into documents: a table of its own, `false`
    for none, or absent for the tenant's `[split.<tenant>]`."""

    def failed_dir(self, state_dir: Path) -> Path:
        return self.failed or state_dir / "failed" / self.tenant


# Names a client uses while an upload is still incomplete; such a file is only ingested
# once it is renamed to a name that matches none of these (case-insensitive globs).
DEFAULT_SFTP_TEMP_NAMES = [
    "*.part",
    "*.filepart",  # WinSCP
    "*.tmp",
    "*.temp",
    "*.partial",
    "*.upload",
    "*.uploading",
    "*.inprogress",
    ".*",  # dot-files: rsync-style .name.XXXXXX and macOS ._ resource forks
]

SFTP_USERNAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_BCRYPT_HASH = re.compile(r"^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$")


def _check_authorized_key(line: str) -> str:
    import base64
    import binascii

    parts = line.split()
    if len(parts) < 2:
        raise ValueError("must be an authorized_keys line: '<type> <base64> [comment]'")
    if parts[0].startswith(("no-", "from=", "command=", "restrict", "environment=")):
        # Options would suggest restrictions we do not enforce; the account is the policy.
        raise ValueError("authorized_keys options are not supported; use allowed_sources")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"key data of {parts[0]!r} is not valid base64") from None
    n = int.from_bytes(blob[:4], "big") if len(blob) >= 4 else -1
    if n < 0 or blob[4 : 4 + n] != parts[0].encode():
        raise ValueError(f"key data does not match its type {parts[0]!r}")
    return line.strip()


class SftpAccountConfig(_Section):
    username: Annotated[str, Field(pattern=SFTP_USERNAME)]
    """Login name; the account sees only its own inbox (`/` is `<spool>/inbox/<username>`)."""
    tenant: TenantName
    """The tenant its uploads belong to."""
    password_hash: str | None = None
    """A bcrypt hash, never a password: `ingestd account hash-password` makes one."""
    authorized_keys: list[str] = Field(default_factory=list)
    """Public keys, one `authorized_keys` line each (no options), with or instead of
    `password_hash`."""
    allowed_sources: list[IPv4Network | IPv6Network] = Field(default_factory=list)
    """The networks logins are accepted from (e.g. the scanner VLAN); empty: any."""
    tags: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(default_factory=list)
    """Tags every document from this account gets."""
    subfolder_tags: bool = False
    """Directory names below the inbox (e.g. `Buchhaltung` of `Buchhaltung/2026/11`) become
    tags too; not the date folders, see `date_folder_tags`."""
    date_folder_tags: bool = False
    """With `subfolder_tags`, folder names that only say when (`2026`, `11` below a year,
    `2026-11-30`, `20261130`, `30.11.2026`) become tags too."""
    date_source: DateSource = "filename-first"
    """Which date a document from this account gets when its file name and its text both
    have one, as `watch[].date_source`."""
    quota: ByteSize = ByteSize(4 * 1024 * 1024 * 1024)
    """Bytes of uploads (not yet ingested) this account may hold in the spool, e.g. while
    the database is down."""
    legacy_algorithms: bool = False
    """Allow the SHA-1/CBC algorithms of `sftp.legacy_algorithms` for this account's
    scanner only."""
    split: SourceSplit = None
    """How batch scans this scanner sends are split into documents, as `watch[].split`."""

    @field_validator("password_hash")
    @classmethod
    def _bcrypt(cls, v: str | None) -> str | None:
        if v is not None and not _BCRYPT_HASH.fullmatch(v):  # fullmatch: no trailing "\n"
            raise ValueError(
                "must be a bcrypt hash ($2b$...); make one with `ingestd account hash-password`"
            )
        return v

    @field_validator("authorized_keys")
    @classmethod
    def _keys(cls, v: list[str]) -> list[str]:
        return [_check_authorized_key(line) for line in v]

    @model_validator(mode="after")
    def _has_credential(self) -> SftpAccountConfig:
        if not self.password_hash and not self.authorized_keys:
            raise ValueError(
                f"sftp account {self.username!r} needs password_hash and/or authorized_keys"
            )
        return self


class SftpBansConfig(_Section):
    enabled: bool = True
    """Ban the source addresses of too many failed logins."""
    threshold: Annotated[int, Field(ge=1, le=10000)] = 15
    """The score at which an address is banned: its connections are then closed before
    the SSH handshake."""
    # An unknown user scores higher than a wrong password: scanners with a stale password
    # must not lock themselves out as fast as a spray.
    score_unknown_user: Annotated[int, Field(ge=0, le=1000)] = 2
    """What a login with an unknown user name adds to its address's score."""
    score_wrong_password: Annotated[int, Field(ge=0, le=1000)] = 1
    """What a wrong password or key of a real account adds to its address's score."""
    observation: Annotated[float, Field(ge=1, le=86400 * 7), SECONDS] = 1800.0
    """Seconds over which an address's failed logins add up."""
    ban_time: Annotated[float, Field(ge=1, le=86400 * 30), SECONDS] = 1800.0
    """Seconds the first ban of an address lasts; each repeat doubles it, up to
    `max_ban_time`."""
    max_ban_time: Annotated[float, Field(ge=1, le=86400 * 365), SECONDS] = 7 * 86400.0
    """Seconds the longest ban lasts."""
    safelist: list[IPv4Network | IPv6Network] = Field(default_factory=list)
    """Networks never banned (monitoring hosts, the admin's own network)."""


class SftpConfig(_Section):
    listen: str = "0.0.0.0:2222"
    """`address:port` to listen on (`[::]:2222` for IPv6 and IPv4; port 22 needs
    CAP_NET_BIND_SERVICE, which the systemd unit grants)."""
    max_connections: Annotated[int, Field(ge=1, le=10000)] = 100
    """Logged-in sessions in total; a connection counts here only once it has logged in."""
    max_connections_per_ip: Annotated[int, Field(ge=1, le=10000)] = 20
    """Logged-in sessions from one source address."""
    # The unauthenticated connections' own pool: 100 idle sockets cannot lock scanners out
    # of the sessions. A scanner's handshake takes milliseconds; 5 at once from one address
    # is plenty (a burst beyond waits, without a thread, up to handshake_timeout for a
    # slot), and an attacker's address holds no more than that.
    max_unauthenticated: Annotated[int, Field(ge=1, le=10000)] = 50
    """Connections not logged in yet (TCP accepted, banner, key exchange, login) in total;
    past it a new one waits up to `handshake_timeout` for a slot, then is closed."""
    max_unauthenticated_per_ip: Annotated[int, Field(ge=1, le=10000)] = 5
    """Connections not logged in yet from one source address."""
    known_good_for: Annotated[float, Field(ge=0, le=86400 * 365), SECONDS] = 7 * 86400.0
    """An address that logged in within this many seconds still gets in while the
    unauthenticated pool is full, in place of the longest-waiting unauthenticated
    connection (of the address holding the most); 0: off."""
    handshake_timeout: Annotated[float, Field(ge=1, le=600), SECONDS] = 10.0
    """Seconds from TCP accept to the end of the key exchange (client banner included): a
    silent or trickling connection holds its slot no longer."""
    auth_timeout: Annotated[float, Field(ge=1, le=600), SECONDS] = 30.0
    """Seconds from the end of the key exchange to a successful login."""
    # Each upload holds a descriptor, and a client that never closes must not exhaust the
    # daemon's (systemd's default is 1,024); RLIMIT_NOFILE is read at start.
    max_handles_per_session: Annotated[int, Field(ge=1, le=4096)] = 64
    """Handles (open uploads, listed folders) one session may hold at once; all sessions
    together hold at most half the daemon's descriptor limit."""
    idle_timeout: Annotated[float, Field(ge=5, le=86400), SECONDS] = 600.0
    """Seconds without an SFTP request before the connection is closed."""
    max_auth_attempts: Annotated[int, Field(ge=1, le=100)] = 6
    """Failed logins on one connection before it is closed."""
    legacy_algorithms: bool = False
    """Offer SHA-1/CBC algorithms (ssh-rsa signatures, diffie-hellman-group14-sha1,
    aes-cbc, hmac-sha1) for old scanners; better per account (`legacy_algorithms` there)."""
    temp_names: list[str] = Field(default_factory=lambda: list(DEFAULT_SFTP_TEMP_NAMES))
    """Names of files still being uploaded (case-insensitive globs): such a file is
    ingested only once renamed to a name that matches none; replaces the default list."""
    window_size: Annotated[ByteSize, Field(ge=65536, le=2**31 - 1)] = ByteSize(16 * 1024 * 1024)
    """SSH flow control: bytes a client may send before the server acknowledges them (a
    larger window speeds up uploads on long links)."""
    max_packet_size: Annotated[ByteSize, Field(ge=32768, le=262144)] = ByteSize(262144)
    """The largest SSH packet a client may send."""
    # paramiko does its work in Python, so one process is one core.
    processes: Annotated[int, Field(ge=0, le=64)] = 0
    """Processes serving SFTP connections (key exchange, login, requests, the uploads'
    bytes): 0 is one per core, 1 the daemon's own process; a change needs a restart."""
    spool_workers: Annotated[int, Field(ge=1, le=32)] = 2
    """Threads taking completed uploads from the spool through intake."""
    retry_max_delay: Annotated[float, Field(ge=1, le=86400), SECONDS] = 60.0
    """Longest delay of the backoff with which spooled uploads are retried while the
    database is down."""
    # Its scanner gave up on such an upload; moving it frees the account's quota.
    abandoned_after: Annotated[float, Field(ge=60, le=86400 * 365), SECONDS] = 86400.0
    """A temp-named upload (`x.pdf.part`) not renamed for this many seconds is moved to the
    failed folder with a note saying so."""
    tenant_status_refresh: Annotated[float, Field(ge=0.5, le=3600), SECONDS] = 5.0
    """Seconds between reads of the tenant statuses from the database (logins of a
    suspended or deleting tenant's accounts are refused)."""
    tenant_status_max_age: Annotated[float, Field(ge=1, le=86400), SECONDS] = 60.0
    """Seconds the tenant statuses last read stay valid while the database is down; then
    logins are let in (their uploads wait in the spool)."""
    bans: SftpBansConfig = Field(default_factory=SftpBansConfig)
    """Brute-force defence: failed logins add to a score per source address, and an
    address whose score reaches `threshold` is banned."""
    accounts: list[SftpAccountConfig] = Field(default_factory=list)
    """Scanner accounts (one per scanner or group of scanners); reloaded on SIGHUP."""

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        parse_listen(v)
        return v

    @property
    def address(self) -> tuple[str, int]:
        return parse_listen(self.listen)

    @model_validator(mode="after")
    def _unique_users(self) -> SftpConfig:
        seen: set[str] = set()
        for i, acct in enumerate(self.accounts):
            if acct.username in seen:
                raise ValueError(f"sftp.accounts[{i}].username {acct.username!r} is used twice")
            seen.add(acct.username)
        return self

    def account(self, username: str) -> SftpAccountConfig | None:
        for acct in self.accounts:
            if acct.username == username:
                return acct
        return None


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:  # 0: any free port
        raise ValueError("must be 'address:port', e.g. '0.0.0.0:2222' or '[::]:2222'")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ip_address(host)
    except ValueError:
        raise ValueError(f"{host!r} is not an IP address") from None
    return host, int(port)


JOB_KINDS = tuple(str(k) for k in JobKind)


def _cores() -> int:
    return os.cpu_count() or 1


DEFAULT_POOL = "default"
POOL_NAME = r"^[a-z0-9][a-z0-9_-]{0,30}$"


def _known_kind_list(v: list[str]) -> list[str]:
    unknown = sorted(set(v) - set(JOB_KINDS))
    if unknown:
        raise ValueError(f"unknown job kinds {unknown}; known: {', '.join(JOB_KINDS)}")
    return v


class PoolConfig(_Section):
    """A pool of workers (`ingestd worker --pool NAME`, `ingestd-worker@NAME.service`): the
    tenants and job kinds it serves."""

    name: Annotated[str, Field(pattern=POOL_NAME)]
    """The pool's name (`default` is the pool that serves every tenant no other pool has);
    a-z, 0-9, `_` and `-`, up to 31."""
    tenants: list[TenantName] = Field(default_factory=list)
    """Tenants dedicated to this pool: only its workers serve them. Empty: the tenants no
    pool is dedicated to (the `default` pool's, so a pool of only some kinds)."""
    kinds: Annotated[list[str], AfterValidator(_known_kind_list)] = Field(default_factory=list)
    """Job kinds it runs; empty: every kind (also those of `--plugin` modules)."""
    workers: Annotated[int | None, Field(ge=1, le=256), Shown(default="worker.concurrency")] = None
    """Jobs one worker process of the pool runs at once (its lanes)."""
    short_lanes: Annotated[int | None, Field(ge=0, le=16), Shown(default="worker.short_lanes")] = (
        None
    )
    """Lanes beside `workers` reserved for short jobs (provision-tenant, deliver-webhook,
    notify, purge-document) of its tenants and kinds."""
    metrics_offset: Annotated[int | None, Field(ge=0, le=1000), Shown(default="10 × position")] = (
        None
    )
    """Its workers' /metrics port: `metrics.worker_listen`'s port + this + N - 1 for
    instance `NAME-N` (`NAME` is N = 1). Default: 10 for the first pool listed, 20 for the
    second, and so on; the default pool's instances use their number."""


class WorkerConfig(_Section):
    # The default, one per core, keeps every core busy whether the queue holds one
    # 300-page batch (its pages on every core) or 300 one-page scans (one job per core);
    # one worker unit per host is enough.
    concurrency: Annotated[int, Field(ge=1, le=256), Shown(default="one per CPU core")] = Field(
        default_factory=_cores
    )
    """Jobs one `ingestd worker` runs at once (each in a job child of its own), and pages
    OCRed at once on this host by all workers together (page slots under
    `paths.state_dir`)."""
    max_retries: Annotated[int, Field(ge=0, le=100)] = 5
    """Retries of a failed attempt; past them the job is failed."""
    retry_base: Annotated[float, Field(gt=0, le=86400), SECONDS] = 1.0
    """A failed attempt is retried after `retry_base * 2^retry_count` seconds (1, 2, 4 …)."""
    retry_jitter: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Random spread of each retry delay, as a fraction (0.1: ±10 %)."""
    lease_seconds: Annotated[float, Field(ge=2, le=86400), SECONDS] = 60.0
    """A running job's lease, renewed every third of it: a worker that stops renewing
    (killed, host lost) has its job rescued once the lease ran out."""
    poll_interval: Annotated[float, Field(ge=0.05, le=3600), SECONDS] = 5.0
    """Seconds between polls for jobs, which cover lost LISTEN/NOTIFY wake-ups and
    retries."""
    tenant_cap: Annotated[int, Field(ge=0, le=10000)] = 0
    """Jobs of one tenant this worker lets run at once, all workers together; 0: no cap.
    A tenant's own cap is `ingestd tenant limits NAME --max-running N` (in the database,
    for every host)."""
    short_lanes: Annotated[int, Field(ge=0, le=16)] = 1
    """Lanes of every worker process, beside `concurrency`, reserved for short jobs
    (provision-tenant, deliver-webhook, notify, purge-document): they start
    within seconds however long the OCR backlog; 0: none (the other lanes run them too)."""
    pools: list[PoolConfig] = Field(default_factory=list)
    """Pools of workers, each serving its tenants and kinds (`[[worker.pools]]`); a
    worker started without `--pool` serves the `default` pool: every tenant no pool is
    dedicated to, every kind."""
    timeouts: dict[str, Annotated[float, Field(gt=0, le=86400), SECONDS]] = Field(
        default_factory=lambda: {
            str(JobKind.analyze_document): 1800.0,
            str(JobKind.split_batch): 1800.0,
            str(JobKind.purge_document): 600.0,
            str(JobKind.provision_tenant): 600.0,
            str(JobKind.delete_tenant): 3600.0,
            str(JobKind.deliver_webhook): 120.0,
            str(JobKind.notify): 300.0,
        }
    )
    """Wall-clock limit in seconds of one attempt, per job kind; the job's child is killed
    past it (a table given replaces this one, and kinds it leaves out get
    `timeout_default`)."""
    timeout_default: Annotated[float, Field(gt=0, le=86400), SECONDS] = 1800.0
    """The limit of one attempt for job kinds not in `timeouts` (kinds of plugin modules)."""
    shutdown_grace: Annotated[float, Field(ge=0, le=3600), SECONDS] = 30.0
    """Seconds SIGTERM lets the running job finish before it is handed back to the queue."""
    prune_after: Annotated[float, Field(ge=3600, le=86400 * 3650), SECONDS] = 30 * 86400.0
    """Finished jobs (done or failed) older than this many seconds are deleted."""

    @field_validator("timeouts")
    @classmethod
    def _known_kinds(cls, v: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(v) - set(JOB_KINDS))
        if unknown:
            raise ValueError(f"unknown job kinds {unknown}; known: {', '.join(JOB_KINDS)}")
        return v

    @field_validator("pools")
    @classmethod
    def _pools_apart(cls, v: list[PoolConfig]) -> list[PoolConfig]:
        names = [p.name for p in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"pool names must be unique; given more than once: {twice}")
        owners: dict[str, str] = {}
        for pool in v:
            if pool.name == DEFAULT_POOL and pool.tenants:
                raise ValueError(
                    "the default pool serves every tenant no other pool has; it takes no "
                    "tenants list (dedicate them to a pool of their own)"
                )
            for tenant in pool.tenants:
                if tenant in owners and owners[tenant] != pool.name:
                    raise ValueError(
                        f"tenant {tenant!r} is dedicated to pools {owners[tenant]!r} and "
                        f"{pool.name!r}; a tenant belongs to one pool"
                    )
                owners[tenant] = pool.name
        offsets = [p.metrics_offset for p in v if p.metrics_offset is not None]
        if len(offsets) != len(set(offsets)):
            raise ValueError("two pools have the same metrics_offset")
        return v

    def timeout_for(self, kind: str) -> float:
        return self.timeouts.get(kind, self.timeout_default)


TESSERACT_LANG = r"^[a-z]{3}(_[a-z]+)?$"  # deu, eng, chi_sim, deu_latf


class AnalysisConfig(_Section):
    """analyze-document: OCR (ocrmypdf/tesseract), derived title and date."""

    languages: list[Annotated[str, Field(pattern=TESSERACT_LANG)]] = Field(
        default_factory=lambda: ["deu", "eng"], min_length=1
    )
    """Tesseract languages to OCR with; each needs its pack installed
    (`tesseract-ocr-<lang>`)."""
    tenant_languages: dict[
        TenantName,
        Annotated[list[Annotated[str, Field(pattern=TESSERACT_LANG)]], Field(min_length=1)],
    ] = Field(default_factory=dict)
    """Languages per tenant, instead of `languages`."""
    mode: Literal["skip", "redo", "force"] = "skip"
    """PDF pages that already have text: `skip` them (their text is kept), `redo` the OCR
    layer, or `force` (rasterise and OCR every page)."""
    rotate_pages: bool = True
    """Turn pages upright first (tesseract's orientation detection)."""
    # Lower it for sparse pages in sans-serif fonts that stay sideways; too low turns
    # pages tesseract is unsure of.
    rotate_threshold: Annotated[float, Field(ge=0, le=100)] = 14.0
    """Orientation confidence a page needs to be turned (ocrmypdf's
    `--rotate-pages-threshold`)."""
    # Mode "redo" always runs ocrmypdf: only it strips an old OCR layer.
    engine: OcrEngine = "tesseract"
    """The OCR engine: `tesseract` (in the job child: models loaded once, pages on every
    core, the text layer laid over the original pages), `tesseract-cli` (the same, each
    page read by tesseract's command line: for hosts without the tesserocr wheel; models
    load per page) or `ocrmypdf` (its command line per file); mode `redo` always runs
    ocrmypdf."""
    tenant_engines: dict[TenantName, OcrEngine] = Field(default_factory=dict)
    """The OCR engine per tenant, instead of `engine`."""
    # The page slots bound all files together anyway.
    jobs: Annotated[int, Field(ge=0, le=256)] = 0
    """Pages of one file OCRed at once (ocrmypdf `--jobs`); 0: `worker.concurrency`."""
    # Retried once because the machine may have been busy; every further attempt would
    # hold a worker as long again.
    ocr_timeout: Annotated[float, Field(gt=0, le=86400), SECONDS] = 1500.0
    """Seconds the OCR of one file may take, inside `worker.timeouts.analyze-document`; a
    file that times out is retried once, then its document needs attention."""
    page_timeout: Annotated[float, Field(gt=0, le=86400), SECONDS] = 300.0
    """Seconds tesseract may spend on one page (a hostile page cannot hold a core for the
    whole `ocr_timeout`); a page past it makes the document need attention."""
    # Limits of one file's analysis: a file over one is kept, its document needs attention
    # with the limit named, and it is not retried.
    max_pages: Annotated[int, Field(ge=1, le=1_000_000)] = 2000
    """Pages one file may have (OCR takes about a second per page and core); a file over
    it stays archived and its document needs attention."""
    # A 200 x 200 inch page is 3,600 megapixels (about 11 GB to render).
    max_page_megapixels: Annotated[int, Field(ge=1, le=100_000)] = 300
    """Megapixels of one page as OCR rasterises it (PDF pages at `image_dpi`; A0 at 300
    dpi is 140); a file with a larger page needs attention."""
    memory_limit: ByteSize | Literal["auto"] = "auto"
    """Memory one file's OCR may take (engine `tesseract`: what the job child may grow by;
    `ocrmypdf`: each OCR process's address space), or `auto`: RAM / (2 × cores), from 512
    MiB to 4 GiB; a file that needs more fails instead of waking the OOM killer."""
    thumbnail_width: Annotated[int, Field(ge=32, le=4000)] = 400
    """Width in pixels of the first page's PNG thumbnail."""
    image_dpi: Annotated[int, Field(ge=50, le=2400)] = 300
    """Resolution assumed for images whose metadata states none (phone photos, some
    scanners)."""
    title_max_length: Annotated[int, Field(ge=16, le=200)] = 128
    """A title read from the text (only in place of a placeholder title) is cut to this
    many characters."""
    regex_timeout: Annotated[float, Field(gt=0, le=60), SECONDS] = REGEX_TIMEOUT
    """Seconds one search of a taxonomy regex rule in one document's text may take; one
    that takes longer (catastrophic backtracking) does not match and is logged."""
    rules_files: list[Path] = Field(default_factory=list)
    """More files of `[[taxonomy]]` and `[[workflows]]` tables (the same keys as here),
    relative to this config file."""

    def languages_for(self, tenant: str) -> tuple[str, ...]:
        return tuple(self.tenant_languages.get(tenant) or self.languages)

    def engine_for(self, tenant: str) -> OcrEngine:
        return self.tenant_engines.get(tenant, self.engine)

    def memory_limit_bytes(self) -> int:
        if self.memory_limit != "auto":
            return int(self.memory_limit)
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        share = total // (2 * (os.cpu_count() or 1))
        return max(512 * 2**20, min(4 * 2**30, share))


class DeliveriesConfig(_Section):
    """The outbox (workflow webhooks, operator notifications): its own retry ladder.

    A receiver or mail relay may be down for hours; a delivery is retried after
    retry_base * 2^n seconds (30 s, 1 min, 2 min, ... about 17 h for the 12th), then it is
    failed for good and that failure is itself an operator event.
    """

    max_retries: Annotated[int, Field(ge=0, le=100)] = 12
    """Retries of a webhook or notification delivery; then it has failed for good, which
    is itself an operator event (`delivery.failed`)."""
    retry_base: Annotated[float, Field(gt=0, le=86400), SECONDS] = 30.0
    """A failed delivery is retried after `retry_base * 2^n` seconds (30 s, 1 min, 2 min,
    … about 17 h for the 12th)."""
    retry_jitter: Annotated[float, Field(ge=0, le=1)] = 0.1
    """Random spread of each retry delay, as a fraction (0.1: ±10 %)."""


class RetentionRule(ConfigModel):
    """Documents of a class (a tag, a document type or a correspondent, by name, any case)
    kept ``years``; the longest matching rule wins over the tenant's default."""

    tenant: TenantName | Literal["*"] = "*"
    """The tenant the rule applies to; `*`: every tenant."""
    match: Literal["tag", "document_type", "correspondent"]
    """What names the class: a tag, the document type or the correspondent."""
    name: Annotated[str, Field(min_length=1, max_length=128)]
    """The name of the tag, document type or correspondent (in any case)."""
    years: Annotated[int, Field(ge=0, le=100)]
    """Whole calendar years after the year of ingest that documents of the class are kept;
    the longest matching rule wins."""


# -- arrivals (issue 30) -------------------------------------------------------------------
class ArrivalsConfig(_Section):
    """The record of every file that reached a source (`ingestd documents find`, `ingestd
    trace`): how long it is kept."""

    keep_days: Annotated[int, Field(ge=1, le=36500)] = 400
    """Days an arrival row is kept (then housekeeping removes it); the documents and
    their audit trail are kept by their own rules."""


class RetentionConfig(_Section):
    """How long an archived original must be kept before purge-document or delete-tenant
    may remove it: whole calendar years after the year of ingest (GoBD counts to the end
    of the year), by document class, and never while a legal hold is on it."""

    # Records law in DE: 10 years for books and invoices, 8 for vouchers, 6 for business
    # letters.
    years: Annotated[int, Field(ge=0, le=100)] = 10
    """Whole calendar years after the year of ingest an original is kept (GoBD counts to
    the end of the year), unless a rule gives its class another period; 0: no retention."""
    tenant_years: dict[TenantName, Annotated[int, Field(ge=0, le=100)]] = Field(
        default_factory=dict
    )
    """Years per tenant, instead of `years`."""
    rules: list[RetentionRule] = Field(default_factory=list)
    """Retention by document class (a tag, document type or correspondent)."""

    def years_for(self, tenant: str) -> int:
        return self.tenant_years.get(tenant, self.years)

    def rules_for(self, tenant: str) -> list[RetentionRule]:
        return [r for r in self.rules if r.tenant in ("*", tenant)]


def _http_url(v: str) -> str:
    if v and not re.match(r"^https?://[^\s/]+", v):
        raise ValueError("must be an http:// or https:// URL")
    return v


# An http(s) URL, or empty for "none".
HttpUrlText = Annotated[str, AfterValidator(_http_url), Shown(kind="http(s) URL or empty")]


class S3Config(_Section):
    """An S3-compatible bucket with Object Lock enabled (AWS S3, MinIO, Ceph RGW)."""

    endpoint: HttpUrlText = ""
    """The S3 endpoint, e.g. `https://minio.example:9000` for MinIO; empty: AWS's own for
    the region."""
    bucket: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")]
    """The bucket, created with Object Lock enabled."""
    region: str = "us-east-1"
    """The bucket's region."""
    prefix: Annotated[str, Field(pattern=r"^([A-Za-z0-9._-]+/)*$")] = ""
    """Keys go under this prefix (`ingestd/`), so that one bucket may serve several
    appliances."""
    addressing_style: Literal["path", "virtual", "auto"] = "path"
    """`path` for MinIO and Ceph RGW, `virtual` for AWS."""
    credentials_file: Path | None = None
    """The access key: a 0600 file of two lines, `access_key_id = …` and
    `secret_access_key = …`; unset: the environment (`AWS_ACCESS_KEY_ID` and
    `AWS_SECRET_ACCESS_KEY`, e.g. from a systemd credential) or the instance's role."""
    timeout: Annotated[float, Field(gt=0, le=600), SECONDS] = 30.0
    """Seconds for a connection and for each read."""


class ArchiveConfig(_Section):
    """Where originals are kept: the local WORM file system (default) or an S3 bucket
    with Object Lock in COMPLIANCE mode."""

    backend: Literal["local", "s3"] = "local"
    """Where originals are kept: `local` (`paths.archive`, WORM by link-without-overwrite
    and mode 0440) or `s3` (a bucket with Object Lock, each original locked in COMPLIANCE
    mode to the end of its retention)."""
    s3: S3Config | None = None
    """The S3-compatible bucket (AWS S3, MinIO, Ceph RGW), needed with `backend = "s3"`."""

    @model_validator(mode="after")
    def _s3_named(self) -> ArchiveConfig:
        if self.backend == "s3" and self.s3 is None:
            raise ValueError('backend = "s3" needs an [archive.s3] table with its bucket')
        return self


class AuditConfig(_Section):
    """The seals of the audit trail (``ingestd audit seal``, ingestd-audit-seal.timer).

    Every seal is an Ed25519 signature by the key in ``<state_dir>/audit/`` (made on the
    first seal, 0600); with ``tsa_url`` also an RFC 3161 timestamp from that authority.
    """

    tsa_url: HttpUrlText = ""
    """URL of an RFC 3161 timestamp authority (e.g. `https://freetsa.org/tsr`); empty:
    seals are signed only."""
    tsa_ca_file: Path | None = None
    """The CA certificate(s) the authority's certificate chains to, which seal and verify
    check every timestamp against; unset: timestamps are kept, not checked."""
    tsa_timeout: Annotated[float, Field(gt=0, le=300), SECONDS] = 10.0
    """Seconds to wait for the timestamp authority."""


class MetricsConfig(_Section):
    """The Prometheus endpoint (/metrics) of each process; loopback by default."""

    enabled: bool = True
    """Serve `GET /metrics`; keep the endpoints on loopback (or a management network), they
    name tenants and accounts."""
    listen: str = "127.0.0.1:9464"
    """`address:port` of the endpoint of `ingestd serve`."""
    # Port 0: any free port (tests).
    worker_listen: str = "127.0.0.1:9470"
    """`address:port` of the endpoint of `ingestd worker`: `--metrics-offset N` adds N to
    the port (`ingestd-worker@N`), so that each instance has its own."""

    web_listen: str = "127.0.0.1:9468"
    """`address:port` of the endpoint of `ingestd web` (apart from the console's own port,
    which may face users)."""

    @field_validator("listen", "worker_listen", "web_listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        parse_listen(v)
        return v


# -- the web console (issue 31) -------------------------------------------------------------
class LdapGroup(ConfigModel):
    """A directory group whose members get a capability set in a tenant."""

    group: Annotated[str, Field(min_length=3, max_length=1000)]
    """The group's distinguished name, e.g. `CN=Buchhaltung,OU=Groups,DC=example,DC=org`."""
    tenant: TenantName
    """The tenant its members belong to."""
    set: Literal["owner", "user", "readonly", "webdav"]
    """Their capability set there (a person in several groups of one tenant gets the
    first of owner, user, readonly, webdav they qualify for)."""


class LdapConfig(_Section):
    """Directory login (LDAP, Active Directory) for the web console and WebDAV: a person
    without a local password logs in with the directory's, and the tenants named in
    `groups` take their members from the directory at every login."""

    url: Annotated[str, Field(pattern=r"^ldaps?://[^\s/]+/?$")]
    """`ldaps://dc.example.org` (or `ldap://...` with `start_tls`)."""
    start_tls: bool = False
    """Upgrade an `ldap://` connection with StartTLS before any password is sent."""
    ca_file: Path | None = None
    """PEM file of the CA the server's certificate must chain to (default: the system's)."""
    allow_plaintext: bool = False
    """Send passwords over `ldap://` without StartTLS: only for a directory on loopback."""
    bind_dn: str | None = None
    """The service account that looks people up (none: anonymous search)."""
    bind_password_file: Path | None = None
    """Its password, in a file only the service user may read (0600 or 0640)."""
    user_base: Annotated[str, Field(min_length=1)]
    """Where people are searched, e.g. `OU=People,DC=example,DC=org`."""
    user_filter: str = "(uid={login})"
    """`{login}` is the login typed (escaped); Active Directory: `(sAMAccountName={login})`."""
    group_base: Annotated[str, Field(min_length=1)]
    """Where groups are searched."""
    group_filter: str = "(&(objectClass=groupOfNames)(member={dn}))"
    """`{dn}` is the person's DN (escaped); Active Directory: `(member={dn})`."""
    groups: list[LdapGroup] = Field(default_factory=list)
    """Which group gives which capability set in which tenant."""
    admin_groups: list[str] = Field(default_factory=list)
    """Groups (DNs) whose members are appliance admins."""
    timeout: Annotated[float, Field(gt=0, le=60)] = 5.0
    """Seconds to connect and for each answer."""

    @model_validator(mode="after")
    def _safe(self) -> LdapConfig:
        if "{login}" not in self.user_filter:
            raise ValueError("user_filter must contain {login}")
        if "{dn}" not in self.group_filter:
            raise ValueError("group_filter must contain {dn}")
        if (self.bind_dn is None) != (self.bind_password_file is None):
            raise ValueError("bind_dn and bind_password_file go together")
        plain = self.url.startswith("ldap://") and not self.start_tls
        if plain and not self.allow_plaintext:
            raise ValueError(
                "ldap:// sends passwords in the clear: use ldaps://, start_tls = true, or "
                "(a directory on loopback only) allow_plaintext = true"
            )
        return self


class WebConfig(_Section):
    """The web console (`ingestd web`, unit `ingestd-web.service`): people search, view and
    download their tenants' documents. Loopback by default: put it behind a reverse proxy
    that speaks HTTPS (`behind_proxy`), or give it a certificate."""

    listen: str = "127.0.0.1:8088"
    """`address:port` it serves on."""
    tls_certificate: Path | None = None
    """A PEM certificate (chain) to serve HTTPS with itself; with `tls_key`."""
    tls_key: Path | None = None
    """The certificate's PEM private key (readable by the service user only)."""
    behind_proxy: bool = False
    """A reverse proxy on this host speaks HTTPS for it: the proxy's X-Forwarded-For and
    X-Forwarded-Proto are believed (from 127.0.0.1 and ::1 only) and cookies are Secure."""
    session_minutes: Annotated[int, Field(ge=5, le=7 * 24 * 60)] = 480
    """A login lasts this long without being asked again."""
    login_failures: Annotated[int, Field(ge=1, le=1000)] = 10
    """Failed logins from one address, or for one login, within `login_window_seconds`
    after which further attempts are refused (429) until the window has passed."""
    login_window_seconds: Annotated[int, Field(ge=10, le=86400)] = 600
    """The window `login_failures` counts in."""
    requests_per_minute: Annotated[int, Field(ge=10, le=100_000)] = 600
    """Requests one logged-in person may make in a minute (pages, downloads, WebDAV);
    more are answered 429 until the minute has moved on."""
    ldap: LdapConfig | None = None
    """Directory login (LDAP, Active Directory); none: local people only."""

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        parse_listen(v)
        return v

    @model_validator(mode="after")
    def _tls_pair(self) -> WebConfig:
        if (self.tls_certificate is None) != (self.tls_key is None):
            raise ValueError("tls_certificate and tls_key go together: give both or neither")
        return self

    @property
    def secure(self) -> bool:
        """Whether browsers reach it over HTTPS (its own TLS, or the proxy's)."""
        return self.tls_certificate is not None or self.behind_proxy


class LogConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    """The least severe level logged."""
    format: Literal["auto", "json", "console"] = "auto"
    """`json` lines, readable `console` text, or `auto`: JSON when stderr is not a terminal
    (journald), text on a terminal."""


class Config(_Section):
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    """The PostgreSQL database; no passwords here: `~/.pgpass`, `PGPASSFILE` or peer
    authentication."""
    paths: PathsConfig = Field(default_factory=PathsConfig)
    """Where the appliance keeps its state, archive, derived data and spool."""
    intake: IntakeConfig = Field(default_factory=IntakeConfig)
    """What intake accepts, from every source."""
    titles: TitlesConfig = Field(default_factory=TitlesConfig)
    """Placeholder titles for scanners' automatic file names."""
    log: LogConfig = Field(default_factory=LogConfig)
    """The log of every process."""
    hotfolders: HotfoldersConfig = Field(default_factory=HotfoldersConfig)
    """What all hot folders share."""
    watch: list[WatchConfig] = Field(default_factory=list)
    """Hot folders; reloaded on SIGHUP."""
    sftp: SftpConfig = Field(default_factory=SftpConfig)
    """The SFTP server for network scanners; it runs only when at least one
    `[[sftp.accounts]]` exists."""
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    """The job workers (`ingestd worker`): concurrency, retries, leases and time limits."""
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    """analyze-document: OCR, then title, date, taxonomy and workflows."""
    arrivals: ArrivalsConfig = Field(default_factory=ArrivalsConfig)
    """Every file that reached a source, with what became of it (issue 30)."""
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    """How long an archived original must be kept before purge-document or a tenant
    delete may remove it, and never while a legal hold is on it."""
    audit: AuditConfig = Field(default_factory=AuditConfig)
    """The seals of the audit trail (`ingestd audit seal`, `ingestd-audit-seal.timer`): an
    Ed25519 signature by the key in `<state_dir>/audit/`, with `tsa_url` also an RFC 3161
    timestamp."""
    archive: ArchiveConfig = Field(default_factory=ArchiveConfig)
    """Where originals are kept: the local WORM file system or an S3 bucket."""
    deliveries: DeliveriesConfig = Field(default_factory=DeliveriesConfig)
    """The outbox's retry ladder: workflow webhooks and operator notifications are jobs of
    their own, so a receiver that is down fails only its delivery."""
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    """The Prometheus endpoint (`/metrics`) of each process; loopback by default."""
    web: WebConfig = Field(default_factory=WebConfig)
    """The web console for tenant members (`ingestd web`); loopback by default."""
    taxonomy: list[TaxonomyRule] = Field(default_factory=list)
    """Taxonomy rules (paperless-ngx's matching): each assigns a tag, a correspondent or a
    document type to a document of its tenant whose text matches."""
    workflows: list[WorkflowRule] = Field(default_factory=list)
    """On-upload workflows, run once per document in this order after taxonomy: when all
    conditions hold, the actions run."""
    # Operator notifications (ingestd/config/notify.py): the mail relay and the sinks.
    smtp: SmtpConfig | None = None
    """The mail relay that e-mail notification sinks send through."""
    notify: list[NotifySink] = Field(default_factory=list)
    """Operator notification sinks: each operator event goes to every sink that wants it,
    as a job of its own on the `[deliveries]` retry ladder."""
    split: dict[TenantName, SplitPolicy] = Field(default_factory=dict)
    """A tenant's default split policy for batch scans from its hot folders and SFTP
    accounts without a `split` of their own."""

    # --- #30 (names): the file this config was read from ---------------------------------
    # Not a key: load_config sets it (None for a config built in memory). Notifications
    # print `ingestd --config PATH ...` when it is not the default file.
    _source_path: Path | None = PrivateAttr(default=None)

    def named_paths(self) -> list[pathcheck.NamedPath]:
        """Every path of the config with its key and role, in config order (what
        ingestd/config/pathcheck.py checks for overlaps and protects at runtime)."""
        p, named, role = self.paths, pathcheck.NamedPath, pathcheck.Role
        out = [
            named("paths.state_dir", p.state_dir, role.state),
            named("paths.archive", p.archive_dir, role.archive),
            named("paths.derived", p.derived_dir, role.derived),
            named("paths.spool", p.spool, role.spool),
        ]
        for i, w in enumerate(self.watch):
            out.append(named(f"watch[{i}].path", w.path, role.hot, i))
            if w.done is not None:
                out.append(named(f"watch[{i}].done", w.done, role.done, i))
            out.append(named(f"watch[{i}].failed", w.failed_dir(p.state_dir), role.failed, i))
        return out

    @property
    def source_path(self) -> Path | None:
        """The absolute path of the file this config was read from (None: in memory)."""
        return self._source_path

    def read_from(self, path: Path) -> Config:
        """This config, remembering that it was read from ``path`` (made absolute)."""
        self._source_path = path.absolute()
        return self

    def split_policy(self, tenant: str, source: SourceSplit) -> SplitPolicy | None:
        """The split policy for a file of ``tenant`` from a source set to ``source``."""
        return effective(source, self.split.get(tenant))

    @model_validator(mode="after")
    def _notify_sinks(self) -> Config:
        problems = check_notify(self.smtp, self.notify)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def secret_files(self) -> list[tuple[str, Path]]:
        """Every file a process will read a secret from, with its key path, for
        check-config to check on the machine it runs on (ingestd.ops.machine). Not checked in
        the schema: the config may be written on another host. New kinds of secrets
        (notification sinks) add their files here."""
        files: list[tuple[str, Path]] = []
        for i, w in enumerate(self.workflows):  # rules_files' workflows are merged in
            hook = w.then.webhook
            if hook is not None and hook.secret_file is not None:
                files.append((f"workflows[{i}].then.webhook.secret_file", hook.secret_file))
        files.extend(notify_secret_files(self.smtp, self.notify))
        s3 = self.archive.s3
        if self.archive.backend == "s3" and s3 is not None and s3.credentials_file is not None:
            files.append(("archive.s3.credentials_file", s3.credentials_file))
        return files

    @model_validator(mode="after")
    def _workflow_names_unique(self) -> Config:
        seen: set[tuple[str, str]] = set()
        for i, w in enumerate(self.workflows):
            key = (w.tenant, w.name)
            if key in seen:
                raise ValueError(
                    f"workflows[{i}].name: {w.name!r} is used twice for "
                    f"tenant {w.tenant!r} (a workflow runs once per document, "
                    "by name)"
                )
            seen.add(key)
        return self

    @model_validator(mode="after")
    def _watch_paths_safe(self) -> Config:
        # One validator for all path problems: pydantic stops at the first one that fails.
        problems = []
        for i, w in enumerate(self.watch):
            for name, value in (("path", w.path), ("done", w.done), ("failed", w.failed)):
                if value is not None and not value.is_absolute():
                    problems.append(
                        f"watch[{i}].{name} must be an absolute path (got {str(value)!r})"
                    )
        # Only what the text shows; load_config then checks real paths and mounts
        # (ingestd.config.pathcheck, where the rules are), which is the authority.
        problems.extend(pathcheck.lexical_problems(self))
        if problems:
            raise ValueError("; ".join(problems))
        return self
