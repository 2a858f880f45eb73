"""More than one host: two `ingestd serve` daemons, each with its own state, spool, SFTP
account and hot folders, and two workers, against one database and one S3 bucket.
Nothing lost, nothing duplicated, the queue fair across tenants, the trail intact."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ingestd.db.database import Database
from ingestd.passwords import hash_password
from tests.conftest import Env, run_cli, wait_until, write_config
from tests.e2e.test_serve_sftp import Serve, _free_port
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.queue import WorkerProc
from tests.fixtures.s3 import S3Endpoint, archive_section
from tests.fixtures.sftp import sftp_upload

BIG, SMALL = 24, 3  # acme's backlog against the small tenants'


def _host(root: Path, db_url: str, archive: dict[str, Any], sftp_tenant: str) -> dict[str, Any]:
    root.mkdir(parents=True)
    hot = {t: root / "hot" / t for t in ("acme", sftp_tenant)}
    for d in hot.values():
        d.mkdir(parents=True)
    port = _free_port()
    sections: dict[str, Any] = {
        "database": {"url": db_url, "connect_timeout": 5},
        "paths": {
            "state_dir": str(root / "state"),
            "spool": str(root / "spool"),
            "archive": str(root / "archive"),  # unused: the bucket is the archive
            "derived": str(root / "derived"),
        },
        "archive": archive,
        "log": {"format": "json"},
        "metrics": {"enabled": False},
        "worker": {"concurrency": 1, "poll_interval": 0.1},
        "analysis": {"jobs": 1},
        "hotfolders": {"stable_seconds": 0.5, "retry_max_delay": 3},
        "sftp": {"listen": f"127.0.0.1:{port}", "retry_max_delay": 1},
        "sftp.accounts": [
            {
                "username": f"scan-{sftp_tenant}",
                "tenant": sftp_tenant,
                "password_hash": hash_password("pw", rounds=4),
            }
        ],
        "watch": [{"path": str(d), "tenant": t} for t, d in hot.items()],
    }
    write_config(root / "ingestd.toml", sections)
    return {"root": root, "config": root / "ingestd.toml", "hot": hot, "port": port}


def _rows(db: Database, sql: str) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        return tx.raw(sql)


def test_two_daemons_and_two_workers_share_one_database_and_one_bucket(
    db: Database, db_url: str, s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """Files through both hosts' hot folders and SFTP, the same scan on both hosts:
    every file archived once, analysed once, by either worker; the small tenants served
    before the big backlog is through; audit verify from either host finds it intact."""
    for name in ("acme", "globex", "initech"):
        with db.transaction() as tx:
            tx.one("tenant_insert", {"name": name, "status": "active"})
    archive = archive_section(s3_endpoint, tmp_path)
    a = _host(tmp_path / "host-a", db_url, archive, "globex")
    b = _host(tmp_path / "host-b", db_url, archive, "initech")
    daemons = [Serve(h["root"], h["config"]) for h in (a, b)]
    for d in daemons:
        d.start()
    expected: dict[str, set[str]] = {"acme": set(), "globex": set(), "initech": set()}
    try:
        for i in range(BIG):  # acme's backlog, half through each host
            data = pdf_bytes(f"acme Brief {i}", seed=1000 + i)
            write((a if i % 2 else b)["hot"]["acme"] / f"acme-{i}.pdf", data)
            expected["acme"].add(hashlib.sha256(data).hexdigest())
        same = pdf_bytes("acme dieselbe Rechnung", seed=7)  # dropped on both hosts at once
        write(a["hot"]["acme"] / "same.pdf", same)
        write(b["hot"]["acme"] / "same.pdf", same)
        expected["acme"].add(hashlib.sha256(same).hexdigest())
        for host, tenant in ((a, "globex"), (b, "initech")):
            for i in range(SMALL):
                data = pdf_bytes(f"{tenant} Brief {i}", seed=2000 + i + len(tenant))
                if i % 2:
                    sftp_upload(host["port"], f"scan-{tenant}", "pw", f"{tenant}-{i}.pdf", data)
                else:
                    write(host["hot"][tenant] / f"{tenant}-{i}.pdf", data)
                expected[tenant].add(hashlib.sha256(data).hexdigest())
        total = sum(len(v) for v in expected.values())
        wait_until(
            lambda: (
                _rows(db, "SELECT count(*) AS n FROM documents")[0]["n"] >= total
                and not any(
                    p.is_file() for h in (a, b) for d in h["hot"].values() for p in d.iterdir()
                )
            ),
            timeout=180,
        )
        workers = [
            WorkerProc(h["config"], h["root"] / "worker.log", "--worker-id", name)
            for h, name in ((a, "host-a"), (b, "host-b"))
        ]
        wait_until(
            lambda: (
                _rows(db, "SELECT count(*) AS n FROM processing_jobs WHERE status <> 'done'")[0][
                    "n"
                ]
                == 0
            ),
            timeout=600,
        )
        assert [w.stop() for w in workers] == [0, 0]
    finally:
        codes = [d.wait() for d in daemons]
    assert codes == [0, 0]

    docs = _rows(
        db, "SELECT t.name, d.sha256 FROM documents d JOIN tenants t ON t.id = d.tenant_id"
    )
    got: dict[str, list[str]] = {}
    for d in docs:
        got.setdefault(d["name"], []).append(d["sha256"])
    assert {t: sorted(v) for t, v in got.items()} == {t: sorted(v) for t, v in expected.items()}
    jobs = _rows(
        db,
        "SELECT t.name, j.worker_id, j.started_at, j.status FROM processing_jobs j "
        "JOIN tenants t ON t.id = j.tenant_id ORDER BY j.started_at",
    )
    assert len(jobs) == total and all(j["status"] == "done" for j in jobs)
    assert {j["worker_id"].split("#")[0] for j in jobs} == {"host-a", "host-b"}
    # Fair: every small tenant's job started before acme's backlog was half through.
    order = [j["name"] for j in jobs]
    last_small = max(i for i, n in enumerate(order) if n != "acme")
    assert order[:last_small].count("acme") <= BIG // 2, order
    # The bucket is the archive: one object per document, nothing on either local disk.
    client = s3_endpoint.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=archive["s3"]["bucket"])["Contents"]]
    assert len(keys) == total
    assert not any(p.is_file() for h in (a, b) for p in (h["root"] / "archive").rglob("*"))
    env = Env(a["root"], a["config"], None, db_url)  # type: ignore[arg-type]
    verified = run_cli(env, "audit", "verify", "--json")
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-2000:]
    report = json.loads(verified.stdout)
    assert report["documents"] == total and report["files"] == total
