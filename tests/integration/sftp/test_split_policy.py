"""A scanner account's split policy: its batch uploads become split-batch jobs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ingestd.demo.batches import A6, Kind, Look, Side, letter_lines, write_pdf
from tests.integration.sftp.conftest import PASSWORDS, Rig


def _jobs(rig: Rig) -> list[dict[str, Any]]:
    with rig.db.transaction() as tx:
        return tx.raw(
            "SELECT d.original_filename AS name, j.kind, j.payload -> 'policy' AS policy "
            "FROM processing_jobs j JOIN documents d ON d.id = j.document_id ORDER BY d.id"
        )


def test_an_accounts_split_policy_reaches_its_batches_and_only_its_own(
    make_rig: Callable[..., Rig], password_hashes: dict[str, str]
) -> None:
    """scan1 (split with max_pages 9) queues split-batch with its policy; scan2 (no
    policy, no tenant default) queues an analysis; OpenSSH sftp and paramiko alike."""
    accounts = [
        {
            "username": "scan1",
            "tenant": "acme",
            "password_hash": password_hashes["scan1"],
            "split": {"max_pages": 9, "duplex": True},
        },
        {"username": "scan2", "tenant": "acme", "password_hash": password_hashes["scan2"]},
    ]
    rig = make_rig(accounts=accounts)
    batch = write_pdf(
        rig.root / "upload" / "Stapel.pdf",
        [Side(Kind.letter, lines=letter_lines(1)[:3]), Side(Kind.blank)],
        Look(size=A6),
    )
    done = rig.sftp_batch("scan1", ["put Stapel.pdf Stapel.pdf"], password=True)
    assert done.returncode == 0, done.stderr
    single = rig.write_pdf("Brief.pdf", 7)
    with rig.paramiko("scan2", password=PASSWORDS["scan2"]) as sftp:
        sftp.put(str(single), "Brief.pdf")
    rig.wait_documents(2)
    jobs = {j["name"]: j for j in _jobs(rig)}
    assert jobs["Stapel.pdf"]["kind"] == "split-batch"
    assert jobs["Stapel.pdf"]["policy"]["max_pages"] == 9
    assert jobs["Stapel.pdf"]["policy"]["duplex"] is True
    assert jobs["Brief.pdf"]["kind"] == "analyze-document"
    assert batch.exists()
