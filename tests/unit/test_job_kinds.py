"""Every job kind declares how long it takes, and the short lane's kinds follow from that
one declaration (issue 29)."""

from __future__ import annotations

from ingestd.config.settings import WorkerConfig
from ingestd.jobkinds import LENGTHS, SHORT_KINDS, JobKind, Length
from ingestd.queue import pools


def test_every_job_kind_declares_its_length() -> None:
    """LENGTHS names every JobKind, with a Length, and nothing else."""
    assert set(LENGTHS) == set(JobKind)
    assert all(isinstance(k.length, Length) for k in JobKind)


def test_the_short_kinds_are_the_kinds_declared_short() -> None:
    """SHORT_KINDS is exactly the kinds of Length.short; a batch's split and OCR are long."""
    assert {k for k in JobKind if k.length is Length.short} == SHORT_KINDS
    assert JobKind.split_batch.length is Length.long
    assert JobKind.analyze_document.length is Length.long
    assert {JobKind.provision_tenant, JobKind.notify, JobKind.deliver_webhook} <= SHORT_KINDS


def test_every_claim_passes_the_declared_short_kinds() -> None:
    """Each lane's claim parameters carry the short kinds from the declaration, and a short
    lane's scope holds no long kind."""
    default = pools.resolve(WorkerConfig())
    for scope in default.lane_scopes():
        assert scope.params()["short_kinds"] == sorted(str(k) for k in SHORT_KINDS)
    short = default.short_scope
    assert short is not None and short.kinds is not None
    assert {JobKind(k).length for k in short.kinds} == {Length.short}
    assert "split-batch" not in short.kinds


def test_the_registry_fails_each_kind_with_its_declared_event() -> None:
    """worker.jobs registers every built-in kind with the failed_event of FAILED_EVENTS,
    the table the rescue of expired leases reads (job_kinds, migration 0023)."""
    from ingestd.jobkinds import DEFAULT_FAILED_EVENT, FAILED_EVENTS
    from worker import jobs

    registry = jobs.load()
    assert {k: registry[str(k)].failed_event for k in JobKind} == dict(FAILED_EVENTS)
    assert FAILED_EVENTS[JobKind.notify] is None
    assert FAILED_EVENTS[JobKind.deliver_webhook] == "delivery.failed"
    assert FAILED_EVENTS[JobKind.analyze_document] == DEFAULT_FAILED_EVENT


def test_table_rows_hold_every_fact_of_every_kind() -> None:
    """One row per JobKind, from SHORT_KINDS, TRACKS_DOCUMENT and FAILED_EVENTS."""
    from ingestd.jobkinds import FAILED_EVENTS, TRACKS_DOCUMENT, table_rows

    rows = {r["kind"]: r for r in table_rows()}
    assert set(rows) == {str(k) for k in JobKind}
    for k in JobKind:
        assert rows[str(k)] == {
            "kind": str(k),
            "short": k in SHORT_KINDS,
            "tracks_document": TRACKS_DOCUMENT[k],
            "failed_event": FAILED_EVENTS[k],
        }
    assert not TRACKS_DOCUMENT[JobKind.deliver_webhook]
    assert not TRACKS_DOCUMENT[JobKind.purge_document]
