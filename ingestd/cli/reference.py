"""config-reference: every config key with its type, default and description (Markdown)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ingestd.errors import ExitCode


def cmd_config_reference(args: argparse.Namespace) -> int:
    from ingestd.config.reference import render

    text = render()
    if args.output is None:
        sys.stdout.write(text)
        return ExitCode.ok
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"ingestd: {args.output}: cannot write: {exc.strerror}", file=sys.stderr)
        return ExitCode.usage
    return ExitCode.ok


def add_parser(sub: Any) -> None:
    """config-reference (no --config: it reads no config file)."""
    s = sub.add_parser(
        "config-reference",
        help="print the configuration reference (every key: type, default, description)",
        description="Print every key of the config schema with its type, default and "
        "description, as Markdown (docs/configuration.md is this output). Reads no "
        "config file.",
    )
    s.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the Markdown to FILE instead of stdout (e.g. --output docs/configuration.md)",
    )
    s.set_defaults(func=cmd_config_reference)
