"""What every command module shares: loading the config, printing JSON, names and tables,
and asking before a bulk action."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from ingestd import log
from ingestd.config.load import load_config
from ingestd.config.settings import Config
from ingestd.errors import ExitCode, IngestdError
from ingestd.textsafe import escaped

Handler = Callable[[argparse.Namespace], int]

# A bulk action over more items than this (`jobs retry --failed`, `documents analyze
# --all`) asks first: a y/N prompt at a terminal, else it needs --yes.
CONFIRM_ABOVE = 100

# Between two columns of a table: titles and tags have spaces of their own.
_GAP = "  "


def local_time(when: datetime.datetime | None, missing: str = "-") -> str:
    """A moment as every listing shows it: local time, to the second (``missing`` for
    none)."""
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S") if when else missing


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str, ensure_ascii=False)
    sys.stdout.write("\n")


def shown(text: str) -> str:
    """A path or name as it can be printed: undecodable bytes and controls escaped."""
    return escaped(text)  # the one rule for untrusted text (ingestd/textsafe.py)


def print_table(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    right: Collection[str] = (),
    indent: str = "",
) -> None:
    """``rows`` under ``header``, every column as wide as its widest cell: nothing is cut.
    Columns named in ``right`` (numbers) are right-aligned; the last one is not padded.
    Cells are printed as given (``shown`` what may hold controls)."""
    cells = [list(header)] + [[str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    last = len(header) - 1
    for row in cells:
        line = _GAP.join(
            cell.rjust(w) if header[i] in right else (cell if i == last else cell.ljust(w))
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        print(indent + line.rstrip())


class NotConfirmed(IngestdError):
    """A bulk action over more than CONFIRM_ABOVE items that nobody confirmed (no --yes,
    and no terminal to ask at): nothing was done."""

    exit_code = ExitCode.usage


class Declined(NotConfirmed):
    """Asked at the terminal, the operator did not answer yes: nothing was done."""

    exit_code = ExitCode.refused


def confirm(count: int, action: str, *, yes: bool) -> None:
    """Return if ``action`` (e.g. "retry 4,213 failed jobs") may go ahead: at most
    CONFIRM_ABOVE items, --yes, or y at the prompt when stdin is a terminal (the prompt
    goes to stderr: stdout stays --json's). Else NotConfirmed, before anything is done."""
    if count <= CONFIRM_ABOVE or yes:
        return
    if not sys.stdin.isatty():
        raise NotConfirmed(
            f"refusing to {action} without confirmation (more than {CONFIRM_ABOVE:,}): add --yes, "
            "or run it at a terminal to be asked; nothing was done"
        )
    sys.stderr.write(f"{action}? [y/N] ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise Declined("not confirmed; nothing was done")


def load(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    log.configure(config.log.level, config.log.format)
    return config
