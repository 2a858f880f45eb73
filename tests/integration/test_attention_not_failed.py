"""A document in `attention` (an encrypted PDF) is not a failed job: its own counter,
gauge and status column, before and after `documents mark-done`, and the README's alert
rules do not fire for it. Real ingest, the real worker loop in this process, real
PostgreSQL, the real `ingestd status` process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from ingestd.daemon.wiring import make_intake
from ingestd.db.database import Database
from ingestd.intake.items import IntakeItem, Outcome
from ingestd.ops.metrics_server import QueueCollector
from tests.conftest import Env, run_cli
from tests.fixtures.drain import drain
from tests.fixtures.scans import encrypted_pdf

README = Path(__file__).resolve().parents[2] / "README.md"
WORKER = {"poll_interval": 0.1, "lease_seconds": 30, "retry_base": 0.05, "max_retries": 3}


def _alert_rules() -> list[str]:
    """The PromQL expressions of the README's "Alerts worth having" sentence."""
    text = " ".join(README.read_text().split())
    m = re.search(r"Alerts worth having:(.*?)Grafana", text)
    assert m, "the README lists its alert rules after 'Alerts worth having:'"
    return re.findall(r"`([^`]+)`", m.group(1))


def _counter_sums() -> dict[str, float]:
    """Every counter sample of this process, summed over its labels, by metric name."""
    sums: dict[str, float] = {}
    for family in REGISTRY.collect():
        for s in family.samples:
            if s.name.endswith("_total"):
                sums[s.name] = sums.get(s.name, 0.0) + s.value
    return sums


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _status(env: Env) -> dict[str, Any]:
    proc = run_cli(env, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _attention_gauge(db: Database) -> dict[str, float]:
    for family in QueueCollector(db).collect():
        if family.name == "ingestd_documents_attention":
            return {s.labels["tenant"]: s.value for s in family.samples}
    raise AssertionError("no ingestd_documents_attention family")


def test_an_encrypted_pdf_is_attention_not_a_failed_job_and_no_alert_fires(
    make_env: Any, db: Database, tenant: str
) -> None:
    """An encrypted PDF analysed: ingestd_jobs_attention_total and the attention gauge
    count it, ingestd_jobs_failed_total and status's FAILED do not (nor after mark-done),
    and no `increase(...) > 0` alert rule of the README sees an increase."""
    env: Env = make_env(worker=WORKER, analysis={"jobs": 1})
    rules = _alert_rules()
    increase_rules = [re.match(r"increase\((\w+)\[\w+\]\) > 0$", r) for r in rules]
    watched = [m.group(1) for m in increase_rules if m]
    assert "ingestd_jobs_failed_total" in watched, rules  # the rule the issue names
    labels = {"tenant": tenant, "kind": "analyze-document"}
    before = _counter_sums()
    attention_before = _sample("ingestd_jobs_attention_total", labels)

    src = encrypted_pdf(env.root / "in" / "Vertrag.pdf")
    res = make_intake(env.config, db).ingest(IntakeItem(path=src, tenant=tenant))
    assert res.outcome is Outcome.ingested and res.document_id is not None
    drain(env, db, "w-attention")

    after = _counter_sums()
    for name in watched:
        assert after.get(name, 0.0) == before.get(name, 0.0), f"alert on {name} would fire"
    assert _sample("ingestd_jobs_attention_total", labels) == attention_before + 1
    assert _attention_gauge(db) == {tenant: 1.0}

    jobs = _status(env)["tenants"][tenant]["jobs"]["analyze-document"]
    assert jobs == {"attention": 1}
    assert _status(env)["tenants"][tenant]["documents"] == {"attention": 1}
    plain = run_cli(env, "status").stdout
    assert "documents needing attention: 1 (not failures" in plain
    row = next(line for line in plain.splitlines() if "jobs analyze-document" in line)
    assert row.split()[-2:] == ["0", "1"], row  # FAILED 0, ATTN 1

    done = run_cli(env, "documents", "mark-done", "--tenant", tenant, str(res.document_id))
    assert done.returncode == 0, done.stderr
    status = _status(env)
    assert status["tenants"][tenant]["jobs"]["analyze-document"] == {"attention": 1}
    assert status["tenants"][tenant]["documents"] == {"done": 1}
    assert all(q["failed_last_hour"] == 0 for q in status["queue"])
    assert _attention_gauge(db) == {}
    assert _counter_sums().get("ingestd_jobs_failed_total", 0.0) == before.get(
        "ingestd_jobs_failed_total", 0.0
    )
