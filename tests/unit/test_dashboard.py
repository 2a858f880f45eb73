"""packaging/grafana/ingestd-dashboard.json only queries metrics ingestd exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import ingestd.runtime.metrics  # noqa: F401 (registers the counters)
from ingestd.ops.metrics_server import DaemonCollector, HealthCollector, QueueCollector

DASHBOARD = Path(__file__).parents[2] / "packaging" / "grafana" / "ingestd-dashboard.json"


def _exported() -> set[str]:
    # A labelled metric without children has no samples yet: derive its sample names.
    suffixes = {
        "counter": ["_total"],
        "histogram": ["_bucket", "_count", "_sum"],
        "gauge": [""],
        "info": ["_info"],
    }
    # Collected at scrape time (queue from Postgres, spool and verify, health checks).
    families = [
        *QueueCollector.families(),
        *DaemonCollector.families(),
        *HealthCollector.families(),
        *REGISTRY.collect(),
    ]
    names = set()
    for metric in families:
        names.update(metric.name + s for s in suffixes.get(metric.type, [""]))
    return names


def test_every_dashboard_query_names_an_exported_metric() -> None:
    """Each ingestd_* name in a panel's query is a metric (or sample) ingestd serves."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in re.findall(r"\bingestd_[a-z_]+", e)}
    assert used and used <= _exported(), used - _exported()
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_dashboard_shows_health_spool_failures_and_verify() -> None:
    """Panels for readiness/health, the spool backlog, jobs failed and the last verify."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for name in (
        "ingestd_health_check_ok",
        "ingestd_spool_pending_uploads",
        "ingestd_spool_pending_bytes",
        "ingestd_jobs_failed_total",
        "ingestd_verify_last_run_timestamp_seconds",
        "ingestd_verify_last_problems",
    ):
        assert name in exprs, name
    assert "failed_last_hour" not in exprs  # a window is not a state
