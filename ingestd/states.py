"""The closed sets of states the database stores (its CHECK constraints list the same),
so Python code compares against members, never against string literals."""

from __future__ import annotations

import enum


class TenantStatus(enum.StrEnum):
    creating = "creating"  # provision-tenant has not finished
    active = "active"
    suspended = "suspended"  # files wait where they are; nothing new is taken
    deleting = "deleting"  # delete-tenant is removing its files


class JobStatus(enum.StrEnum):
    """A job's status; a document's ``processing_status`` follows its analysis job and
    may also be ``attention`` (archived, but not analysable without an operator)."""

    queued = "queued"
    processing = "processing"
    done = "done"
    failed = "failed"
    attention = "attention"
