"""Config models for what analyze-document decides from a document's text.

``[[taxonomy]]`` tables assign tags, a correspondent and a document type when their
``match`` is found in the OCR text (paperless-ngx's matching algorithms, see
``worker/analysis/taxonomy.py``); ``[[workflows]]`` tables run actions on a new document when
their conditions hold (``worker/analysis/workflows.py``). Everything that can be checked without
a document is checked here, so that ``ingestd check-config`` refuses a broken regex or
title template instead of a worker failing on every job.

This module must not import ``ingestd.config.settings``: that one imports these models.
"""

from __future__ import annotations

import dataclasses
import os
import re
import string
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import regex
from pydantic import (
    AfterValidator,
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from ingestd.config.filemodes import GROUP_READABLE, read_secret_file
from ingestd.errors import ConfigError

# The same as ingestd.config.settings.TENANT_NAME (a test keeps them equal).
TENANT_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _plain_name(v: str) -> str:
    if _CONTROL.search(v):
        raise ValueError("must not contain control characters")
    if v != v.strip():
        # "Telekom " and "Telekom" would be two different tags in the database.
        raise ValueError("must not start or end with whitespace")
    return v


def _absolute(v: Path) -> Path:
    # Workers and check-config run in different directories.
    if not v.is_absolute():
        raise ValueError("must be an absolute path")
    return v


@dataclasses.dataclass(frozen=True)
class Shown:
    """How the configuration reference (ingestd.config.reference) shows a key whose type
    or default says too little on its own, as ``Annotated`` metadata; validation ignores
    it. ``kind`` replaces the type's name (bounds are still read from the schema),
    ``default`` the default (Markdown) where a validator or the machine decides it."""

    kind: str | None = None
    default: str | None = None


# A float that is a number of seconds.
SECONDS = Shown(kind="duration in seconds")

# A path a worker opens (secrets, CA files): never relative to whoever runs it.
AbsolutePath = Annotated[Path, AfterValidator(_absolute), Shown(kind="absolute path")]

# A tag, correspondent, document type or workflow name (tags are stored with at most 100).
Name = Annotated[str, Field(min_length=1, max_length=100), AfterValidator(_plain_name)]


_Loc = tuple[int | str, ...]


def _bool_as_number(given: object, taken: object) -> tuple[_Loc, str] | None:
    """Where (the sub-key path, () for the value itself) a TOML ``true``/``false`` in
    ``given`` came out as a number in ``taken``, and what was expected there; else None.
    pydantic's lax mode reads a bool as 1/0 for int, float and ByteSize."""
    if isinstance(given, bool):
        if isinstance(taken, bool) or not isinstance(taken, int | float):
            return None
        if isinstance(taken, ByteSize):
            return (), "must be a size (e.g. 512MiB) or a number of bytes"
        return (), "must be an integer" if isinstance(taken, int) else "must be a number"
    pairs: list[tuple[int | str, object, object]]
    if isinstance(given, dict) and isinstance(taken, dict):
        pairs = [(k, v, taken[k]) for k, v in given.items() if k in taken]
    elif isinstance(given, list | tuple) and isinstance(taken, list | tuple):
        pairs = [(i, v, t) for i, (v, t) in enumerate(zip(given, taken, strict=False))]
    else:
        return None  # a scalar that is no bool, or a nested table (it checks itself)
    for key, v, t in pairs:
        found = _bool_as_number(v, t)
        if found is not None:
            return (key, *found[0]), found[1]
    return None


# What a bool read as 0/1 fails before it could be compared (`window_size = true`).
_NUMBER_LIMITS = frozenset(
    {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of"}
)


def _not_true_false(title: str, errors: list[tuple[_Loc, str, bool]]) -> ValidationError:
    """The errors at their sub-keys ("must be a number, not true/false (got True)")."""
    details = [
        InitErrorDetails(
            type=PydanticCustomError("bool_is_not_a_number", f"{expected}, not true/false"),
            loc=loc,
            input=value,
        )
        for loc, expected, value in errors
    ]
    return ValidationError.from_exception_data(title, details)


class ConfigModel(BaseModel):
    """The base of every config table (ingestd.config.settings._Section, _Rule here): unknown keys
    are errors (a typo like `max_file_sise` must not silently keep a default), values are
    immutable, and a boolean is never a number. Each key's docstring (the string literal
    after it) is its description: ``ingestd config-reference`` prints it, and a test
    wants one for every key."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @field_validator("*", mode="wrap")
    @classmethod
    def _no_bool_numbers(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # Compared after validation, so every field type is covered without listing them
        # (int, float, ByteSize, Annotated limits, unions, tables and arrays of numbers):
        # wherever a bool went in and a non-bool number came out, `max_file_size = true`
        # would have been read as 1 byte. Raised as a ValidationError to keep the sub-key.
        try:
            taken = handler(value)
        except ValidationError as exc:
            errors = exc.errors()
            if errors and all(
                isinstance(e["input"], bool) and e["type"] in _NUMBER_LIMITS for e in errors
            ):
                raise _not_true_false(
                    cls.__name__,
                    [(tuple(e["loc"]), "must be a number", e["input"]) for e in errors],
                ) from None
            raise
        found = _bool_as_number(value, taken)
        if found is not None:
            loc, expected = found
            bad = value
            for key in loc:
                bad = bad[key]
            raise _not_true_false(cls.__name__, [(loc, expected, bool(bad))])
        return taken


class _Rule(ConfigModel):
    """A rule table: unknown keys are errors, values are immutable, no bools as numbers."""


# --- taxonomy -------------------------------------------------------------------------

# Seconds one search of a rule's regex may take (analysis.regex_timeout's default).
REGEX_TIMEOUT = 1.0
# What compiling an administrator's regex may raise: a syntax error; ValueError for
# "(?V1)" against VERSION0; deep nesting or huge repeat counts.
REGEX_ERRORS = (regex.error, ValueError, OverflowError, RecursionError)


def compile_user_regex(pattern: str, *, case_sensitive: bool) -> regex.Pattern[str]:
    """A ``regex`` taxonomy rule's pattern, compiled as the matcher runs it.

    The ``regex`` package (mrab-regex), not ``re``: its searches take a ``timeout``, so
    a pattern that backtracks catastrophically ("(a+)+$") cannot hang a worker.
    ``VERSION0`` keeps ``re``'s semantics; ``^``/``$`` match at line breaks; case is
    ignored unless ``case_sensitive``. Validation compiles with this very function, so
    check-config accepts exactly what the workers run.
    """
    flags = regex.VERSION0 | regex.MULTILINE | (0 if case_sensitive else regex.IGNORECASE)
    return regex.compile(pattern, flags)


class TaxonomyRule(_Rule):
    """Assign ``name`` (a tag, correspondent or document type) when ``match`` is found.

    Algorithms (paperless-ngx semantics; texts compared with umlauts and case folded
    unless ``case_sensitive``):

    - ``any``: one of the whitespace-separated words appears as a whole word;
      ``"multi word"`` in double quotes is one phrase
    - ``all``: every one of those words and phrases appears
    - ``exact``: the whole match string appears as a phrase of whole words
    - ``regex``: a Python regular expression found in the text (runs of spaces collapsed,
      line breaks kept, ``^``/``$`` match at them; ignoring case unless case_sensitive).
      Compiled here and run by the ``regex`` package (``compile_user_regex``), each
      search limited to ``analysis.regex_timeout`` seconds
    - ``fuzzy``: the match string is like a run of words of the text, similarity (0..100)
      at least ``fuzzy_threshold``
    """

    tenant: Annotated[str, Field(pattern=TENANT_NAME)]
    """The tenant whose documents the rule applies to."""
    kind: Literal["tag", "correspondent", "document_type"]
    """What the rule assigns."""
    name: Name
    """The tag, correspondent or document type it assigns."""
    # Declared before `match` so that its validator can name the rule and its algorithm
    # (and compile a regex with the rule's case_sensitive).
    algorithm: Literal["any", "all", "exact", "regex", "fuzzy"] = "any"
    """How `match` is found: `any` of its words (a "quoted phrase" is one), `all` of them,
    the `exact` phrase, a Python `regex`, or `fuzzy` (with a few typos)."""
    # 85 lets one letter in seven be wrong ("Telecom" finds "Telekom": 85.7) while
    # "Telefon" (71) or "Telekolleg" (71) do not. paperless-ngx's 90 would need ten
    # letters before a single typo is forgiven.
    fuzzy_threshold: Annotated[int, Field(ge=0, le=100)] = 85
    """For `fuzzy`: the similarity, in percent of matching letters, a run of words of the
    text needs."""
    case_sensitive: bool = False
    """Compare case and umlauts exactly instead of folding them (Müller = mueller)."""
    match: Annotated[str, Field(max_length=1000)]
    """The words, phrase or regular expression to find in the document's title or text."""

    @field_validator("match")
    @classmethod
    def _match_usable(cls, v: str, info: ValidationInfo) -> str:
        rule = f"{info.data.get('kind', '?')} rule {info.data.get('name', '?')!r}"
        if not v.strip():
            raise ValueError(f"{rule}: match must not be empty")
        algorithm = info.data.get("algorithm", "any")
        if algorithm == "regex":
            try:
                pattern = compile_user_regex(
                    v, case_sensitive=bool(info.data.get("case_sensitive", False))
                )
            except REGEX_ERRORS as exc:
                raise ValueError(f"{rule}: regex does not compile: {exc}") from None
            # "Telekom|" (a stray bar) matches the empty string, i.e. every document.
            if pattern.search("") is not None:
                raise ValueError(f"{rule}: regex matches the empty string, so every document")
        elif not re.search(r"\w", v):
            # Words are compared without punctuation: "!!!" could never match anything.
            raise ValueError(f"{rule}: match has no letters or digits")
        return v


# --- webhooks -------------------------------------------------------------------------

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class WebhookConfig(_Rule):
    """Where to POST the document.analyzed event, and the secret that signs it.

    The secret lives in a file (mode 0600 or 0640, e.g. root:ingestd) or an environment
    variable (systemd ``LoadCredential=``/``Environment=``), never in the config file.
    """

    url: str
    """The http(s) URL the signed JSON event is POSTed to (no password in it)."""
    secret_file: AbsolutePath | None = None
    """A file (mode 0600 or 0640) holding the HMAC secret that signs each request."""
    secret_env: Annotated[str, Field(pattern=_ENV_NAME)] | None = None
    """An environment variable holding the secret instead (exactly one of the two)."""
    timeout: Annotated[float, Field(gt=0, le=120), SECONDS] = 10.0
    """Seconds for the whole delivery (lookup, connect, request, answer), not per read."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if any(c.isspace() or _CONTROL.match(c) for c in v):
            raise ValueError("must not contain spaces or control characters")
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.password is not None:
            raise ValueError("must not contain a password; the request is signed with the secret")
        try:
            parts.port  # noqa: B018 -- raises ValueError for a port out of range
        except ValueError:
            raise ValueError("has an invalid port") from None
        return v

    @model_validator(mode="after")
    def _one_secret(self) -> WebhookConfig:
        if (self.secret_file is None) == (self.secret_env is None):
            raise ValueError(
                "webhook needs exactly one of secret_file or secret_env "
                "(no plaintext secrets in the config file)"
            )
        return self

    def secret(self) -> bytes:
        """The signing secret; ConfigError if it is missing, empty or readable by others."""
        if self.secret_env is not None:
            value = os.environ.get(self.secret_env, "").rstrip("\r\n")
            if not value.strip():
                raise ConfigError(
                    f"webhook secret_env: environment variable {self.secret_env} is not set"
                )
            return value.encode("utf-8")
        assert self.secret_file is not None  # _one_secret
        # Group read is how a service user gets a root-owned secret (0640 root:ingestd);
        # anything for "other", or group write, means the secret is not one.
        return read_secret_file(
            self.secret_file, f"webhook secret_file {self.secret_file}", GROUP_READABLE
        )

    @property
    def display_url(self) -> str:
        """The URL for logs and errors: no credentials, query, fragment or token-like path."""
        return redact_url(self.url)


# Path segments this long and made of token characters are likely secrets themselves
# (chat webhook URLs carry their token in the path).
_TOKEN_SEGMENT = re.compile(r"^[A-Za-z0-9_\-]{20,}$")


def redact_url(url: str) -> str:
    """``url`` without user info, query and fragment, token-like path segments as "…"."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    path = "/".join("…" if _TOKEN_SEGMENT.match(s) else s for s in parts.path.split("/"))
    return f"{parts.scheme}://{netloc}{path}"


# --- workflows ------------------------------------------------------------------------

# What a workflow's title template may use (worker/analysis/workflows.py fills them in).
TITLE_TEMPLATE_KEYS = frozenset(
    {
        "filename",
        "stem",
        "correspondent",
        "document_type",
        "issued_date",
        "year",
        "month",
        "tenant",
        "source",
        "subfolder",
        "title",
        "page_count",
    }
)
TITLE_TEMPLATE = Shown(
    kind="title template with the fields "
    + ", ".join(f"`{{{key}}}`" for key in sorted(TITLE_TEMPLATE_KEYS))
)


def template_fields(template: str) -> list[tuple[str, str | None]]:
    """(literal text, field or None) pieces of a title template; ValueError if invalid.

    Only plain ``{key}`` fields are allowed: no ``{key!r}``, no ``{key:>99999}`` (format
    specs can blow up a title or a worker's memory), no ``{key.attr}`` or ``{key[0]}``.
    ``{{`` and ``}}`` are literal braces.
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"title template {template!r} is malformed: {exc}") from None
    pieces: list[tuple[str, str | None]] = []
    allowed = ", ".join(sorted(TITLE_TEMPLATE_KEYS))
    for literal, field, spec, conversion in parsed:
        if field is not None:
            if field not in TITLE_TEMPLATE_KEYS:
                shown = f"{{{field}}}" if field else "{}"
                raise ValueError(f"title template: unknown placeholder {shown}; allowed: {allowed}")
            if spec or conversion:
                raise ValueError(
                    f"title template: {{{field}}} must be a plain placeholder, "
                    "without !conversion or :format"
                )
        pieces.append((literal, field))
    return pieces


class WorkflowConditions(_Rule):
    """When a workflow runs: every condition given must hold (none given: always)."""

    sources: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """Globs on the document's source (`cli`, `sftp:<account>`, `watch:<folder path>`),
    case-sensitive like account names and paths; one of them must match."""
    filename: Annotated[str, Field(min_length=1)] | None = None
    """Glob on the uploaded file's name, case-insensitive (`*.PDF` matches `a.pdf`)."""
    subfolder: str | None = None
    """Glob on the sub-folder below the inbox or hot folder, case-insensitive
    (`Buchhaltung/*`: any depth below it); `""` means the top level."""
    has_tags: list[Name] = Field(default_factory=list)
    """Tags the document must all have (after taxonomy and earlier workflows),
    case-insensitive."""
    correspondent: Name | None = None
    """The correspondent the document must have."""
    document_type: Name | None = None
    """The document type the document must have."""
    invoice: bool | None = None
    """`true`: only e-invoices (XRechnung, ZUGFeRD/Factur-X, any EN 16931 UBL or CII);
    `false`: only other documents."""
    seller_vat_id: Annotated[str, Field(min_length=3, max_length=40)] | None = None
    """An e-invoice's seller VAT id (`DE123456789`; case and blanks ignored)."""
    buyer_reference: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    """Glob on an e-invoice's buyer reference (the Leitweg-ID: `04011000-*`)."""
    total_above: Annotated[Decimal, Field(ge=0)] | None = None
    """An e-invoice whose gross total is above this amount (in its own currency)."""


class WorkflowActions(_Rule):
    """What a workflow does; at least one action."""

    add_tags: list[Name] = Field(default_factory=list)
    """Tags to add."""
    correspondent: Name | None = None
    """The correspondent to set."""
    document_type: Name | None = None
    """The document type to set."""
    title: Annotated[str, Field(min_length=1, max_length=1000), TITLE_TEMPLATE] | None = None
    """The title to set, from a template such as `{correspondent} {document_type}
    {year}-{month}`."""
    webhook: WebhookConfig | None = None
    """POST a signed `document.analyzed` event to a URL (a delivery of its own, retried on
    the `[deliveries]` ladder; a delivered one is never sent again)."""

    @field_validator("title")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is not None:
            template_fields(v)
        return v

    @model_validator(mode="after")
    def _has_action(self) -> WorkflowActions:
        if not (
            self.add_tags
            or self.correspondent is not None
            or self.document_type is not None
            or self.title is not None
            or self.webhook is not None
        ):
            raise ValueError(
                "a workflow needs at least one action: add_tags, correspondent, "
                "document_type, title or webhook"
            )
        return self


class WorkflowRule(_Rule):
    """An on-upload workflow of one tenant; workflows run in config order."""

    tenant: Annotated[str, Field(pattern=TENANT_NAME)]
    """The tenant whose new documents the workflow handles."""
    # Recorded per document when it ran (document_workflow_runs), so unique per tenant
    # (ingestd.config.settings.Config checks that).
    name: Name
    """The workflow's name, unique per tenant: a workflow runs once per document."""
    when: WorkflowConditions = Field(default_factory=WorkflowConditions)
    """When the workflow runs: every condition given must hold (none given: always)."""
    then: WorkflowActions
    """What the workflow does: at least one action."""
