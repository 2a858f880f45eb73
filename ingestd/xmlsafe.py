"""Every XML parse of input from outside, in one place: no entity is ever expanded or
fetched, no DTD loaded, nothing read over the network, and the size and depth bounded.

XML from a client (an e-invoice, a part of an Office file) is hostile until proven
otherwise: a billion-laughs document expands to gigabytes, an external entity reads
``/etc/passwd`` or calls a URL (XXE), a thousand levels of nesting exhaust a recursive
reader. lxml is configured to do none of it, and a document that declares a DTD at all
is refused (no e-invoice, no Office part has one): ``HostileXml`` says why.
"""

from __future__ import annotations

import io
import re
from typing import Any

from lxml import etree

from ingestd.errors import IngestdError

MAX_XML_BYTES = 64 * 1024 * 1024  # an e-invoice with thousands of lines is a few MB
MAX_DEPTH = 256


class HostileXml(IngestdError):
    """Not XML we parse: malformed, a DTD or entity declarations, too large or too deep."""

    transient = False


def _parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


# Everything before the root element's start tag: declaration, comments, a DOCTYPE.
_ROOT_START = re.compile(rb"<[A-Za-z_\x80-\xff]")
_PROLOG_DTD = re.compile(rb"<!DOCTYPE", re.IGNORECASE)


def _prolog(data: bytes) -> bytes:
    """The bytes before the root element (UTF-16 input is left to the parser)."""
    found = _ROOT_START.search(data, 0, 1 << 20)
    return data[: found.start()] if found else data[: 1 << 20]


def _depth(root: Any) -> int:
    deepest, stack = 0, [(root, 1)]
    while stack:
        el, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            return d
        stack.extend((c, d + 1) for c in el)
    return deepest


def parse(data: bytes, *, max_bytes: int = MAX_XML_BYTES, what: str = "XML") -> Any:
    """The root element of ``data``; HostileXml (with the reason) if it is not plain,
    bounded XML."""
    if len(data) > max_bytes:
        raise HostileXml(f"{what} is {len(data)} bytes, more than {max_bytes} are not read")
    if _PROLOG_DTD.search(_prolog(data)):
        raise HostileXml(f"{what} declares a DTD (entities are never expanded or fetched)")
    try:
        tree = etree.parse(io.BytesIO(data), _parser())
    except etree.XMLSyntaxError as exc:
        raise HostileXml(f"{what} is not well-formed: {exc}") from None
    docinfo = tree.docinfo
    if docinfo.doctype or docinfo.internalDTD is not None or docinfo.externalDTD is not None:
        raise HostileXml(f"{what} declares a DTD (entities are never expanded or fetched)")
    root = tree.getroot()
    if _depth(root) > MAX_DEPTH:
        raise HostileXml(f"{what} nests more than {MAX_DEPTH} levels")
    return root


def root_name(head: bytes) -> tuple[str, str] | None:
    """(namespace, local name) of the first element in ``head`` (the start of a file,
    maybe cut anywhere), or None if it does not start as XML. Only the start is read,
    nothing is expanded or fetched; a DTD is refused later by ``parse``."""
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not stripped.startswith(b"<"):
        return None
    try:
        events = etree.iterparse(
            io.BytesIO(head),
            events=("start",),
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            huge_tree=False,
            recover=False,
        )
        for _event, el in events:
            q = etree.QName(el)
            return (q.namespace or "", q.localname)
    except etree.XMLSyntaxError:
        return None
    return None
