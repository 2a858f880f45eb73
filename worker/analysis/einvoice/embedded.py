"""The invoice XML inside a hybrid PDF (Factur-X, ZUGFeRD 2.x, XRechnung in PDF), and
whether the PDF's visible text shows an amount.

The PDF is opened read-only with pikepdf and never written. The XML is looked for among
the document's embedded files (the names the standards give it first, then any other XML
attachment), then in file-attachment annotations, and taken only if its root is a UBL or
CII invoice. Its stream is decoded with a bound (a small compressed stream may inflate to
gigabytes): more than ``max_bytes`` is ``EmbeddedTooLarge``. An encrypted or damaged PDF,
or one without such a file, is None: it is analysed as any PDF.
"""

from __future__ import annotations

import decimal
import re
import zlib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pikepdf

from ingestd import xmlsafe
from ingestd.errors import IngestdError
from worker.analysis.einvoice.read import CII, UBL_CREDIT, UBL_INVOICE

EMBEDDED_NAMES = ("factur-x.xml", "zugferd-invoice.xml", "ZUGFeRD-invoice.xml", "xrechnung.xml")
_KNOWN = frozenset(n.lower() for n in EMBEDDED_NAMES)
INVOICE_ROOTS = frozenset(
    {(UBL_INVOICE, "Invoice"), (UBL_CREDIT, "CreditNote"), (CII, "CrossIndustryInvoice")}
)
MAX_XML_BYTES = 16 * 1024 * 1024
HEAD_BYTES = 8192  # decoded bytes read to name a candidate's root element
MAX_ATTACHMENTS = 200  # embedded files and annotations looked at, each
MAX_PAGES_WITH_ANNOTATIONS = 50
# What a damaged PDF or a damaged stream raises inside pikepdf (PasswordError is no
# PdfError); never EmbeddedTooLarge.
_PDF_ERRORS = (pikepdf.PdfError, pikepdf.PasswordError, ValueError, KeyError, TypeError)


class EmbeddedTooLarge(IngestdError):
    """The embedded invoice XML is larger than the bound: archived, not read."""

    transient = False


def _file_stream(filespec: Any) -> Any:
    """The embedded file stream of a file specification dictionary (/EF /UF or /F)."""
    ef = filespec.get("/EF")
    if not isinstance(ef, pikepdf.Dictionary):
        return None
    for key in ("/UF", "/F"):
        stream = ef.get(key)
        if isinstance(stream, pikepdf.Stream):
            return stream
    return None


def _spec_name(filespec: Any, fallback: str) -> str:
    for key in ("/UF", "/F"):
        value = filespec.get(key)
        if isinstance(value, pikepdf.String):
            return str(value)
    return fallback


def _attachments(pdf: pikepdf.Pdf) -> Iterator[tuple[str, Any]]:
    """(name, file stream) of the document's embedded files: the standards' names first."""
    found = []
    for name, spec in list(pdf.attachments.items())[:MAX_ATTACHMENTS]:
        stream = _file_stream(spec.obj)
        if stream is not None:
            found.append((name, stream))
    yield from ((n, s) for n, s in found if n.lower() in _KNOWN)
    yield from ((n, s) for n, s in found if n.lower() not in _KNOWN and n.lower().endswith(".xml"))


def _annotations(pdf: pikepdf.Pdf) -> Iterator[tuple[str, Any]]:
    """(name, file stream) of file-attachment annotations on the first pages."""
    seen = 0
    for page in list(pdf.pages)[:MAX_PAGES_WITH_ANNOTATIONS]:
        annots = page.obj.get("/Annots")
        if not isinstance(annots, pikepdf.Array):
            continue
        for annot in list(annots)[:MAX_ATTACHMENTS]:
            if not isinstance(annot, pikepdf.Dictionary):
                continue
            if annot.get("/Subtype") != pikepdf.Name.FileAttachment:
                continue
            spec = annot.get("/FS")
            stream = _file_stream(spec) if isinstance(spec, pikepdf.Dictionary) else None
            if stream is None:
                continue
            name = _spec_name(spec, "attachment.xml")
            if name.lower() in _KNOWN or name.lower().endswith(".xml"):
                yield name, stream
            seen += 1
            if seen >= MAX_ATTACHMENTS:
                return


def _filters(stream: Any) -> list[str]:
    value = stream.get("/Filter")
    if value is None:
        return []
    items = list(value) if isinstance(value, pikepdf.Array) else [value]
    return [str(f) for f in items]


