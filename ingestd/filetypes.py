"""Detect a file's type from its first bytes; the client's file name is never trusted."""

from __future__ import annotations

from dataclasses import dataclass

HEADER_BYTES = 2048


@dataclass(frozen=True, slots=True)
class FileType:
    name: str  # config name: pdf, tiff, jpeg, png
    mime: str
    extension: str


PDF = FileType("pdf", "application/pdf", "pdf")
TIFF = FileType("tiff", "image/tiff", "tif")
JPEG = FileType("jpeg", "image/jpeg", "jpg")
PNG = FileType("png", "image/png", "png")
ARCHIVABLE = {t.name: t for t in (PDF, TIFF, JPEG, PNG)}

# Types we recognise only to say precisely what was refused.
_KNOWN_OTHERS: tuple[tuple[bytes, str], ...] = (
    (b"\x7fELF", "ELF executable"),
    (b"MZ", "Windows executable"),
    (b"PK\x03\x04", "ZIP archive (or Office document)"),
    (b"\x1f\x8b", "gzip archive"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "legacy Office document"),
    (b"GIF8", "GIF image"),
    (b"#!", "script"),
)


def detect(header: bytes) -> FileType | None:
    """The archivable type of a file starting with ``header``, or None."""
    if header.startswith(b"\xff\xd8\xff"):
        return JPEG
    if header.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if header[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):  # TIFF and BigTIFF
        return TIFF
    # PDF readers accept the header anywhere in the first 1024 bytes (ISO 32000 §7.5.2
    # note); some scanners prepend junk. Beyond that it is not a PDF for us either.
    if b"%PDF-" in header[:1024]:
        return PDF
    return None


def describe(header: bytes) -> str:
    """A human name for an unrecognised or refused header, for error messages."""
    found = detect(header)
    if found is not None:
        return found.name.upper()
    for magic, name in _KNOWN_OTHERS:
        if header.startswith(magic):
            return name
    if not header:
        return "empty file"
    sample = header[:512]
    if all(32 <= b < 127 or b in (9, 10, 13) for b in sample):
        return "plain text"
    return "unknown binary data"
