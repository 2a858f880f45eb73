"""The README's exit-code table is the ExitCode enum: every code documented, none invented."""

from __future__ import annotations

import re
from pathlib import Path

from ingestd.errors import ExitCode

README = Path(__file__).resolve().parents[2] / "README.md"
# Codes main() returns that are not errors of ours: Ctrl-C, and stdout closed (SIGPIPE).
SIGNAL_CODES = {130, 141}


def _documented() -> dict[int, str]:
    """code -> meaning, from the table under "## Exit codes"."""
    text = README.read_text()
    section = text.split("\n## Exit codes\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|", section, flags=re.MULTILINE)
    codes = [int(code) for code, _ in rows]
    assert len(codes) == len(set(codes)), f"a code listed twice: {codes}"
    return {int(code): meaning for code, meaning in rows}


def test_readme_table_lists_exactly_the_exit_codes() -> None:
    """Each ExitCode value has a README row, and each README row below 128 is an ExitCode."""
    documented = _documented()
    ours = {code for code in documented if code < 128}
    assert ours == {int(code) for code in ExitCode}
    assert set(documented) - ours == SIGNAL_CODES


def test_no_exit_code_is_1_but_refused() -> None:
    """1 is "some files were refused" only: the internal error has a code of its own."""
    assert ExitCode(1) is ExitCode.refused
    assert ExitCode.internal == 15 and "internal error" in _documented()[15]
    assert "already running" in _documented()[ExitCode.already_running]
    assert "address" in _documented()[ExitCode.address_in_use]
