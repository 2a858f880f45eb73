"""An administrator's regular expression as the workers run it (issue 29).

``UserPattern`` is a pattern from the config (a split policy's ``separator_regex``, a tag
barcode's ``pattern``, a taxonomy ``regex`` rule) compiled once, as validation compiles
it (``compile_user_regex``), whose every search is bounded in time. A search that runs
past its limit raises ``PatternTimeout``: the pattern backtracks catastrophically on that
text ("(a+)+$" on "aaaa...!"), and the same search again takes as long, so it is never
retried: its document needs ``attention``, with the pattern and where it is configured
named so that an administrator can fix it (or, as taxonomy does, the rule is skipped
and logged).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import regex

from ingestd.config.rules import REGEX_TIMEOUT, compile_user_regex
from ingestd.errors import ExitCode, IngestdError

SHOWN = 100  # characters of a pattern or of the text it ran on, in a reason or log line


def shorten(text: str, limit: int = SHOWN) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class UserPattern:
    """A configured pattern, compiled; ``where`` says where the config sets it (e.g.
    ``split policy separator_regex``)."""

    where: str
    text: str
    case_sensitive: bool = True
    compiled: regex.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = compile_user_regex(self.text, case_sensitive=self.case_sensitive)
        object.__setattr__(self, "compiled", compiled)

    @property
    def groups(self) -> int:
        return self.compiled.groups

    def fullmatch(
        self, text: str, *, subject: str, timeout: float = REGEX_TIMEOUT
    ) -> regex.Match[str] | None:
        """The pattern matching all of ``text`` (``subject`` names it for the error)."""
        try:
            return self.compiled.fullmatch(text, timeout=timeout)
        except TimeoutError:
            raise PatternTimeout(self, subject, timeout) from None

    def search(
        self, text: str, *, subject: str, timeout: float = REGEX_TIMEOUT
    ) -> regex.Match[str] | None:
        """The pattern's first match in ``text`` (``subject`` names it for the error)."""
        try:
            return self.compiled.search(text, timeout=timeout)
        except TimeoutError:
            raise PatternTimeout(self, subject, timeout) from None


class PatternTimeout(IngestdError):
    """A search of a configured pattern ran past its time limit. About the pattern and
    that text, not the environment: a retry takes as long again. The document needs
    attention, its reason naming the pattern, where it is set and the text."""

    exit_code = ExitCode.config_invalid
    transient = False
    attention = True

    def __init__(self, pattern: UserPattern, subject: str, timeout: float) -> None:
        super().__init__(
            f"the {pattern.where} {shorten(pattern.text)!r} took longer than {timeout:g} s "
            f"on {subject}: the pattern backtracks too much; simplify it (no nested "
            "repeats such as (a+)+) and re-queue the document"
        )
        self.where = pattern.where
        self.pattern = pattern.text
        self.timeout = timeout
