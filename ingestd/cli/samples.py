"""``ingestd sample-scan FILE``: a scanned-looking letter to try an upload with;
``ingestd sample-einvoice FILE``: an e-invoice (XRechnung UBL or CII, ZUGFeRD PDF).

The first hour with a new appliance (README, Getting started) needs a scan before a
scanner is set up. This writes an image-only A4 PDF (no text layer, as a scanner sends
it) of a German utility bill, so OCR, title, date and search have something to find.
``--number`` makes each file different: intake skips an identical file as a duplicate.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ingestd.errors import ExitCode


def cmd_sample_scan(args: argparse.Namespace) -> int:
    from ingestd.demo.scans import image_pdf, letter_pages

    path: Path = args.file
    if path.exists() and not args.force:
        print(f"{path} exists; --force replaces it")
        return ExitCode.usage
    image_pdf(path, letter_pages(args.pages, first=args.number))
    print(f"{path}: {args.pages} page(s), invoice number 2024-{args.number:04d}")
    return ExitCode.ok


def cmd_sample_einvoice(args: argparse.Namespace) -> int:
    from ingestd.demo import einvoices

    path: Path = args.file
    if path.exists() and not args.force:
        print(f"{path} exists; --force replaces it")
        return ExitCode.usage
    number = f"RE-2026-{args.number:04d}"
    if args.kind == "zugferd":
        inv = einvoices.SampleInvoice(number=number, profile=einvoices.EN16931)
        data = einvoices.facturx_pdf(inv)
    else:
        inv = einvoices.SampleInvoice(number=number)
        data = einvoices.ubl_xml(inv) if args.kind == "xrechnung-ubl" else einvoices.cii_xml(inv)
    einvoices.write(path, data)
    print(f"{path}: {args.kind}, invoice {number} of {inv.seller.name}, {inv.gross} EUR")
    return ExitCode.ok


def add_parser(sub: Any) -> None:
    s = sub.add_parser(
        "sample-scan",
        help="write a scanned-looking PDF (an image, no text) to try uploads with",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("file", type=Path, help="the PDF to write")
    s.add_argument("--number", type=int, default=1, help="invoice number printed on it (default 1)")
    s.add_argument(
        "--pages",
        type=int,
        default=1,
        choices=range(1, 21),
        metavar="1..20",
        help="pages (default 1)",
    )
    s.add_argument("--force", action="store_true", help="replace FILE if it exists")
    s.set_defaults(func=cmd_sample_scan)
    e = sub.add_parser(
        "sample-einvoice",
        help="write an e-invoice (XRechnung as UBL or CII XML, or a ZUGFeRD PDF) to try with",
    )
    e.add_argument("file", type=Path, help="the file to write (.xml, or .pdf for zugferd)")
    e.add_argument(
        "--kind",
        choices=("xrechnung-ubl", "xrechnung-cii", "zugferd"),
        default="xrechnung-ubl",
        help="what to write (default %(default)s)",
    )
    e.add_argument("--number", type=int, default=4711, help="invoice number (default 4711)")
    e.add_argument("--force", action="store_true", help="replace FILE if it exists")
    e.set_defaults(func=cmd_sample_einvoice)
