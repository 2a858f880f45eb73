"""What the installation offers OCR (ocrmypdf, tesseract and its language packs), and the
options checked against it before any file is touched."""

from __future__ import annotations

import functools
import importlib.util
import re

from worker import programs
from worker.analysis.ocr.errors import OcrConfigError, tail_lines
from worker.analysis.ocr.options import OcrOptions

TESSERACT_TIMEOUT = 30.0  # seconds for `tesseract --list-langs` / `--version`
_LANG_NAME = re.compile(r"[A-Za-z0-9_]+(?:/[A-Za-z0-9_]+)?")


@functools.lru_cache(maxsize=1)
def tesseract_info() -> tuple[frozenset[str], str]:
    """(languages, version) of the tesseract on PATH."""
    try:
        langs = programs.run(["tesseract", "--list-langs"], timeout=TESSERACT_TIMEOUT)
        version = programs.run(["tesseract", "--version"], timeout=TESSERACT_TIMEOUT)
    except programs.ProgramNotFound:
        raise OcrConfigError("tesseract is not installed (apt-get install tesseract-ocr)") from None
    except programs.ProgramTimeout as exc:
        raise OcrConfigError(f"tesseract does not answer: {exc.message}") from None
    if not langs.ok:
        raise OcrConfigError(
            f"`tesseract --list-langs` failed (exit {langs.returncode}): {tail_lines(langs.stderr)}"
        )
    # The first line is a heading ('List of available languages in "..." (3):').
    names = frozenset(line.strip() for line in langs.stdout.splitlines()[1:] if line.strip())
    # tesseract 4 printed its version on stderr, 5 on stdout: "tesseract 5.3.0".
    first = (version.stdout.strip() or version.stderr.strip()).splitlines()[:1]
    return names, (first[0].split()[-1] if first else "unknown")


def apt_package(language: str) -> str:
    """Debian's package for a tesseract language pack: chi_sim -> tesseract-ocr-chi-sim."""
    return "tesseract-ocr-" + language.lower().replace("_", "-").replace("/", "-")


def check_options(opts: OcrOptions) -> None:
    problems = []
    if not opts.languages:
        problems.append("no OCR language given")
    problems += [
        f"invalid tesseract language name {lang!r}"
        for lang in opts.languages
        if not _LANG_NAME.fullmatch(lang)
    ]
    if opts.mode not in ("skip", "redo", "force"):
        problems.append(f"OCR mode {opts.mode!r} is not one of skip, redo, force")
    if opts.jobs < 0 or opts.timeout <= 0 or opts.thumbnail_width < 1 or opts.image_dpi < 1:
        problems.append("OCR jobs must be >= 0; timeout, thumbnail_width and image_dpi > 0")
    if problems:
        raise OcrConfigError("; ".join(problems))


def check_installation(opts: OcrOptions) -> str:
    """Raise OcrConfigError for a missing program or language pack; the engine string."""
    if importlib.util.find_spec("ocrmypdf") is None:
        raise OcrConfigError("ocrmypdf is not installed in ingestd's Python environment")
    langs, tess_version = tesseract_info()
    wanted = [*opts.languages, *(["osd"] if opts.rotate_pages else [])]
    if any(lang not in langs for lang in wanted):
        tesseract_info.cache_clear()  # installed since we looked? ask again before failing
        langs = tesseract_info()[0]
    missing = [lang for lang in wanted if lang not in langs]
    if missing:
        what = ", ".join(f"{lang!r} (apt-get install {apt_package(lang)})" for lang in missing)
        why = " (osd: needed to rotate pages)" if "osd" in missing else ""
        raise OcrConfigError(
            f"tesseract language pack missing: {what}{why}; "
            f"installed: {', '.join(sorted(langs)) or 'none'}"
        )
    return f"ocrmypdf {_ocrmypdf_version()}, tesseract {tess_version}"


@functools.lru_cache(maxsize=1)
def _ocrmypdf_version() -> str:
    import importlib.metadata  # here: 30 ms off the job child's start-up

    return importlib.metadata.version("ocrmypdf")
