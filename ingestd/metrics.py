"""Prometheus metrics shared by every ingestd process (served by the metrics endpoint)."""

from __future__ import annotations

from prometheus_client import Counter

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
