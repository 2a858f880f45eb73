"""What the installation offers OCR (ocrmypdf, tesseract and its language packs), and the
options checked against it before any file is touched."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re

from worker import programs
from worker.analysis.ocr.errors import OcrConfigError, tail_lines
from worker.analysis.ocr.options import OcrOptions

TESSERACT_TIMEOUT = 30.0  # seconds for `tesseract --list-langs` / `--version`
_LANG_NAME = re.compile(r"[A-Za-z0-9_]+(?:/[A-Za-z0-9_]+)?")


@functools.lru_cache(maxsize=1)
def tesseract_info() -> tuple[frozenset[str], str, str]:
    """(languages, version, tessdata directory) of the tesseract on PATH (the directory
    honours TESSDATA_PREFIX, as tesseract does; the in-process engine reads the same)."""
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
    lines = langs.stdout.splitlines()
    names = frozenset(line.strip() for line in lines[1:] if line.strip())
    heading = lines[0].split('"') if lines else []
    tessdata = heading[1] if len(heading) >= 3 else ""
    # tesseract 4 printed its version on stderr, 5 on stdout: "tesseract 5.3.0".
    first = (version.stdout.strip() or version.stderr.strip()).splitlines()[:1]
    return names, (first[0].split()[-1] if first else "unknown"), tessdata


def tessdata_dir() -> str:
    """Where tesseract's language packs are (``TESSDATA_PREFIX`` or its built-in path)."""
    path = tesseract_info()[2]
    if not path:
        raise OcrConfigError("`tesseract --list-langs` did not say where its language packs are")
    return path


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
    if opts.engine not in ("tesseract", "tesseract-cli", "ocrmypdf"):
        problems.append(
            f"OCR engine {opts.engine!r} is not one of tesseract, tesseract-cli, ocrmypdf"
        )
    if opts.jobs < 0 or opts.slots < 0:
        problems.append("OCR jobs and slots must be >= 0")
    if min(opts.timeout, opts.page_timeout, opts.thumbnail_width, opts.image_dpi) <= 0:
        problems.append("OCR timeout, page_timeout, thumbnail_width and image_dpi must be > 0")
    if problems:
        raise OcrConfigError("; ".join(problems))


def uses_ocrmypdf(opts: OcrOptions) -> bool:
    """Mode redo (replace an old OCR layer, keep the rest) is ocrmypdf's alone."""
    return opts.engine == "ocrmypdf" or opts.mode == "redo"


def check_installation(opts: OcrOptions) -> str:
    """Raise OcrConfigError for a missing program or language pack; the engine string."""
    ocrmypdf = uses_ocrmypdf(opts)
    module = {"ocrmypdf": "ocrmypdf", "tesseract-cli": "pytesseract"}.get(
        "ocrmypdf" if ocrmypdf else opts.engine, "tesserocr"
    )
    if importlib.util.find_spec(module) is None:
        raise OcrConfigError(f"{module} is not installed in ingestd's Python environment")
    langs, tess_version, _ = tesseract_info()
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
    if ocrmypdf:
        return f"ocrmypdf {_ocrmypdf_version()}, tesseract {tess_version}"
    if opts.engine == "tesseract-cli":
        return f"tesseract {tess_version} (command line)"
    return f"tesseract {_version('tesserocr', 'tesseract_version')} (tesserocr)"


@functools.lru_cache(maxsize=1)
def _ocrmypdf_version() -> str:
    import importlib.metadata  # here: 30 ms off the job child's start-up

    return importlib.metadata.version("ocrmypdf")


@functools.lru_cache(maxsize=2)
def _version(module: str, function: str) -> str:
    """The library's own tesseract ("5.5.4"): the wheel brings its own build."""
    mod = importlib.import_module(module)
    words = str(getattr(mod, function)()).split()
    return words[1] if len(words) > 1 else "unknown"
