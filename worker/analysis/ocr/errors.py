"""The OCR errors, by what fixes them: the file (input, limit), the installation (config),
nothing yet (failed, timeout: retried); and the program output they quote."""

from __future__ import annotations

from ingestd.errors import ExitCode, IngestdError

ERROR_TAIL_LINES = 12
ENCRYPTED = "the PDF is encrypted (password-protected); ingestd cannot OCR it"


class OcrError(IngestdError):
    """Base of the OCR errors below; ``message`` is meant for a sysadmin."""

    exit_code = ExitCode.external_program


class OcrInputError(OcrError):
    """Permanent: this file cannot be OCRed (encrypted, damaged, truncated, unsupported).
    The document stays archived and needs attention, with this message as the reason."""

    exit_code = ExitCode.refused
    attention = True


class OcrConfigError(OcrError):
    """The installation lacks something (a language pack, ocrmypdf, tesseract, ghostscript)
    or the options are wrong: every file would fail until an admin fixes it."""

    exit_code = ExitCode.config_invalid


class OcrLimitExceeded(OcrInputError):
    """Permanent: this file needs more than a configured limit allows (pages, pixels per
    page, memory). Retrying would take the same resources again: the document needs
    attention, and the message names the limit."""


class OcrFailed(OcrError):
    """Anything else; worth a retry. The message ends with the tail of ocrmypdf's stderr."""

    transient = True


class OcrTimeout(OcrError):
    """OCR ran past ``OcrOptions.timeout``; ocrmypdf and its children were killed (the
    analysis retries it once, then the document needs attention)."""

    transient = True


def out_of_memory(limit: int | None, what: str, note: str = "") -> OcrLimitExceeded:
    """The error of an OCR run that hit analysis.memory_limit (either engine)."""
    size = f" ({limit / 2**30:.1f} GiB)" if limit else ""
    return OcrLimitExceeded(
        f"OCR ran out of memory under analysis.memory_limit{size}: "
        f"the {what} needs more than the limit allows{note}"
    )


def tail_lines(text: str, lines: int = ERROR_TAIL_LINES) -> str:
    """The last non-blank ``lines`` of a program's output, for an error message."""
    kept = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:])
