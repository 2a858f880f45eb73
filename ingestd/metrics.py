"""Prometheus metrics shared by every ingestd process (served by the metrics endpoint)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# Label cardinality stays bounded: tenant names are admin-defined, source is a kind
# ("cli", "sftp", "watch"), reason is a fixed enum.
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
    "ingestd_intake_bytes_total",
    "Bytes archived by intake",
    ["tenant", "source"],
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
    "SFTP connections by how they ended up (accepted, banned, limit, handshake_failed)",
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
    "ingestd_sftp_upload_bytes_total",
    "Bytes of uploads completed into the spool",
    ["tenant"],
)
SFTP_REFUSED = Counter(
    "ingestd_sftp_refused_total",
    "SFTP requests refused (escape attempts, permissions, quota, size)",
    ["reason"],
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
    "ingestd_sftp_bans_total",
    "IP addresses banned after repeated failed logins",
    [],
)
JOB_SECONDS = Histogram(
    "ingestd_job_duration_seconds",
    "Wall-clock time of one job attempt, by kind and outcome (done, retry, failed, ...)",
    ["kind", "outcome"],
    # No-op jobs take milliseconds, a 300-page OCR half an hour.
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
OCR_PAGES = Counter(
    "ingestd_ocr_pages_total",
    "Pages OCRed by analyze-document (a retry that reuses saved text adds none)",
    ["tenant"],
)
