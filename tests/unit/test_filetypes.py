"""Type detection by magic bytes, never by name."""

from __future__ import annotations

import pytest

from ingestd import filetypes
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
