"""Small real files of each archivable type, made on the fly (no binary blobs in git).

Used by ``make demo``, the benchmarks and the tests.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path


def pdf_bytes(text: str = "hello", *, pad_to: int = 0, seed: int = 0) -> bytes:
    """A minimal valid one-page PDF; ``seed`` makes distinct content, ``pad_to`` a size."""
    content = f"BT /F1 12 Tf 72 720 Td ({text} {seed}) Tj ET".encode()
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    if pad_to > len(out) + 200:
        # A comment block keeps the PDF valid while reaching a realistic scan size.
        filler = os.urandom((pad_to - len(out) - 200) // 2).hex().encode()
        out += b"%" + filler + b"\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


def png_bytes(seed: int = 0) -> bytes:
    raw = b"".join(b"\x00" + bytes([(seed + x) % 256 for x in range(8)]) for _ in range(8))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
