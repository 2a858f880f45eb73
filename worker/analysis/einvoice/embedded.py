"""The invoice XML inside a hybrid PDF (Factur-X, ZUGFeRD 2.x, XRechnung in PDF), and
whether the PDF's visible text shows an amount.

The PDF is opened read-only with pikepdf and never written. The XML is looked for among
the document's embedded files (the names the standards give it first, then any XML
attachment) and taken only if its root is a UBL or CII invoice; an encrypted or damaged
PDF, or one without such a file, is None: it is analysed as any PDF.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pikepdf

from ingestd import xmlsafe
from ingestd.errors import IngestdError
from ingestd.intake.filetypes import EINVOICE_ROOTS

EMBEDDED_NAMES = ("factur-x.xml", "zugferd-invoice.xml", "xrechnung.xml")
MAX_XML_BYTES = 16 * 1024 * 1024
MAX_ATTACHMENTS = 200


class EmbeddedTooLarge(IngestdError):
    """The embedded invoice XML is larger than the bound: archived, not read."""

    transient = False


def _candidates(pdf: pikepdf.Pdf) -> list[tuple[str, pikepdf.AttachedFileSpec]]:
    specs = list(pdf.attachments.items())[:MAX_ATTACHMENTS]
    known = [(n, s) for n, s in specs if n.lower() in EMBEDDED_NAMES]
    rest = [(n, s) for n, s in specs if n.lower().endswith(".xml") and (n, s) not in known]
    return known + rest


def embedded_invoice_xml(
    pdf_path: Path, *, max_bytes: int = MAX_XML_BYTES
) -> tuple[str, bytes] | None:
    """(name, bytes) of the invoice XML embedded in ``pdf_path``, or None."""
    try:
        pdf = pikepdf.open(pdf_path)
    except (pikepdf.PdfError, pikepdf.PasswordError, OSError, ValueError):
        return None
    try:
        for name, spec in _candidates(pdf):
            try:
                stream = spec.get_file()
                size = int(stream.size)
                if size > max_bytes:
                    raise EmbeddedTooLarge(
                        f"the embedded invoice XML {name!r} is {size} bytes, more than "
                        f"{max_bytes} are not read"
                    )
                data = bytes(stream.read_bytes())
            except (pikepdf.PdfError, ValueError, KeyError, AttributeError):
                continue
            if len(data) > max_bytes:
                raise EmbeddedTooLarge(f"the embedded invoice XML {name!r} is too large")
            if xmlsafe.root_name(data[:8192]) in EINVOICE_ROOTS:
                return name, data
        return None
    except (pikepdf.PdfError, ValueError):
        return None
    finally:
        pdf.close()


def _forms(amount: Decimal) -> set[str]:
    q = amount.quantize(Decimal("0.01"))
    plain = f"{abs(q):.2f}"
    grouped = f"{abs(q):,.2f}"
    german = grouped.replace(",", "_").replace(".", ",").replace("_", ".")
    return {plain, plain.replace(".", ","), grouped, german}


def pdf_text_has_amount(text: str, amount: Decimal) -> bool:
    """Does ``text`` show ``amount`` (1234.56 as 1.234,56, 1234,56, 1,234.56 or 1234.56)?"""
    squeezed = re.sub(r"(?<=\d)[ \u00a0\u202f](?=\d)", "", text)
    for form in _forms(amount):
        if re.search(rf"(?<![\d.,]){re.escape(form)}(?![\d])", squeezed):
            return True
    return False
