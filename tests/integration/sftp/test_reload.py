"""SIGHUP semantics of the SFTP service: accounts change without a restart."""

from __future__ import annotations

import paramiko
import pytest

from ingestd.config.load import parse_config
from ingestd.daemon.wiring import make_intake
from tests.integration.sftp.conftest import Rig


def test_reload_adds_and_removes_accounts(rig: Rig, password_hashes: dict[str, str]) -> None:
    """After reload a new account logs in and a removed one is refused; uploads go on."""
    data = rig.config.model_dump(mode="json")
    data["sftp"]["accounts"] = [
        {"username": "late", "tenant": "beta", "password_hash": password_hashes["scan2"]}
    ]
    new = parse_config(data)
    rig.service.reload(new, make_intake(new, rig.db))
    src = rig.write_pdf("late.pdf", 40)
    with rig.paramiko("late", password="secret-2") as sftp:
        sftp.put(str(src), "late.pdf")
    docs = rig.wait_documents(1)
    assert docs[0]["tenant"] == "beta"
    assert docs[0]["source"] == "sftp:late"
    with pytest.raises(paramiko.AuthenticationException), rig.paramiko("scan1"):
        pass
