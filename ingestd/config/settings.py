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

from pydantic import AfterValidator, ByteSize, Field, field_validator, model_validator

from ingestd.config import pathcheck
from ingestd.config.notify import NotifySink, SmtpConfig, check_notify
from ingestd.config.notify import secret_files as notify_secret_files
from ingestd.config.rules import REGEX_TIMEOUT, ConfigModel, TaxonomyRule, WorkflowRule
from ingestd.config.split import SourceSplit, SplitPolicy, effective
from ingestd.queue.kinds import JobKind

FileType = Literal["pdf", "tiff", "jpeg", "png"]
_ALL_TYPES: tuple[FileType, ...] = ("pdf", "tiff", "jpeg", "png")


class _Section(ConfigModel):
    """A config table: unknown keys are errors (a typo like `max_file_sise` must not
    silently keep a default), values are immutable, a boolean is never a number."""


class DatabaseConfig(_Section):
    url: str | None = Field(
        default=None,
        description="libpq URL; omit to run an embedded private cluster under paths.state_dir",
    )
    pool_min_size: Annotated[int, Field(ge=1, le=64)] = 1
    pool_max_size: Annotated[int, Field(ge=1, le=256)] = 4
    connect_timeout: Annotated[float, Field(gt=0, le=300)] = 5.0

    @model_validator(mode="before")
    @classmethod
    def _hide_password(cls, data: Any) -> Any:
        # An error message shows the value it refuses: never the password it refuses.
        from ingestd.db.database import redact_conninfo

        if isinstance(data, dict) and isinstance(data.get("url"), str):
            return {**data, "url": redact_conninfo(data["url"])}
        return data

    @field_validator("url")
    @classmethod
    def _url_shape(cls, v: str | None) -> str | None:
        # Parsed by psycopg as libpq will parse it, so check-config sees what the
        # processes will connect with; only ingestd.db.database speaks psycopg.
        from ingestd.db.database import check_conninfo

        if v is not None:
            check_conninfo(v)  # ValueError: unparsable, or a password in any of its forms
        return v


class PathsConfig(_Section):
    state_dir: Path = Path("/var/lib/ingestd")
    archive: Path | None = None
    derived: Path | None = None
    spool: Path = Path("/var/spool/ingestd")

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
    allowed_types: list[FileType] = Field(default_factory=lambda: list(_ALL_TYPES))
    duplicates: Literal["skip", "refuse"] = "skip"
    max_filename_bytes: Annotated[int, Field(ge=16, le=240)] = 200

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

    @field_validator("placeholder_patterns")
    @classmethod
    def _compile(cls, v: list[str]) -> list[str]:
        from ingestd.intake.titles import TitleRules  # compiled exactly as they will be used

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
    # A file is taken once size and mtime stayed unchanged this long (and, where the
    # kernel can tell, no local process still has it open for writing).
    stable_seconds: Annotated[float, Field(ge=0.1, le=3600)] = 2.0
    # Full walk of every watched folder: picks up files whose events were lost.
    rescan_interval: Annotated[float, Field(ge=1, le=86400)] = 60.0
    # One stat() of each folder root this often: a folder deleted and recreated, or a
    # share unmounted (or mounted again), gets a new observer and a scan, no restart.
    folder_check_interval: Annotated[float, Field(ge=0.1, le=3600)] = 2.0
    # Poll interval for folders with polling = true (NFS/SMB mounts).
    poll_interval: Annotated[float, Field(ge=0.1, le=3600)] = 5.0
    # Transient failures (database down) are retried with backoff up to this delay.
    retry_max_delay: Annotated[float, Field(ge=1, le=86400)] = 300.0
    # Intake threads shared by all hot folders.
    workers: Annotated[int, Field(ge=1, le=32)] = 2
    ignore: list[str] = Field(default_factory=lambda: list(DEFAULT_IGNORE))


