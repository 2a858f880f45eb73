"""Job kinds no pool serves, decided as the claim decides (ingestd/queue/pool_coverage.py)."""

from __future__ import annotations

from typing import Any

from ingestd.config.settings import WorkerConfig
from ingestd.queue.pool_coverage import uncovered


def _gaps(*pools: dict[str, Any]) -> list[str]:
    return uncovered(WorkerConfig.model_validate({"pools": list(pools)}))


def test_no_pools_or_pools_of_every_kind_leave_nothing_out() -> None:
    """The default pool alone, or a dedicated pool without kinds: every job is served."""
    assert _gaps() == []
    assert _gaps({"name": "big", "tenants": ["acme"]}) == []


def test_a_dedicated_pool_of_some_kinds_leaves_its_tenants_other_kinds_unserved() -> None:
    """'acme' owned by a pool of analyze-document only: its other kinds are named, once."""
    [line] = _gaps({"name": "ocr", "tenants": ["acme"], "kinds": ["analyze-document"]})
    assert "tenant 'acme' is dedicated to pool 'ocr'" in line
    for kind in ("split-batch", "purge-document", "provision-tenant", "delete-tenant",
                 "deliver-webhook"):  # fmt: skip
        assert kind in line
    assert "notify" not in line  # notifications run as the _system tenant


def test_shared_pools_with_kinds_must_cover_every_kind_together() -> None:
    """The default pool listed with some kinds: the rest must come from another shared
    pool; a second one with the remaining kinds closes the gap."""
    lines = _gaps({"name": "default", "kinds": ["analyze-document"]})
    assert any("tenants no pool is dedicated to" in line for line in lines)
    assert any("notify for notifications" in line for line in lines)
    rest = ["split-batch", "purge-document", "provision-tenant", "delete-tenant",
            "deliver-webhook", "notify"]  # fmt: skip
    assert _gaps({"name": "default", "kinds": ["analyze-document"]},
                 {"name": "rest", "kinds": rest}) == []  # fmt: skip
