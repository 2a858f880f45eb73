"""The sealing key exists before the first backup: ``migrate`` (and the daemon's start)
make it, with its ``key.created`` entry, when none was ever made, and never where the
trail expects one (the #29 rule)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

from ingestd.archive import sealkey
from ingestd.archive.export_check import fingerprint, read_public_key
from ingestd.db.database import Database
from tests.conftest import Env, read_events, run_cli, wait_until


def _created(db: Database) -> list[dict[str, object]]:
    with db.transaction() as tx:
        rows = tx.raw("SELECT body FROM audit_events WHERE chain = 0 AND kind = 'key.created'")
    return [json.loads(str(r["body"]))["detail"] for r in rows]


def test_migrate_makes_the_sealing_key_the_first_seal_then_uses(env: Env, db: Database) -> None:
    """`ingestd migrate` on an appliance without a key makes it (files and key.created,
    adopted false); a second migrate makes nothing; the first `audit seal` signs with it."""
    state = env.config.paths.state_dir
    first = run_cli(env, "migrate", "--json")
    assert first.returncode == 0, first.stderr
    made = json.loads(first.stdout)["seal_key_made"]
    pub = read_public_key(sealkey.public_path(state))
    assert made == fingerprint(pub)
    assert sealkey.key_path(state).stat().st_mode & 0o777 == 0o600
    assert [d["public_key"] for d in _created(db)] == [pub]
    assert _created(db)[0]["adopted"] is False
    again = run_cli(env, "migrate", "--json")
    assert json.loads(again.stdout)["seal_key_made"] is None
    assert len(_created(db)) == 1
    seal = run_cli(env, "audit", "seal")
    assert seal.returncode == 0, seal.stdout + seal.stderr
    with db.transaction() as tx:
        keys = {str(r["public_key"]) for r in tx.raw("SELECT public_key FROM audit_seals")}
    assert keys == {pub}


def test_migrate_never_makes_a_key_where_one_is_expected(env: Env, db: Database) -> None:
    """With a key recorded and its file gone (a lost state directory), migrate makes no
    new key and the next seal still refuses (exit 11) naming the expected key."""
    state = env.config.paths.state_dir
    assert run_cli(env, "migrate").returncode == 0
    expected = fingerprint(read_public_key(sealkey.public_path(state)))
    sealkey.key_path(state).unlink()
    again = run_cli(env, "migrate", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["seal_key_made"] is None
    assert not sealkey.key_path(state).exists()
    assert len(_created(db)) == 1
    seal = run_cli(env, "audit", "seal")
    assert seal.returncode == 11 and expected in seal.stderr, seal.stderr


def test_the_daemons_start_makes_the_sealing_key(make_env: Any, db: Database) -> None:
    """`ingestd serve` on an appliance without a key makes it once the database answers
    (logged as daemon.seal_key_made, recorded as key.created), before any seal."""
    env: Env = make_env(metrics={"enabled": False})
    state = env.config.paths.state_dir
    log_path = env.root / "serve.log"
    with log_path.open("w") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "ingestd.cli", "serve", "--config", str(env.config_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: read_events(log_path, "daemon.seal_key_made"), timeout=90)
        finally:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=60) == 0
    pub = read_public_key(sealkey.public_path(state))
    assert [d["public_key"] for d in _created(db)] == [pub]
    assert read_events(log_path, "daemon.seal_key_made")[0]["fingerprint"] == fingerprint(pub)