class WatchConfig(_Section):
    path: Path
    tenant: TenantName
    tags: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(default_factory=list)
    # Sub-folder names below `path` become tags (Buchhaltung/2026/x.pdf -> Buchhaltung, 2026).
    subfolder_tags: bool = False
    # inotify sees nothing on network mounts: poll instead.
    polling: bool = False
    # After COMMIT: move the file here instead of deleting it.
    done: Path | None = None
    # Permanently refused files go here with <name>.error.txt; default
    # <state_dir>/failed/<tenant>.
    failed: Path | None = None
    # Batch scans dropped here are split into documents (ingestd/config/split.py): a
    # table of its own, false for none, absent for the tenant's [split.<tenant>].
    split: SourceSplit = None

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
    tenant: TenantName
    # bcrypt only, never a password: `ingestd account hash-password` makes one.
    password_hash: str | None = None
    authorized_keys: list[str] = Field(default_factory=list)
    # Logins are accepted only from these networks (e.g. the scanner VLAN); empty = any.
    allowed_sources: list[IPv4Network | IPv6Network] = Field(default_factory=list)
    tags: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(default_factory=list)
    # Directory names below the inbox (e.g. Buchhaltung/2026) become tags.
    subfolder_tags: bool = False
    # Pending (uploaded, not yet ingested) bytes this account may hold in the spool.
    quota: ByteSize = ByteSize(4 * 1024 * 1024 * 1024)
    # Allow SHA-1/CBC algorithms for this account's scanner (see sftp.legacy_algorithms).
    legacy_algorithms: bool = False
    # Batch scans this scanner sends are split into documents (as watch[].split).
    split: SourceSplit = None

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
    # Failed logins add to a per-IP score within `observation` seconds; reaching
    # `threshold` bans the IP. An unknown user scores higher than a wrong password:
    # scanners with a stale password must not lock themselves out as fast as a spray.
    threshold: Annotated[int, Field(ge=1, le=10000)] = 15
    score_unknown_user: Annotated[int, Field(ge=0, le=1000)] = 2
    score_wrong_password: Annotated[int, Field(ge=0, le=1000)] = 1
    observation: Annotated[float, Field(ge=1, le=86400 * 7)] = 1800.0
    # The first ban lasts ban_time; each repeat doubles it, up to max_ban_time.
    ban_time: Annotated[float, Field(ge=1, le=86400 * 30)] = 1800.0
    max_ban_time: Annotated[float, Field(ge=1, le=86400 * 365)] = 7 * 86400.0
    # Never banned (monitoring hosts, the admin's own network).
    safelist: list[IPv4Network | IPv6Network] = Field(default_factory=list)


class SftpConfig(_Section):
    listen: str = "0.0.0.0:2222"
    # Logged-in sessions in total and from one source IP. A connection counts here only
    # once it has logged in; before that it is in the (smaller) unauthenticated pool below.
    max_connections: Annotated[int, Field(ge=1, le=10000)] = 100
    max_connections_per_ip: Annotated[int, Field(ge=1, le=10000)] = 20
    # Connections not logged in yet (TCP accepted, banner, key exchange, login), in total
    # and from one IP: their own pool, so 100 idle sockets cannot lock scanners out of
    # the sessions. A scanner's handshake takes milliseconds; 5 at once from one address
    # is plenty (a burst beyond waits, without a thread, up to handshake_timeout for a
    # slot), and an attacker's address holds no more than that.
    max_unauthenticated: Annotated[int, Field(ge=1, le=10000)] = 50
    max_unauthenticated_per_ip: Annotated[int, Field(ge=1, le=10000)] = 5
    # While the unauthenticated pool (or an address's share) is full, an address that
    # logged in within this many seconds is still let in: it takes the place of the
    # longest-waiting unauthenticated connection (of the address holding the most). 0: off.
    known_good_for: Annotated[float, Field(ge=0, le=86400 * 365)] = 7 * 86400.0
    # Seconds from TCP accept to the end of the key exchange (client banner included):
    # a silent or trickling connection holds its slot no longer than this.
    handshake_timeout: Annotated[float, Field(ge=1, le=600)] = 10.0
    # Seconds from the end of the key exchange to a successful login.
    auth_timeout: Annotated[float, Field(ge=1, le=600)] = 30.0
    # Handles (open uploads, listed folders) one session may hold at once: each upload
    # holds a descriptor, and a client that never closes must not exhaust the daemon's
    # (systemd's default is 1,024). All sessions together hold at most half the process
    # limit (RLIMIT_NOFILE, read at start).
    max_handles_per_session: Annotated[int, Field(ge=1, le=4096)] = 64
    # Seconds without an SFTP request before the connection is closed.
    idle_timeout: Annotated[float, Field(ge=5, le=86400)] = 600.0
    max_auth_attempts: Annotated[int, Field(ge=1, le=100)] = 6
    # SHA-1 host-key signatures (ssh-rsa), diffie-hellman-group14-sha1, aes-cbc and
    # hmac-sha1 for old scanners. Off by default; per account via accounts[].legacy_algorithms.
    legacy_algorithms: bool = False
    temp_names: list[str] = Field(default_factory=lambda: list(DEFAULT_SFTP_TEMP_NAMES))
    # SSH flow control: a larger window lets the client keep more writes in flight.
    window_size: Annotated[ByteSize, Field(ge=65536, le=2**31 - 1)] = ByteSize(16 * 1024 * 1024)
    max_packet_size: Annotated[ByteSize, Field(ge=32768, le=262144)] = ByteSize(262144)
    # Processes serving SFTP connections (key exchange, login, requests, the uploads'
    # bytes): paramiko does its work in Python, so one process is one core. 0: one per
    # core; 1: the daemon's own process serves them. Needs a restart to change.
    processes: Annotated[int, Field(ge=0, le=64)] = 0
    # Threads taking completed uploads from the spool through intake.
    spool_workers: Annotated[int, Field(ge=1, le=32)] = 2
    # Spool files are retried with backoff up to this delay while the database is down.
    retry_max_delay: Annotated[float, Field(ge=1, le=86400)] = 60.0
    # A temp-named upload (x.pdf.part) never renamed for this many seconds is moved to the
    # failed folder with a note, freeing the account's quota: its scanner gave up on it.
    abandoned_after: Annotated[float, Field(ge=60, le=86400 * 365)] = 86400.0
    # Tenant statuses (logins of a suspended tenant's accounts are refused) are read from
    # the database this often; the last ones read stay valid this long while it is down.
    tenant_status_refresh: Annotated[float, Field(ge=0.5, le=3600)] = 5.0
    tenant_status_max_age: Annotated[float, Field(ge=1, le=86400)] = 60.0
    bans: SftpBansConfig = Field(default_factory=SftpBansConfig)
    accounts: list[SftpAccountConfig] = Field(default_factory=list)

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


