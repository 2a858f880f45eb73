"""The child that draws one page preview (see ``ingestd.web.previews``):

    python -m ingestd.web.render_page PDF PAGE WIDTH OUT.png MAX_BYTES

It limits its own address space to MAX_BYTES before opening the PDF, draws page PAGE
(1-based) WIDTH pixels wide with pdfium and writes OUT.png. Exit 0, or 1 with the reason
as the last line on stderr. It reads nothing but PDF and writes nothing but OUT.png.
"""

from __future__ import annotations

import resource
import sys

MAX_PIXELS = 40_000_000  # a page drawn WIDTH wide but absurdly tall is refused


def main(argv: list[str]) -> int:
    pdf, page, width, out, limit = argv[0], int(argv[1]), int(argv[2]), argv[3], int(argv[4])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import pypdfium2 as pdfium  # type: ignore[import-untyped]

    doc = pdfium.PdfDocument(pdf)
    try:
        if not 1 <= page <= len(doc):
            print(f"the PDF has {len(doc)} page(s), not {page}", file=sys.stderr)
            return 1
        p = doc[page - 1]
        try:
            w, h = p.get_width(), p.get_height()  # points, /Rotate applied
            if w <= 0 or h <= 0 or width * width * h / w > MAX_PIXELS:
                print(f"page {page} is {w:.0f}x{h:.0f} pt: too large to draw", file=sys.stderr)
                return 1
            image = p.render(scale=width / w).to_pil()
        finally:
            p.close()
    finally:
        doc.close()
    if image.width != width:  # pdfium rounds: the width is a promise, the height follows
        image = image.resize((width, max(1, round(image.height * width / image.width))))
    image.save(out, "PNG")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as exc:  # the reason, one line, for the console's log
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
