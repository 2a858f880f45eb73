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
