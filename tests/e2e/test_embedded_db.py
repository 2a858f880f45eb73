"""Without database.url, the CLI runs a private cluster and stops it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ingestd.demo.samples import pdf_bytes


def _cli(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ingestd.cli", "--config", str(cfg), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_embedded_cluster_lifecycle() -> None:
    """migrate/tenant/ingest work on the embedded cluster; no server outlives the command."""
    base = Path(tempfile.mkdtemp(prefix="ingestd-e2e-"))
    base.chmod(0o711)
    cfg = base / "ingestd.toml"
    cfg.write_text('[paths]\nstate_dir = "state"\nspool = "spool"\n[log]\nformat = "json"\n')
    assert _cli(cfg, "migrate").returncode == 0
    assert _cli(cfg, "tenant", "create", "acme").returncode == 0
    assert _cli(cfg, "worker", "--drain").returncode == 0  # provision-tenant: active
    src = base / "Rechnung.pdf"
    src.write_bytes(pdf_bytes(seed=42))
    ing = _cli(cfg, "ingest", "--tenant", "acme", "--json", str(src))
    assert ing.returncode == 0, ing.stderr
    assert json.loads(ing.stdout)[0]["outcome"] == "ingested"
    status = _cli(cfg, "status", "--json")
    assert json.loads(status.stdout)["tenants"]["acme"]["documents"] == {"queued": 1}
    pgdata = base / "state" / "pgdata"
    assert (pgdata / "PG_VERSION").exists()
    assert oct(pgdata.stat().st_mode & 0o777) == "0o700"
    # Stopped cleanly by the process that started it.
    assert not (pgdata / "postmaster.pid").exists()
    archived = list((base / "state" / "archive").rglob("*.pdf"))
    assert len(archived) == 1 and archived[0].stat().st_mode & 0o777 == 0o440
    if os.geteuid() == 0:
        # As root the server ran unprivileged: the data directory is not root's.
        assert pgdata.stat().st_uid != 0
