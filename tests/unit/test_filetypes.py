"""Type detection by magic bytes, never by name."""

from __future__ import annotations

import pytest

from ingestd.intake.ingest import filetypes
from tests.fixtures.files import pdf_bytes, png_bytes


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (pdf_bytes(), "pdf"),
        (b"\x00\x00junk%PDF-1.7\n", "pdf"),
        (b"II*\x00\x08\x00\x00\x00", "tiff"),
        (b"MM\x00*\x00\x00\x00\x08", "tiff"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "jpeg"),
        (png_bytes(), "png"),
    ],
)
def test_archivable_types_are_detected(header: bytes, expected: str) -> None:
    """PDF (header anywhere in the first KiB), TIFF both byte orders, JPEG, PNG."""
    found = filetypes.detect(header)
    assert found is not None and found.name == expected


@pytest.mark.parametrize(
    ("header", "description"),
    [
        (b"\x7fELF\x02\x01\x01", "ELF executable"),
        (b"PK\x03\x04", "ZIP archive (or Office document)"),
        (b"hello world\n", "plain text"),
        (b"", "empty file"),
        (b" " * 1030 + b"%PDF-1.4", "plain text"),
    ],
)
def test_other_content_is_named_not_detected(header: bytes, description: str) -> None:
    """Non-archivable content is not detected and gets a precise human name."""
    assert filetypes.detect(header) is None
    assert filetypes.describe(header) == description


PDF_INSIDE = b"\n%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n"


@pytest.mark.parametrize(
    ("prefix", "description"),
    [
        (b"PK\x03\x04\x14\x00\x00\x00\x08\x00", "ZIP archive (or Office document)"),
        (b"\x7fELF\x02\x01\x01\x00" + bytes(8), "ELF executable"),
        (b"MZ\x90\x00\x03\x00\x00\x00", "Windows executable (PE/DOS)"),
        (b"\x1f\x8b\x08\x00", "gzip archive"),
        (b"7z\xbc\xaf\x27\x1c\x00\x04", "7-Zip archive"),
        (b"Rar!\x1a\x07\x01\x00", "RAR archive"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "legacy Office document"),
        (b"%!PS-Adobe-3.0\n", "PostScript document"),
        (b"{\\rtf1\\ansi ", "RTF document"),
        (b"<!DOCTYPE html>\n<html>", "HTML document"),
        (b"#!/bin/sh\n", "script"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "WebP image"),
    ],
)
def test_pdf_header_inside_another_format_is_that_format(prefix: bytes, description: str) -> None:
    """'%PDF-' in the first KiB of a file that starts as another format is not a PDF."""
    header = prefix + b"\x00" * 40 + PDF_INSIDE
    assert filetypes.detect(header) is None
    assert filetypes.describe(header) == description


def test_tar_with_a_pdf_member_is_a_tar() -> None:
    """A tar archive (magic at offset 257) holding a PDF is refused as tar."""
    header = b"scan.pdf".ljust(257, b"\x00") + b"ustar\x0000" + PDF_INSIDE
    assert filetypes.detect(header) is None
    assert filetypes.describe(header) == "tar archive"


@pytest.mark.parametrize(
    "header",
    [
        b"\x1b%-12345X@PJL JOB\r\n@PJL ENTER LANGUAGE=PDF\r\n%PDF-1.5\n",
        b"\xef\xbb\xbf%PDF-1.7\n",
        b"\r\n\r\n%PDF-2.0\n",
    ],
)
def test_pdf_behind_a_job_header_or_padding_is_a_pdf(header: bytes) -> None:
    """Print-job headers, a BOM or blank lines before the header still make a PDF."""
    found = filetypes.detect(header)
    assert found is not None and found.name == "pdf"


def test_pdf_header_needs_a_version() -> None:
    """'%PDF-' without a version number is not a PDF header."""
    assert filetypes.detect(b"%PDF-\n1 0 obj\n") is None


UBL = b"urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"
CII = b"urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100"


@pytest.mark.parametrize(
    "header",
    [
        b'<?xml version="1.0" encoding="UTF-8"?>\n<Invoice xmlns="' + UBL + b'"><cbc:ID',
        b"\xef\xbb\xbf<?xml version='1.0'?><!-- from the ERP -->\n<ubl:CreditNote xmlns:ubl="
        b'"urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2">',
        b'<rsm:CrossIndustryInvoice xmlns:rsm="' + CII + b'" xmlns:ram="x"><rsm:Exch',
        # A root start tag with many namespaces and a long comment first, cut mid-document.
        b"<?xml version='1.0'?>\n<!--"
        + b"x" * 3000
        + b"-->\n<rsm:CrossIndustryInvoice "
        + b" ".join(b'xmlns:n%d="urn:n%d"' % (i, i) for i in range(40))
        + b' xmlns:rsm="'
        + CII
        + b'"><a>',
    ],
)
def test_einvoice_xml_is_recognised_by_its_root_element(header: bytes) -> None:
    """UBL Invoice/CreditNote and CII by the root element's namespace and name (a BOM, a
    comment and many namespace declarations before it; the file cut after the start tag),
    never by the file name."""
    found = filetypes.detect(header)
    assert found is filetypes.EINVOICE
    assert filetypes.expand(["einvoice"]) == {filetypes.EINVOICE}


@pytest.mark.parametrize(
    ("header", "description"),
    [
        (b'<?xml version="1.0"?><note><to>x</to></note>', "XML document (root element 'note'"),
        (b'<Invoice xmlns="urn:example:not-ubl"><ID>1</ID>', "XML document (root element"),
        (b'<?xml version="1.0"?>\n<<<broken', "XML document"),
        # A PDF header inside an XML file's first KiB is still XML, not a PDF (a polyglot).
        (b'<?xml version="1.0"?><x>%PDF-1.7</x>', "XML document (root element 'x'"),
    ],
)
def test_other_xml_is_refused_by_name(header: bytes, description: str) -> None:
    """XML that is not an EN 16931 invoice is refused, its root element named."""
    assert filetypes.detect(header) is None
    assert filetypes.describe(header).startswith(description)


def test_a_billion_laughs_header_is_not_expanded_to_find_the_root() -> None:
    """The root's name is read without expanding anything (the analysis refuses the DTD)."""
    lol = (
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        + b"".join(
            b'<!ENTITY lol%d "%s">' % (i, b"&lol%s;" % (b"" if i == 1 else b"%d" % (i - 1)) * 10)
            for i in range(1, 10)
        )
        + b"]><lolz>&lol9;</lolz>"
    )
    assert filetypes.detect(lol) is None
    assert filetypes.describe(lol).startswith("XML document")


def test_families_expand_to_their_types() -> None:
    """Config may name a family: image is TIFF, JPEG and PNG."""
    assert filetypes.expand(["image"]) == {filetypes.TIFF, filetypes.JPEG, filetypes.PNG}
    assert filetypes.expand(["pdf", "image"]) == {
        filetypes.PDF,
        filetypes.TIFF,
        filetypes.JPEG,
        filetypes.PNG,
    }
