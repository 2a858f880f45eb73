"""Smoke: one upload with paramiko is ingested."""

from tests.integration.sftp.conftest import Rig


def test_paramiko_upload_is_ingested(rig: Rig) -> None:
    """A file written and closed over SFTP becomes a document of the account's tenant."""
    src = rig.write_pdf("a.pdf", 1)
    with rig.paramiko("scan1") as sftp:
        sftp.put(str(src), "Scan_0001.pdf")
    docs = rig.wait_documents(1)
    assert docs[0]["tenant"] == "acme"
    assert docs[0]["original_filename"] == "Scan_0001.pdf"
    assert docs[0]["source"] == "sftp:scan1"
