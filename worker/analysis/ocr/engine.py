"""The ``ocrmypdf`` command line: its arguments, its deadline and memory limit, and its
exit status mapped to our errors (the ocrmypdf package is never imported into the job
child: a separate process group is killed at the deadline with all it started)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from worker import programs
from worker.analysis.ocr.errors import (
    ENCRYPTED,
    OcrConfigError,
    OcrError,
    OcrFailed,
    OcrInputError,
    OcrTimeout,
    out_of_memory,
    tail_lines,
)
from worker.analysis.ocr.options import PDF, OcrOptions

# ocrmypdf.ExitCode, spelled out: the ocrmypdf package is not imported into the job child.
EXIT_BAD_ARGS = 1
EXIT_INPUT_FILE = 2
EXIT_MISSING_DEPENDENCY = 3
EXIT_INVALID_OUTPUT_PDF = 4
EXIT_FILE_ACCESS_ERROR = 5
EXIT_ALREADY_DONE_OCR = 6
EXIT_CHILD_PROCESS_ERROR = 7
EXIT_ENCRYPTED_PDF = 8
EXIT_INVALID_CONFIG = 9
EXIT_PDFA_CONVERSION_FAILED = 10
EXIT_OTHER_ERROR = 15
EXIT_CTRL_C = 130


def run_ocrmypdf(
    pdf_in: Path,
    out_pdf: Path,
    sidecar: Path,
    work: Path,
    opts: OcrOptions,
    deadline: float,
    mime_type: str,
) -> None:
    argv = [
        sys.executable,
        "-m",
        "ocrmypdf",
        "--language",
        "+".join(opts.languages),
        "--mode",
        opts.mode,
        # A plain PDF: no PDF/A conversion (time, and it may re-encode images); no
        # optimisation pass: the derived copy keeps the scan's images as they are.
        "--output-type",
        "pdf",
        "--optimize",
        "0",
        "--sidecar",
        str(sidecar),
        # The signed original stays in the archive; the derived copy only needs its text.
        "--invalidate-digital-signatures",
        # A page that renders with a soft error (a missing font) still gets its text.
        "--continue-on-soft-render-error",
    ]
    if opts.rotate_pages:
        argv += ["--rotate-pages", "--rotate-pages-threshold", f"{opts.rotate_threshold:g}"]
    if opts.jobs:
        argv += ["--jobs", str(opts.jobs)]
    argv += ["--", str(pdf_in), str(out_pdf)]
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise OcrTimeout(f"OCR timeout of {opts.timeout:g} s used up before ocrmypdf started")
    # TMPDIR: ocrmypdf's temp files go where a killed run's debris is found and removed.
    # PYTHONWARNINGS: deprecation chatter would crowd the real error out of stderr's tail.
    env = {"OMP_THREAD_LIMIT": "1", "TMPDIR": str(work), "PYTHONWARNINGS": "ignore"}
    try:
        res = programs.run(
            argv, timeout=remaining, env=env, cwd=work, memory_limit=opts.memory_limit
        )
    except programs.ProgramTimeout:
        raise OcrTimeout(
            f"OCR did not finish within {opts.timeout:g} s "
            "(OcrOptions.timeout); ocrmypdf and its children were killed"
        ) from None
    except programs.ProgramNotFound as exc:
        raise OcrConfigError(f"cannot start ocrmypdf: {exc.message}") from None
    if res.returncode != 0:
        raise _error_for(res, mime_type, opts.memory_limit)
    if not out_pdf.is_file():
        raise OcrFailed(f"ocrmypdf exited 0 but wrote no PDF{_stderr_note(res)}")


def _stderr_note(res: programs.ProgramResult) -> str:
    tail = tail_lines(res.stderr)
    return f"; ocrmypdf said:\n{tail}" if tail else ""


def _error_for(
    res: programs.ProgramResult, mime_type: str, memory_limit: int | None = None
) -> OcrError:
    """ocrmypdf's exit code as one of our errors (ocrmypdf.ExitCode)."""
    code, note = res.returncode, _stderr_note(res)
    what = "PDF" if mime_type == PDF else "image"
    if _out_of_memory(res):
        return out_of_memory(memory_limit, what, note)
    if code == EXIT_ENCRYPTED_PDF:
        return OcrInputError(ENCRYPTED)
    if code == EXIT_INPUT_FILE:
        return OcrInputError(f"ocrmypdf cannot read the {what} (damaged or unsupported){note}")
    if code == EXIT_MISSING_DEPENDENCY:
        return OcrConfigError(
            f"a program ocrmypdf needs is missing (tesseract, ghostscript or a language pack){note}"
        )
    if code in (EXIT_INVALID_CONFIG, EXIT_BAD_ARGS):
        return OcrConfigError(f"ocrmypdf refused its configuration (exit {code}){note}")
    if code == EXIT_FILE_ACCESS_ERROR:
        return OcrFailed(
            f"ocrmypdf could not read or write a file (exit 5: permissions, disk full?){note}"
        )
    if code == EXIT_CHILD_PROCESS_ERROR:
        return OcrFailed(
            f"a program under ocrmypdf (tesseract or ghostscript) failed (exit 7){note}"
        )
    names = {
        EXIT_INVALID_OUTPUT_PDF: "its output PDF did not validate",
        EXIT_ALREADY_DONE_OCR: "it found text it was told not to expect",
        EXIT_PDFA_CONVERSION_FAILED: "PDF/A conversion failed",
        EXIT_OTHER_ERROR: "internal error",
        EXIT_CTRL_C: "interrupted",
    }
    why = f"killed by signal {-code}" if code < 0 else names.get(code, "unexpected exit status")
    return OcrFailed(f"ocrmypdf failed: {why} (exit {code}){note}")


# What a process says when an allocation failed (Python, C++, ghostscript, tesseract,
# leptonica), or the kernel's OOM kill.
_OOM = re.compile(
    r"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory|"
    r"VMerror|Out of memory|memory allocation failed|pixCreate.*failed",
    re.IGNORECASE,
)


def _out_of_memory(res: programs.ProgramResult) -> bool:
    return res.returncode == -9 or bool(_OOM.search(res.stderr))