def _too_large(name: str, detail: str, max_bytes: int) -> EmbeddedTooLarge:
    return EmbeddedTooLarge(
        f"the embedded file {name!r} is {detail}: more than the {max_bytes} bytes an "
        "invoice XML may have, not read"
    )


def _flate_only(stream: Any) -> bool:
    return _filters(stream) == ["/FlateDecode"] and "/DecodeParms" not in stream


def read_bounded(name: str, stream: Any, max_bytes: int) -> bytes:
    """The decoded bytes of ``stream``; EmbeddedTooLarge beyond ``max_bytes``. Flate (what
    every writer uses) is inflated here with the bound; other filters by pikepdf, once the
    encoded stream alone is within it."""
    raw = bytes(stream.read_raw_bytes())
    if not _filters(stream):
        data = raw
    elif _flate_only(stream):
        inflater = zlib.decompressobj()
        try:
            data = inflater.decompress(raw, max_bytes + 1)
        except zlib.error as exc:
            raise ValueError(f"the embedded file {name!r} cannot be inflated: {exc}") from None
        if len(data) > max_bytes or inflater.unconsumed_tail:
            raise _too_large(name, "larger when inflated", max_bytes)
    else:
        if len(raw) > max_bytes:
            raise _too_large(name, f"{len(raw)} bytes encoded", max_bytes)
        data = bytes(stream.read_bytes())
    if len(data) > max_bytes:
        raise _too_large(name, f"{len(data)} bytes", max_bytes)
    return data


def _head(name: str, stream: Any, max_bytes: int) -> bytes:
    """The first bytes of the decoded ``stream``: enough to name its root element."""
    if _flate_only(stream):
        try:
            return zlib.decompressobj().decompress(bytes(stream.read_raw_bytes()), HEAD_BYTES)
        except zlib.error as exc:
            raise ValueError(f"the embedded file {name!r} cannot be inflated: {exc}") from None
    if not _filters(stream):
        return bytes(stream.read_raw_bytes())[:HEAD_BYTES]
    return read_bounded(name, stream, max_bytes)[:HEAD_BYTES]


def _first_invoice(
    candidates: Iterator[tuple[str, Any]], max_bytes: int
) -> tuple[str, bytes] | None:
    """The first candidate whose root is an invoice's: read whole (bounded) only then, so
    a large attachment that is no invoice is passed over, not an error."""
    for name, stream in candidates:
        try:
            if xmlsafe.root_name(_head(name, stream, max_bytes)) not in INVOICE_ROOTS:
                continue
            return name, read_bounded(name, stream, max_bytes)
        except _PDF_ERRORS:
            continue
    return None


def embedded_invoice_xml(
    pdf_path: Path, *, max_bytes: int = MAX_XML_BYTES
) -> tuple[str, bytes] | None:
    """(name, bytes) of the invoice XML embedded in ``pdf_path``, or None (no such file,
    encrypted, damaged, not a PDF). EmbeddedTooLarge if it is larger than ``max_bytes``."""
    try:
        pdf = pikepdf.open(pdf_path)
    except (*_PDF_ERRORS, OSError):
        return None
    try:
        for candidates in (_attachments, _annotations):
            try:
                found = _first_invoice(candidates(pdf), max_bytes)
            except _PDF_ERRORS:
                found = None
            if found is not None:
                return found
        return None
    finally:
        pdf.close()


def _pattern(amount: Decimal) -> re.Pattern[str]:
    """The amount as German (1.234,56 / 1234,56) or English (1,234.56 / 1234.56) text;
    a space, a no-break or thin space may group thousands in both, an apostrophe in the
    English (Swiss) form."""
    units, cents = f"{abs(amount.quantize(Decimal('0.01'))):.2f}".split(".")
    groups = [units[max(0, i - 3) : i] for i in range(len(units), 0, -3)][::-1]
    german = "(?:[. \u00a0\u202f])?".join(groups) + "," + cents
    english = "(?:[, \u00a0\u202f'])?".join(groups) + r"\." + cents
    return re.compile(rf"(?<![\d.,])(?:{german}|{english})(?!\d)")


def pdf_text_has_amount(text: str, amount: Decimal) -> bool:
    """Does ``text`` show ``amount`` (1234.56 as 1.234,56, 1234,56, 1,234.56 or 1234.56)?
    119.00 is not found in 1119,00, 11,90 or 119,50."""
    if not amount.is_finite():
        return False
    try:
        pattern = _pattern(amount)
    except decimal.InvalidOperation:  # more digits than the context has
        return False
    return pattern.search(text) is not None
