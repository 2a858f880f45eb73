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
    """A regular expression a barcode's text must full-match."""
    tag: Annotated[str, Field(min_length=1, max_length=100)]
    """The tag its child gets; `{1}`, `{2}`, … are the pattern's groups (pattern
    `TAG:(.+)`, tag `{1}`)."""

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
    """`separator`: a separator sheet starts a new document; `barcode-change`: a page whose
    barcode differs from the current document's starts one (pages without continue it)."""
    separators: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=lambda: [DEFAULT_SEPARATOR]
    )
    """Barcode texts that make a page a separator sheet (`PATCHT`: the PATCH-T sheet's
    Code 39)."""
    separator_regex: str | None = None
    """A separator's text may also full-match this regular expression (e.g.
    `SEP-[0-9]+`)."""
    change_regex: str | None = None
    """For `barcode-change`: the codes whose values count (full match); none: any code that
    is neither an ASN nor a tag code."""
    symbologies: list[Symbology] = Field(default_factory=lambda: list(Symbology), min_length=1)
    """The barcode symbologies read."""
    keep_separator: bool = False
    """Keep a separator sheet as the first page(s) of the document that follows, instead
    of dropping it from the children (the archived batch keeps every page)."""
    duplex: bool = False
    """Pages come in sheets (front, back): a separator on either side makes the whole sheet
    the separator, and documents start on a sheet boundary."""
    blank_sheets: bool = False
    """A blank sheet (both sides, in duplex) separates documents too."""
    # Measured on 300 dpi A4: a scanned blank sheet (noise, dust, show-through) <= 0.004,
    # a page number alone 0.03, one line of text 0.16, a letter 2.6.
    blank_threshold: Annotated[float, Field(gt=0, le=20)] = 0.1
    """Percent of the page (margins excluded) that is ink, below which a side is blank."""
    max_pages: Annotated[int, Field(ge=1, le=100_000)] = 100
    """A child longer than this means a separator was missed: the batch needs attention
    instead of silently becoming one huge document."""
    asn_prefix: Annotated[str, Field(min_length=1, max_length=20)] | None = None
    """A barcode of this prefix and digits (`ASN00042`) sets the child's archive serial
    number, unique per tenant."""
    tag_barcodes: list[TagBarcode] = Field(default_factory=list)
    """Tag barcodes: a code that full-matches `pattern` tags its child with `tag`."""

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
