"""`ingestd ... --help` explains every sub-command and every option (issue #20)."""

from __future__ import annotations

import argparse

from ingestd.cli.main import build_parser, subparsers


def _without_help(parser: argparse.ArgumentParser) -> list[str]:
    missing: list[str] = []
    for path, p in subparsers(parser):
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue  # argparse's own -h
            if isinstance(action, argparse._SubParsersAction):
                helped = {c.dest for c in action._choices_actions if c.help}
                seen: set[int] = set()
                for name, sub in action.choices.items():  # a name before its aliases
                    if id(sub) not in seen and name not in helped:
                        missing.append(f"{path} {name} (sub-command)")
                    seen.add(id(sub))
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                name = "/".join(action.option_strings) or str(action.metavar or action.dest)
                missing.append(f"{path} {name}")
    return missing


def test_every_subcommand_and_option_has_help() -> None:
    """Every sub-command and option of the ingestd parser tree has a help text (not -h)."""
    missing = _without_help(build_parser())
    assert not missing, "no help text: " + ", ".join(missing)


def test_the_walk_finds_what_lacks_help() -> None:
    """The check itself names a sub-command and an option given without help."""
    p = argparse.ArgumentParser(prog="ingestd")
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("bare")
    s.add_argument("--flag")
    sub.add_parser("fine", help="has help").add_argument("x", help="has help")
    assert _without_help(p) == ["ingestd bare (sub-command)", "ingestd bare --flag"]