class WorkerConfig(_Section):
    # Jobs one `ingestd worker` runs at once (each in a job child of its own), and pages
    # OCRed at once on this host by all workers together (host-wide page slots under
    # paths.state_dir). The default, one per core, keeps every core busy whether the
    # queue holds one 300-page batch (its pages on every core) or 300 one-page scans
    # (one job per core); one worker unit per host is enough.
    concurrency: Annotated[int, Field(ge=1, le=256)] = Field(default_factory=_cores)
    # An attempt that fails is retried after retry_base * 2^retry_count seconds (seed 000:
    # 1, 2, 4, ... s), +- retry_jitter as a fraction; past max_retries the job is failed.
    max_retries: Annotated[int, Field(ge=0, le=100)] = 5
    retry_base: Annotated[float, Field(gt=0, le=86400)] = 1.0
    retry_jitter: Annotated[float, Field(ge=0, le=1)] = 0.0
    # A running job holds a lease, renewed every lease/3 s; a worker that stops renewing
    # (killed, host lost) has its job rescued once the lease ran out.
    lease_seconds: Annotated[float, Field(ge=2, le=86400)] = 60.0
    # Wake-ups come by LISTEN/NOTIFY; this poll covers lost notifications and retries.
    poll_interval: Annotated[float, Field(ge=0.05, le=3600)] = 5.0
    # Jobs of one tenant running at once (all workers together); 0 = no cap.
    tenant_cap: Annotated[int, Field(ge=0, le=10000)] = 0
    # Per-kind wall-clock limit of one attempt, in seconds; the child is killed past it.
    timeouts: dict[str, Annotated[float, Field(gt=0, le=86400)]] = Field(
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
    # The limit for kinds not listed in timeouts (site or test plugins).
    timeout_default: Annotated[float, Field(gt=0, le=86400)] = 1800.0
    # SIGTERM lets the running job finish for this long, then hands it back to the queue.
    shutdown_grace: Annotated[float, Field(ge=0, le=3600)] = 30.0
    # Finished jobs (done/failed) older than this many seconds are deleted.
    prune_after: Annotated[float, Field(ge=3600, le=86400 * 3650)] = 30 * 86400.0

    @field_validator("timeouts")
    @classmethod
    def _known_kinds(cls, v: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(v) - set(JOB_KINDS))
        if unknown:
            raise ValueError(f"unknown job kinds {unknown}; known: {', '.join(JOB_KINDS)}")
        return v

    def timeout_for(self, kind: str) -> float:
        return self.timeouts.get(kind, self.timeout_default)


TESSERACT_LANG = r"^[a-z]{3}(_[a-z]+)?$"  # deu, eng, chi_sim, deu_latf


class AnalysisConfig(_Section):
    """analyze-document: OCR (ocrmypdf/tesseract), derived title and date."""

    # Tesseract languages (installed packs: tesseract-ocr-<lang>); per tenant below.
    languages: list[Annotated[str, Field(pattern=TESSERACT_LANG)]] = Field(
        default_factory=lambda: ["deu", "eng"], min_length=1
    )
    tenant_languages: dict[
        TenantName,
        Annotated[list[Annotated[str, Field(pattern=TESSERACT_LANG)]], Field(min_length=1)],
    ] = Field(default_factory=dict)
    # PDF pages that already have text: skip them (their text is kept), redo the OCR
    # layer (redo), or rasterise and OCR everything (force).
    mode: Literal["skip", "redo", "force"] = "skip"
    rotate_pages: bool = True
    # Orientation confidence a page needs to be turned (ocrmypdf --rotate-pages-threshold).
    # Lower it for sparse pages in sans-serif fonts that stay sideways; too low turns
    # pages tesseract is unsure of.
    rotate_threshold: Annotated[float, Field(ge=0, le=100)] = 14.0
    # The OCR engine: "tesseract" (in the job child: models loaded once, pages on every
    # core, the text layer laid over the original pages) or "ocrmypdf" (its command line
    # per file, e.g. for sites that want its output). Per tenant in tenant_engines.
    # Mode "redo" always runs ocrmypdf (only it strips an old OCR layer).
    engine: Literal["tesseract", "ocrmypdf"] = "tesseract"
    tenant_engines: dict[TenantName, Literal["tesseract", "ocrmypdf"]] = Field(default_factory=dict)
    # Pages of one file OCRed at once (ocrmypdf --jobs); 0 = worker.concurrency. The
    # page slots bound all files together anyway.
    jobs: Annotated[int, Field(ge=0, le=256)] = 0
    # Seconds for the OCR of one file (inside worker.timeouts["analyze-document"]). A file
    # that times out is retried once (the machine may have been busy), then it needs
    # attention: every further attempt would hold a worker as long again.
    ocr_timeout: Annotated[float, Field(gt=0, le=86400)] = 1500.0
    # Seconds tesseract may spend on one page (a hostile page cannot hold a core for the
    # whole ocr_timeout); a page past it makes the document need attention.
    page_timeout: Annotated[float, Field(gt=0, le=86400)] = 300.0
    # Limits of one file's analysis; a file over one is kept, its document needs
    # attention with the limit named, and it is not retried. Pages per file (OCR takes
    # about a second per page and core).
    max_pages: Annotated[int, Field(ge=1, le=1_000_000)] = 2000
    # Pixels of one page as OCR rasterises it (PDF pages at image_dpi): A0 at 300 dpi is
    # 140 megapixels; a 200 x 200 inch page 3,600 (about 11 GB to render).
    max_page_megapixels: Annotated[int, Field(ge=1, le=100_000)] = 300
    # Address space of each OCR process (ocrmypdf, ghostscript, tesseract), a size or
    # "auto": RAM / (2 x cores), at least 512 MiB, at most 4 GiB. A file that needs more
    # fails with an allocation error instead of waking the OOM killer.
    memory_limit: ByteSize | Literal["auto"] = "auto"
    thumbnail_width: Annotated[int, Field(ge=32, le=4000)] = 400
    # For images without a resolution in their metadata.
    image_dpi: Annotated[int, Field(ge=50, le=2400)] = 300
    # A title read from the text (only for placeholder titles) is cut to this length.
    title_max_length: Annotated[int, Field(ge=16, le=200)] = 128
    # Seconds one search of a taxonomy regex rule in one document's text may take; one
    # that takes longer (catastrophic backtracking) does not match and is logged.
    regex_timeout: Annotated[float, Field(gt=0, le=60)] = REGEX_TIMEOUT
    # More taxonomy rules and workflows, in files of their own ([[taxonomy]] and
    # [[workflows]] tables, the same keys as here); relative to this file.
    rules_files: list[Path] = Field(default_factory=list)

    def languages_for(self, tenant: str) -> tuple[str, ...]:
        return tuple(self.tenant_languages.get(tenant) or self.languages)

    def engine_for(self, tenant: str) -> Literal["tesseract", "ocrmypdf"]:
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
    retry_base: Annotated[float, Field(gt=0, le=86400)] = 30.0
    retry_jitter: Annotated[float, Field(ge=0, le=1)] = 0.1


class RetentionRule(ConfigModel):
    """Documents of a class (a tag, a document type or a correspondent, by name, any case)
    kept ``years``; the longest matching rule wins over the tenant's default."""

    tenant: TenantName | Literal["*"] = "*"
    match: Literal["tag", "document_type", "correspondent"]
    name: Annotated[str, Field(min_length=1, max_length=128)]
    years: Annotated[int, Field(ge=0, le=100)]


class RetentionConfig(_Section):
    """How long an archived original must be kept before purge-document or delete-tenant
    may remove it: whole calendar years after the year of ingest (GoBD counts to the end
    of the year), by document class, and never while a legal hold is on it."""

    # Default years (records law in DE: 10 for books and invoices, 8 for vouchers, 6 for
    # business letters); 0: no retention.
    years: Annotated[int, Field(ge=0, le=100)] = 10
    tenant_years: dict[TenantName, Annotated[int, Field(ge=0, le=100)]] = Field(
        default_factory=dict
    )
    rules: list[RetentionRule] = Field(default_factory=list)

    def years_for(self, tenant: str) -> int:
        return self.tenant_years.get(tenant, self.years)

    def rules_for(self, tenant: str) -> list[RetentionRule]:
        return [r for r in self.rules if r.tenant in ("*", tenant)]


def _http_url(v: str) -> str:
    if v and not re.match(r"^https?://[^\s/]+", v):
        raise ValueError("must be an http:// or https:// URL")
    return v


# An http(s) URL, or empty for "none".
HttpUrlText = Annotated[str, AfterValidator(_http_url)]


class S3Config(_Section):
    """An S3-compatible bucket with Object Lock enabled (AWS S3, MinIO, Ceph RGW)."""

    # Empty: AWS's own endpoint for the region. MinIO: "https://minio.example:9000".
    endpoint: HttpUrlText = ""
    bucket: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")]
    region: str = "us-east-1"
    # Keys under this prefix ("ingestd/"): one bucket may serve several appliances.
    prefix: Annotated[str, Field(pattern=r"^([A-Za-z0-9._-]+/)*$")] = ""
    # "path" for MinIO and Ceph RGW; "virtual" for AWS.
    addressing_style: Literal["path", "virtual", "auto"] = "path"
    # The access key: a 0600 file of two lines, "access_key_id = ..." and
    # "secret_access_key = ..."; unset: the environment (AWS_ACCESS_KEY_ID and
    # AWS_SECRET_ACCESS_KEY, e.g. from a systemd credential) or the instance's role.
    credentials_file: Path | None = None
    # Seconds for a connection and for a read.
    timeout: Annotated[float, Field(gt=0, le=600)] = 30.0


class ArchiveConfig(_Section):
    """Where originals are kept: the local WORM file system (default) or an S3 bucket
    with Object Lock in COMPLIANCE mode."""

    backend: Literal["local", "s3"] = "local"
    s3: S3Config | None = None

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

    # http(s) URL of an RFC 3161 timestamp authority; empty: seals are signed only.
    tsa_url: HttpUrlText = ""
    # The CA certificate(s) the authority's certificate chains to: seal and verify check
    # every timestamp against them. Without it timestamps are kept, not checked.
    tsa_ca_file: Path | None = None
    tsa_timeout: Annotated[float, Field(gt=0, le=300)] = 10.0


class MetricsConfig(_Section):
    """The Prometheus endpoint (/metrics) of each process; loopback by default."""

    enabled: bool = True
    # `ingestd serve`.
    listen: str = "127.0.0.1:9464"
    # `ingestd worker`; `--metrics-offset N` adds N to the port (ingestd-worker@N), so
    # each instance has its own endpoint. Port 0: any free port (tests).
    worker_listen: str = "127.0.0.1:9470"

    @field_validator("listen", "worker_listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        parse_listen(v)
        return v


class LogConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


class Config(_Section):
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    intake: IntakeConfig = Field(default_factory=IntakeConfig)
    titles: TitlesConfig = Field(default_factory=TitlesConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    hotfolders: HotfoldersConfig = Field(default_factory=HotfoldersConfig)
    watch: list[WatchConfig] = Field(default_factory=list)
    sftp: SftpConfig = Field(default_factory=SftpConfig)
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    archive: ArchiveConfig = Field(default_factory=ArchiveConfig)
    deliveries: DeliveriesConfig = Field(default_factory=DeliveriesConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    taxonomy: list[TaxonomyRule] = Field(default_factory=list)
    workflows: list[WorkflowRule] = Field(default_factory=list)
    # Operator notifications (ingestd/config/notify.py): the mail relay and the sinks.
    smtp: SmtpConfig | None = None
    notify: list[NotifySink] = Field(default_factory=list)
    # A tenant's default split policy for its sources without a split of their own.
    split: dict[TenantName, SplitPolicy] = Field(default_factory=dict)

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
