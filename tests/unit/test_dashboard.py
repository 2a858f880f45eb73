"""packaging/grafana/ingestd-dashboard.json only queries metrics ingestd exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import ingestd.metrics  # noqa: F401 (registers the counters)

DASHBOARD = Path(__file__).parents[2] / "packaging" / "grafana" / "ingestd-dashboard.json"
# Read from Postgres at scrape time by ingestd/metrics_server.py's QueueCollector.
QUEUE = {"ingestd_queue_up", "ingestd_queue_jobs", "ingestd_queue_oldest_ready_seconds"}


def _exported() -> set[str]:
    # A labelled metric without children has no samples yet: derive its sample names.
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"],
                "gauge": [""]}  # fmt: skip
    names = set(QUEUE)
    for metric in REGISTRY.collect():
        names.update(metric.name + s for s in suffixes.get(metric.type, [""]))
    return names


def test_every_dashboard_query_names_an_exported_metric() -> None:
    """Each ingestd_* name in a panel's query is a metric (or sample) ingestd serves."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in re.findall(r"\bingestd_[a-z_]+", e)}
    assert used and used <= _exported(), used - _exported()
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
