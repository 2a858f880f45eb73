"""Every job kind declares how long it takes, and the short lane's kinds follow from that
one declaration (issue 29)."""

from __future__ import annotations

from ingestd.config.settings import WorkerConfig
from ingestd.queue import pools
from ingestd.queue.kinds import LENGTHS, SHORT_KINDS, JobKind, Length


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
