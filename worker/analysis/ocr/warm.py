"""Tesseract engines kept warm in the job child: models load once, not once per page.

The tesseract command line loads its language models for every page (a quarter of a
second for deu+eng, a fifth of a one-page scan's OCR); ocrmypdf starts a Python
interpreter per file on top. Here a ``tesserocr`` API, once initialised, stays in the
job child and reads page after page, job after job. One engine serves one thread at a
time (tesseract's API is not thread-safe; it releases the GIL while it recognises, so
threads with an engine each use every core). Engines are keyed by tessdata directory
and languages: a tenant with other languages gets engines of its own.

``loads()`` counts the model loads of this process, for the log, the metrics and the
tests that pin "once per engine, not per page".
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from ingestd import log
from worker.analysis.ocr.errors import OcrConfigError

OSD = "osd"
# Idle engines kept per key beyond what the current jobs use (the worker's concurrency
# bounds how many threads ever ask at once).
MAX_IDLE_PER_KEY = 8

_lock = threading.Lock()
_idle: dict[tuple[str, str], list[Any]] = {}
_loads = 0


def loads() -> int:
    """Model loads (engines initialised) in this process so far."""
    return _loads


def _module() -> Any:
    try:
        import tesserocr  # type: ignore[import-untyped]  # here: only OCR needs it
    except ImportError as exc:
        raise OcrConfigError(
            f"tesserocr is not installed in ingestd's Python environment ({exc}); "
            'set analysis.engine = "ocrmypdf" or reinstall ingestd'
        ) from None
    return tesserocr


def _new(tessdata: str, languages: str) -> Any:
    global _loads
    tesserocr = _module()
    t0 = time.monotonic()
    try:
        if languages == OSD:
            api = tesserocr.PyTessBaseAPI(
                path=tessdata, lang=OSD, psm=tesserocr.PSM.OSD_ONLY, init=True
            )
        else:
            api = tesserocr.PyTessBaseAPI(
                path=tessdata, lang=languages, psm=tesserocr.PSM.AUTO, init=True
            )
    except RuntimeError as exc:
        raise OcrConfigError(
            f"tesseract cannot load the languages {languages!r} from {tessdata}: {exc}"
        ) from None
    with _lock:
        _loads += 1
        total = _loads
    log.get_logger(component="ocr").info(
        "ocr.engine_loaded",
        languages=languages,
        tessdata=tessdata,
        seconds=round(time.monotonic() - t0, 3),
        loads=total,
    )
    return api


@contextlib.contextmanager
def engine(tessdata: str, languages: str) -> Iterator[Any]:
    """A warm engine for ``languages`` ("deu+eng", or "osd"), this thread's alone until
    the block ends; made (models loaded) only when none is idle."""
    key = (tessdata, languages)
    with _lock:
        idle = _idle.setdefault(key, [])
        api = idle.pop() if idle else None
    if api is None:
        api = _new(tessdata, languages)
    broken = False
    try:
        yield api
    except BaseException:
        # A page that failed half-way may leave the engine in any state: not kept.
        broken = True
        raise
    finally:
        if broken:
            with contextlib.suppress(Exception):
                api.End()
        else:
            with contextlib.suppress(Exception):
                api.Clear()  # the page's image and results, not the models
            with _lock:
                keep = _idle.setdefault(key, [])
                if len(keep) < MAX_IDLE_PER_KEY:
                    keep.append(api)
                    api = None
            if api is not None:
                with contextlib.suppress(Exception):
                    api.End()
