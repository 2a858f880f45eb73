"""Detect a file's type from its first bytes; the client's file name is never trusted.

A file is one of the archivable types only if a reader of that type would take it as
one *and* it does not start as some other known format. The second condition matters
for PDF: readers accept ``%PDF-`` anywhere in the first KiB (ISO 32000 §7.5.2), so a ZIP,
an executable or an Office file with those five bytes in its first KiB (a polyglot, or a
text that mentions them) would otherwise be archived as ``application/pdf``, and its job
would then fail with a misleading "damaged PDF". Such a file is refused with its real type.

An e-invoice (issue 33) is XML whose first element is an EN 16931 invoice: a UBL 2.1
``Invoice`` or ``CreditNote``, or a UN/CEFACT ``CrossIndustryInvoice`` (XRechnung,
ZUGFeRD/Factur-X XML). Only the root's name is read here (ingestd/xmlsafe.py, nothing
expanded); whether it is a valid invoice is the analysis's question, never intake's: a
receipt must be kept even when it is wrong. Other XML is refused as "XML document".

Types come in families (``FAMILIES``), which ``intake.allowed_types`` may name instead
of single types: ``image`` is TIFF, JPEG and PNG; ``einvoice`` the invoice XML (a
Factur-X/ZUGFeRD PDF is a ``pdf``: its embedded XML is found by the analysis).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ingestd import xmlsafe

# What intake and SFTP read of a file to know its type: the magic bytes, and for XML
# its root element's start tag (namespace declarations and a comment may come first).
HEADER_BYTES = 8192
# Every magic number and the PDF header window lie within this many bytes: a header this
# long decides the type, unless it starts as XML (``needs_whole_header``).
MAGIC_BYTES = 2048
# PDF readers look for the header this far into the file.
PDF_HEADER_WINDOW = 1024


@dataclass(frozen=True, slots=True)
class FileType:
    name: str  # config name: pdf, tiff, jpeg, png, einvoice
    mime: str
    extension: str
    family: str  # config family: pdf, image, einvoice


PDF = FileType("pdf", "application/pdf", "pdf", "pdf")
TIFF = FileType("tiff", "image/tiff", "tif", "image")
JPEG = FileType("jpeg", "image/jpeg", "jpg", "image")
PNG = FileType("png", "image/png", "png", "image")
EINVOICE = FileType("einvoice", "application/xml", "xml", "einvoice")
ARCHIVABLE = {t.name: t for t in (PDF, TIFF, JPEG, PNG, EINVOICE)}
FAMILIES: dict[str, frozenset[FileType]] = {
    family: frozenset(t for t in ARCHIVABLE.values() if t.family == family)
    for family in ("pdf", "image", "einvoice")
}
# The XML roots of an EN 16931 invoice: (namespace, local name).
EINVOICE_ROOTS = frozenset(
    {
        ("urn:oasis:names:specification:ubl:schema:xsd:Invoice-2", "Invoice"),
        ("urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2", "CreditNote"),
        ("urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100", "CrossIndustryInvoice"),
    }
)
# What may hold several documents (a batch scan); a single JPEG or PNG never does.
BATCH_TYPES = frozenset({PDF, TIFF})

# (offset, magic, name): formats we recognise to refuse them by name. Order matters only
# where one magic is a prefix of another.
_KNOWN_OTHERS: tuple[tuple[int, bytes, str], ...] = (
    (0, b"\x7fELF", "ELF executable"),
    (0, b"MZ", "Windows executable (PE/DOS)"),
    (0, b"\xfe\xed\xfa\xce", "Mach-O executable"),
    (0, b"\xfe\xed\xfa\xcf", "Mach-O executable"),
    (0, b"\xce\xfa\xed\xfe", "Mach-O executable"),
    (0, b"\xcf\xfa\xed\xfe", "Mach-O executable"),
    (0, b"\xca\xfe\xba\xbe", "Mach-O universal binary or Java class"),
    (0, b"PK\x03\x04", "ZIP archive (or Office document)"),
    (0, b"PK\x05\x06", "ZIP archive (empty)"),
    (0, b"PK\x07\x08", "ZIP archive (spanned)"),
    (0, b"\x1f\x8b", "gzip archive"),
    (0, b"BZh", "bzip2 archive"),
    (0, b"\xfd7zXZ\x00", "xz archive"),
    (0, b"\x28\xb5\x2f\xfd", "zstd archive"),
    (0, b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (0, b"Rar!\x1a\x07", "RAR archive"),
    (0, b"MSCF", "Microsoft Cabinet archive"),
    (257, b"ustar", "tar archive"),
    (0, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "legacy Office document"),
    (0, b"{\\rtf", "RTF document"),
    (0, b"%!PS", "PostScript document"),
    (0, b"AT&TFORM", "DjVu document"),
    (0, b"GIF8", "GIF image"),
    (0, b"\x00\x00\x00\x0cjP  ", "JPEG 2000 image"),
    (0, b"SQLite format 3\x00", "SQLite database"),
    (0, b"L\x00\x00\x00\x01\x14\x02\x00", "Windows shortcut"),
    (0, b"#!", "script"),
)
_RIFF_KINDS = {b"WEBP": "WebP image", b"AVI ": "AVI video", b"WAVE": "WAVE audio"}
_ISO_BMFF_BRANDS = {
    b"heic": "HEIC image",
    b"heix": "HEIC image",
    b"avif": "AVIF image",
    b"mif1": "HEIF image",
    b"isom": "MP4 video",
    b"mp42": "MP4 video",
    b"qt  ": "QuickTime video",
}
_HTML = re.compile(rb"^\s*<(!doctype\s+html|html|head|body)\b", re.IGNORECASE)
# The version is part of the header: "%PDF-1.7", "%PDF-2.0".
_PDF_HEADER = re.compile(rb"%PDF-\d\.\d")


def needs_whole_header(head: bytes) -> bool:
    """Does deciding the type of a file starting with ``head`` need all of HEADER_BYTES
    (XML, whose root element may follow a long comment or many namespaces)?"""
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<")


def expand(names: Iterable[str]) -> frozenset[FileType]:
    """The types that config names (types or families) stand for; KeyError for others."""
    out: set[FileType] = set()
    for name in names:
        out |= FAMILIES[name] if name in FAMILIES else {ARCHIVABLE[name]}
    return frozenset(out)


def _xml_root(header: bytes) -> tuple[str, str] | None:
    """The root element's (namespace, name) if ``header`` starts as XML (a BOM and
    blanks may come first), else None."""
    start = header.lstrip(b"\xef\xbb\xbf \t\r\n")[:5]
    if not start.startswith(b"<") or start.startswith((b"<!DOC", b"<html", b"<HTML")):
        return None
    return xmlsafe.root_name(header)


def other_format(header: bytes) -> str | None:
    """The name of a known non-archivable format ``header`` starts as, or None."""
    for offset, magic, name in _KNOWN_OTHERS:
        if header[offset : offset + len(magic)] == magic:
            return name
    if header[:4] == b"RIFF" and header[8:12] in _RIFF_KINDS:
        return _RIFF_KINDS[header[8:12]]
    if header[4:8] == b"ftyp" and header[8:12] in _ISO_BMFF_BRANDS:
        return _ISO_BMFF_BRANDS[header[8:12]]
    if _HTML.match(header[:512]):
        return "HTML document"
    root = _xml_root(header)
    if root is not None and root not in EINVOICE_ROOTS:
        return f"XML document (root element {root[1][:60]!r}, not an EN 16931 invoice)"
    if root is None and header.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<?xml"):
        return "XML document"
    return None


def detect(header: bytes) -> FileType | None:
    """The archivable type of a file starting with ``header``, or None."""
    if header.startswith(b"\xff\xd8\xff"):
        return JPEG
    if header.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if header[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):  # TIFF and BigTIFF
        return TIFF
    if _xml_root(header) in EINVOICE_ROOTS:
        return EINVOICE
    # Some scanners and print servers put bytes before the header (a PJL job header,
    # padding); readers skip up to 1 KiB of them. A file that starts as another format
    # is that format, whatever follows.
    if _PDF_HEADER.search(header[:PDF_HEADER_WINDOW]) and other_format(header) is None:
        return PDF
    return None


def describe(header: bytes) -> str:
    """A human name for an unrecognised or refused header, for error messages."""
    found = detect(header)
    if found is not None:
        return found.name.upper()
    other = other_format(header)
    if other is not None:
        return other
    if not header:
        return "empty file"
    sample = header[:512]
    if all(32 <= b < 127 or b in (9, 10, 13) for b in sample):
        return "plain text"
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(sample) - 3:  # not merely a character cut at the end
            return "unknown binary data"
    return "plain text" if b"\x00" not in sample else "unknown binary data"
