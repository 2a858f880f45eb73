"""The job kinds by name (no database here: the config schema checks names against them)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class JobKind(enum.StrEnum):
    analyze_document = "analyze-document"
    # A batch scan (a source with a split policy): its children are made, each with its
    # own analyze-document job; the batch itself stays archived as the parent.
    split_batch = "split-batch"
    purge_document = "purge-document"
    provision_tenant = "provision-tenant"
    delete_tenant = "delete-tenant"
    # The outbox (invariant 9): one job per side effect, enqueued in the transaction that
    # decided it, with its own retries; the work that triggered it never waits for it.
    deliver_webhook = "deliver-webhook"
    notify = "notify"

    @property
    def length(self) -> Length:
        """How long a job of this kind takes (LENGTHS, below)."""
        return LENGTHS[self]


# How long a job of a kind takes, declared once per kind (issue 29): the one fact the
# short lane, the claim's cap exemption and the pools read.
class Length(enum.Enum):
    # Seconds, whatever the file, and someone waits for it (a tenant being set up, a
    # webhook receiver, an operator's notification, a purge an admin asked for). Every
    # worker keeps a lane for these ([worker] short_lanes) that nothing long can occupy,
    # and a tenant's max_running neither counts nor holds them back.
    short = "short"
    # Grows with the file or the tenant: OCR, a batch's split (minutes for a big batch,
    # up to its timeout), a tenant's deletion. The job lanes only.
    long = "long"


LENGTHS: Mapping[JobKind, Length] = MappingProxyType(
    {
        JobKind.analyze_document: Length.long,
        JobKind.split_batch: Length.long,
        JobKind.purge_document: Length.short,
        JobKind.provision_tenant: Length.short,
        JobKind.delete_tenant: Length.long,
        JobKind.deliver_webhook: Length.short,
        JobKind.notify: Length.short,
    }
)
_UNDECLARED = set(JobKind) - set(LENGTHS)
if _UNDECLARED:  # a new kind must say how long it takes before anything runs it
    raise RuntimeError(f"job kinds without a Length in LENGTHS: {sorted(_UNDECLARED)}")


# The short lane's kinds, derived from LENGTHS. Fixed in code, not in config, and never
# repeated in SQL: every claim passes them (ingestd_claim's p_short_kinds, migration 0016),
# so every worker on every host decides alike.
SHORT_KINDS = frozenset(k for k in JobKind if LENGTHS[k] is Length.short)

# Whether a job of a kind moves its document's processing_status (queued -> processing ->
# done/failed): its processing does (analysis, a split, and kinds from plugins, which have
# no row and count as tracking), not the delivery of one of its webhooks nor its purge.
TRACKS_DOCUMENT: Mapping[JobKind, bool] = MappingProxyType(
    {k: k not in (JobKind.deliver_webhook, JobKind.purge_document) for k in JobKind}
)

# The operator event written when a job of a kind fails for good (None: none; a
# notification that cannot be delivered must not notify about itself). The worker's
# registry (worker.jobs.register) and the rescue of expired leases both read this.
DEFAULT_FAILED_EVENT = "job.failed"
FAILED_EVENTS: Mapping[JobKind, str | None] = MappingProxyType(
    {
        **{k: DEFAULT_FAILED_EVENT for k in JobKind},
        JobKind.deliver_webhook: "delivery.failed",
        JobKind.notify: None,
    }
)


def table_rows() -> list[dict[str, object]]:
    """The facts above, one row per kind, as the job_kinds table holds them (migration
    0023; ingestd.db.schema writes them at every migrate, so SQL reads what Python says)."""
    return [
        {
            "kind": str(k),
            "short": k in SHORT_KINDS,
            "tracks_document": TRACKS_DOCUMENT[k],
            "failed_event": FAILED_EVENTS[k],
        }
        for k in JobKind
    ]


# Seed 004: once jobs of their own, now steps inside analyze-document. Refused for new
# rows (here and by a trigger), and failed without running when an old row is claimed.
RETIRED_KINDS = frozenset({"generate-thumbnails", "generate-ocr-text"})

# The appliance's own tenant (migration 0008): notifications run in its lane.
SYSTEM_TENANT = "_system"
