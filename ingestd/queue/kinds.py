"""The job kinds by name (no database here: the config schema checks names against them)."""

from __future__ import annotations

import enum


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


# The short lane (issue 21): kinds that take seconds, whatever the file, and that someone
# waits for (a tenant being set up, a webhook receiver, an operator's notification, a
# purge an admin asked for, a batch's split planning). Every worker keeps a lane for them
# ([worker] short_lanes) that OCR cannot occupy, and a tenant's max_running neither counts
# nor holds them back. Fixed here, not in config: the claim (migration 0014,
# ingestd_short_kind) must agree with every worker on every host.
SHORT_KINDS = frozenset(
    {
        JobKind.provision_tenant,
        JobKind.deliver_webhook,
        JobKind.notify,
        JobKind.purge_document,
        JobKind.split_batch,
    }
)

# Seed 004: once jobs of their own, now steps inside analyze-document. Refused for new
# rows (here and by a trigger), and failed without running when an old row is claimed.
RETIRED_KINDS = frozenset({"generate-thumbnails", "generate-ocr-text"})

# The appliance's own tenant (migration 0008): notifications run in its lane.
SYSTEM_TENANT = "_system"
