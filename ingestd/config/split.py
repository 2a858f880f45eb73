"""The batch-split policy (issue 16): a ``split`` table on a ``[[watch]]`` folder or an
``[[sftp.accounts]]`` entry, or a tenant's default under ``[split.<tenant>]``.

A batch (one PDF or multi-page TIFF holding several documents) is archived as dropped and
then split by a split-batch job into children, one per document. Where one document
ends is read from the pages:

- ``mode = "separator"``: a separator sheet (a barcode whose text is one of
  ``separators`` or full-matches ``separator_regex``; default ``PATCHT``, the PATCH-T
  sheet's Code 39) starts a new document. ``keep_separator`` keeps the sheet as the first
  page(s) of the document that follows; by default it is dropped from the children (it
  stays in the archived batch, like every page).
- ``mode = "barcode-change"``: a page whose barcode (of those ``change_regex`` matches;
  default any that is neither an ASN nor a tag code) differs from the current document's
  starts a new one; pages without such a code continue the current document.
- ``blank_sheets``: a blank sheet also separates (ink below ``blank_threshold`` percent
  of the page).
- ``duplex``: pages come in sheets (front, back); a separator on either side makes the
  whole sheet the separator, and documents start on a sheet boundary.
- ``max_pages``: a child longer than this means a separator was missed: the batch is
  flagged for attention, never silently made one huge document.

ASN codes (``asn_prefix`` followed by digits, e.g. ``ASN00042``) set the child's archive
serial number (unique per tenant); tag codes map by regex to tags.

This module must not import ``ingestd.config.settings`` (that one imports it).
"""

from __future__ import annotations

import enum
from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from ingestd.config.rules import REGEX_ERRORS, ConfigModel, compile_user_regex


class Symbology(enum.StrEnum):
    """The barcode symbologies a split policy may read (zxing-cpp reads them all)."""

    code39 = "code39"
    code128 = "code128"
    qr = "qr"
    datamatrix = "datamatrix"


class SplitMode(enum.StrEnum):
    separator = "separator"
    barcode_change = "barcode-change"


DEFAULT_SEPARATOR = "PATCHT"
# An ASN is at most this many digits (it is stored as a BIGINT).
ASN_DIGITS = 18


def _compiled(pattern: str, what: str) -> str:
    try:
        compiled = compile_user_regex(pattern, case_sensitive=True)
    except REGEX_ERRORS as exc:
        raise ValueError(f"{what} does not compile: {exc}") from None
    if compiled.fullmatch(""):
        raise ValueError(f"{what} matches the empty string")
    return pattern


class TagBarcode(ConfigModel):
    """A barcode whose text full-matches ``pattern`` tags its child with ``tag``; the tag
    may use the pattern's groups as ``{1}``, ``{2}`` (e.g. pattern ``TAG:(.+)``, tag
    ``{1}``)."""

    pattern: str
    tag: Annotated[str, Field(min_length=1, max_length=100)]

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: str) -> str:
        return _compiled(v, "pattern")

    @model_validator(mode="after")
    def _groups(self) -> TagBarcode:
        groups = compile_user_regex(self.pattern, case_sensitive=True).groups
        for n in range(groups + 1, 10):
            if "{" + str(n) + "}" in self.tag:
                raise ValueError(f"tag uses {{{n}}} but the pattern has {groups} group(s)")
        return self


class SplitPolicy(ConfigModel):
    mode: SplitMode = SplitMode.separator
    separators: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=lambda: [DEFAULT_SEPARATOR]
    )
    # A separator's text may also full-match this (e.g. "SEP-[0-9]+").
    separator_regex: str | None = None
    # barcode-change: which codes' values count (full match); None: any code that is
    # neither an ASN nor a tag code.
    change_regex: str | None = None
    symbologies: list[Symbology] = Field(default_factory=lambda: list(Symbology), min_length=1)
    keep_separator: bool = False
    duplex: bool = False
    blank_sheets: bool = False
    # Percent of the page (margins excluded) that is ink, below which a side is blank.
    # Measured on 300 dpi A4: a scanned blank sheet (noise, dust, show-through) <= 0.004,
    # a page number alone 0.03, one line of text 0.16, a letter 2.6.
    blank_threshold: Annotated[float, Field(gt=0, le=20)] = 0.1
    max_pages: Annotated[int, Field(ge=1, le=100_000)] = 100
    asn_prefix: Annotated[str, Field(min_length=1, max_length=20)] | None = None
    tag_barcodes: list[TagBarcode] = Field(default_factory=list)

    @field_validator("separator_regex", "change_regex")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        return None if v is None else _compiled(v, "regex")

    @model_validator(mode="after")
    def _consistent(self) -> SplitPolicy:
        if self.mode is SplitMode.separator and not (self.separators or self.separator_regex):
            raise ValueError("mode 'separator' needs separators or separator_regex")
        if self.mode is SplitMode.barcode_change and self.keep_separator:
            raise ValueError("keep_separator applies to mode 'separator' only")
        if self.asn_prefix is not None and self.asn_prefix in self.separators:
            raise ValueError("asn_prefix must not also be a separator")
        return self

    def as_payload(self) -> dict[str, object]:
        """The policy as the split-batch job carries it (JSON; read back with
        ``model_validate``)."""
        return self.model_dump(mode="json")


def _split_kind(value: object) -> str | None:
    if value is False:
        return "off"
    if isinstance(value, dict | SplitPolicy):
        return "policy"
    return None  # reported with the message below


# A source's ``split``: a policy of its own, ``false`` for none (overriding the tenant's
# default), or absent (the tenant's default, if any). A discriminator, not a plain union:
# a mistake inside the table is reported once, under its own key.
SourceSplit = (
    Annotated[
        Annotated[SplitPolicy, Tag("policy")] | Annotated[Literal[False], Tag("off")],
        Discriminator(
            _split_kind,
            custom_error_type="split_kind",
            custom_error_message="must be a table (a split policy) or false",
        ),
    ]
    | None
)


def effective(source: SourceSplit, tenant_default: SplitPolicy | None) -> SplitPolicy | None:
    """The policy that applies to a file from a source with ``source`` as its setting."""
    if source is False:
        return None
    return source if source is not None else tenant_default


__all__ = [
    "ASN_DIGITS",
    "DEFAULT_SEPARATOR",
    "SourceSplit",
    "SplitMode",
    "SplitPolicy",
    "Symbology",
    "TagBarcode",
    "effective",
]
