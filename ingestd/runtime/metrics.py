"""Prometheus metrics shared by every ingestd process (served by the metrics endpoint)."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import Counter, Histogram, Info, disable_created_metrics

import ingestd

# No `<counter>_created` series: one more series per labelled child that no dashboard or
# alert uses (rate() handles restarts by itself). Before anything is exported; the
# setting is read at collection time, so this covers every counter and histogram.
disable_created_metrics()  # type: ignore[no-untyped-call]

# Label cardinality stays bounded: tenant names are admin-defined, source is a kind
# ("cli", "sftp", "watch"), reason and cause are fixed enums (intake.Reason, retry.Cause).
INTAKE_FILES = Counter(
    "ingestd_intake_files_total",
    "Files that went through intake, by outcome (ingested, duplicate, refused)",
    ["tenant", "source", "outcome"],
)
INTAKE_REFUSED = Counter(
    "ingestd_intake_refused_total",
    "Files refused by intake, by reason",
    ["tenant", "source", "reason"],
)
INTAKE_BYTES = Counter(
    "ingestd_intake_bytes_total", "Bytes archived by intake", ["tenant", "source"]
)
WATCH_SEEN = Counter(
    "ingestd_watch_files_seen_total",
    "Files noticed in hot folders (events and rescans; one per file and attempt)",
    ["tenant"],
)
WATCH_RETRIED = Counter(
    "ingestd_watch_retries_total",
    "Hot-folder files left in place after a transient failure, to be retried",
    ["tenant", "cause"],
)
WATCH_QUARANTINED = Counter(
    "ingestd_watch_quarantined_total",
    "Hot-folder files moved to the failed folder, by reason",
    ["tenant", "reason"],
)
SFTP_CONNECTIONS = Counter(
    "ingestd_sftp_connections_total",
    # result: accepted (into the unauthenticated pool), queued (waiting for a slot in it),
    # banned, limit (the session pool or an address's share of it is full),
    # limit_unauthenticated, limit_unauthenticated_per_ip (that pool or the address's
    # share is full, and so is the waiting room; or waited too long), evicted (an
    # unauthenticated connection closed to let a known-good address in),
    # handshake_failed, handshake_timeout, auth_timeout, accept_failed (EMFILE ...).
    "SFTP connections by how they ended up (accepted, queued, banned, limit, "
    "limit_unauthenticated, limit_unauthenticated_per_ip, evicted, handshake_failed, "
    "handshake_timeout, auth_timeout, accept_failed)",
    ["result"],
)
SFTP_AUTH_FAILURES = Counter(
    "ingestd_sftp_auth_failures_total",
    "Failed SFTP logins by reason (unknown_user, wrong_password, wrong_key, ...)",
    ["reason"],
)
SFTP_UPLOADS = Counter(
    "ingestd_sftp_uploads_total",
    "Uploads completed into the spool (CLOSE acknowledged)",
    ["tenant"],
)
SFTP_UPLOAD_BYTES = Counter(
    "ingestd_sftp_upload_bytes_total", "Bytes of uploads completed into the spool", ["tenant"]
)
SFTP_REFUSED = Counter(
    "ingestd_sftp_refused_total",
    "SFTP requests refused (escape attempts, permissions, quota, size), by tenant (bounded "
    "by the configured accounts; empty before a login) and reason",
    ["tenant", "reason"],
)
SPOOL_RETRIED = Counter(
    "ingestd_spool_retries_total",
    "Spooled uploads left queued after a transient intake failure",
    ["tenant", "cause"],
)
SPOOL_QUARANTINED = Counter(
    "ingestd_spool_quarantined_total",
    "Spooled uploads moved to the failed folder, by reason",
    ["tenant", "reason"],
)
SFTP_LOGINS = Counter(
    "ingestd_sftp_logins_total",
    "SFTP logins that succeeded, by tenant and method (password, publickey)",
    ["tenant", "method"],
)
SFTP_BANS = Counter(
    "ingestd_sftp_bans_total", "IP addresses banned after repeated failed logins", []
)
JOB_SECONDS = Histogram(
    "ingestd_job_duration_seconds",
    "Wall-clock time of one job attempt, by kind and outcome (done, retry, failed, ...)",
    ["kind", "outcome"],
    # No-op jobs take milliseconds, a 300-page OCR half an hour.
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
JOBS_FAILED = Counter(
    "ingestd_jobs_failed_total",
    "Jobs that failed for good (retries used up, a permanent error, refused, or their "
    "lease ran out once too often), by tenant and kind",
    ["tenant", "kind"],
)
JOBS_ATTENTION = Counter(
    "ingestd_jobs_attention_total",
    "Jobs that ended with their document needing an operator (an encrypted PDF, a page "
    "too large): not failures of ingestd, and not in ingestd_jobs_failed_total",
    ["tenant", "kind"],
)
OCR_PAGES = Counter(
    "ingestd_ocr_pages_total",
    "Pages OCRed by analyze-document (pages that had text and a retry that reuses saved "
    "text add none)",
    ["tenant"],
)
OCR_ENGINE_LOADS = Counter(
    "ingestd_ocr_engine_loads_total",
    "Tesseract models loaded by the job children (warm engines: once per engine, not per "
    "page; a rate that follows the page rate means engines are not kept)",
    [],
)
SPLIT_PAGES = Counter(
    "ingestd_split_pages_total", "Pages of batch scans read by split-batch", ["tenant"]
)
SPLIT_CHILDREN = Counter(
    "ingestd_split_children_total",
    "Documents split out of batch scans (a batch without separator adds none)",
    ["tenant"],
)
BUILD = Info(
    "ingestd_build",
    "Versions of ingestd, Python and the libraries that decide behaviour (ocrmypdf: empty "
    "when not installed)",
)


def _dist_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return ""


def set_build_info() -> None:
    """Fill ingestd_build_info once per process with an endpoint (package metadata only:
    nothing is imported or run, and nothing at scrape time)."""
    BUILD.info(
        {
            "version": ingestd.__version__,
            "python": platform.python_version(),
            "paramiko": _dist_version("paramiko"),
            "ocrmypdf": _dist_version("ocrmypdf"),
        }
    )


# Counted in the SFTP processes (sftp.processes > 1) and reported to the supervisor
# once a second, which adds them to its own: /metrics shows one total per series.
SFTP_PROCESS_COUNTERS = (
    SFTP_CONNECTIONS,
    SFTP_AUTH_FAILURES,
    SFTP_LOGINS,
    SFTP_UPLOADS,
    SFTP_UPLOAD_BYTES,
    SFTP_REFUSED,
)
SFTP_PROCESS_RESTARTS = Counter(
    "ingestd_sftp_process_restarts_total", "SFTP processes that exited unasked and were replaced"
)

# -- the web console (issue 31) ---------------------------------------------------------------
# route is the route's pattern ("/t/{tenant}/d/{doc}"), never a URL: bounded; method and
# status are HTTP's few. Logins by outcome, downloads by channel (web, webdav).
WEB_REQUESTS = Counter(
    "ingestd_web_requests_total",
    "Requests to the web console by route pattern, method and status",
    ["route", "method", "status"],
)
WEB_SECONDS = Histogram(
    "ingestd_web_request_seconds",
    "Time to answer a request of the web console, by route pattern",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
WEB_LOGINS = Counter(
    "ingestd_web_logins_total",
    "Logins to the web console and the WebDAV mount by outcome (ok, failed, throttled)",
    ["via", "outcome"],
)
WEB_DOWNLOADS = Counter(
    "ingestd_web_downloads_total", "Documents handed out through the console or WebDAV", ["via"]
)
WEB_DOWNLOAD_BYTES = Counter(
    "ingestd_web_download_bytes_total", "Bytes of documents handed out", ["via"]
)
