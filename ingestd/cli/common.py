"""What every command module shares: loading the config, printing JSON and names."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from ingestd import log
from ingestd.config.load import load_config
from ingestd.config.settings import Config

Handler = Callable[[argparse.Namespace], int]


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str, ensure_ascii=False)
    sys.stdout.write("\n")


def shown(text: str) -> str:
    """A path or name as it can be printed: undecodable bytes and controls escaped."""
    if text.isprintable():
        return text
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def load(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    log.configure(config.log.level, config.log.format)
    return config
