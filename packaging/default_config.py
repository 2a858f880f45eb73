"""Write the packaged /etc/ingestd/ingestd.toml from config/ingestd.example.toml.

The example documents every key; the package ships the same file with its comments, so
an administrator reads the documentation where the settings are, but:

- ``[database] url`` is set to the local PostgreSQL server over its Unix socket with peer
  authentication (``postgresql:///ingestd``, no password);
- every array-of-tables entry (``[[taxonomy]]``, ``[[workflows]]`` with its sub-tables,
  and ``[[watch]]`` / ``[[sftp.accounts]]`` should the example ever make one active) is
  commented out: they name a tenant, folders and a webhook secret file that do not exist on
  a new machine.

The result is parsed again and checked (production paths, the URL, no such tables), so a
change of the example that this script does not understand fails the build instead of
shipping something else. ``ingestd check-config`` is run on it by build-deb.sh.

Usage: default_config.py EXAMPLE OUTPUT
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

URL = "postgresql:///ingestd"
PATHS = {
    "state_dir": "/var/lib/ingestd",
    "archive": "/var/lib/ingestd/archive",
    "derived": "/var/lib/ingestd/derived",
    "spool": "/var/spool/ingestd",
}
# Tables whose entries refer to things that exist only on the administrator's machine.
EXAMPLE_ONLY = ("taxonomy", "workflows", "watch", "sftp.accounts", "smtp", "notify")

HEADER = """\
# /etc/ingestd/ingestd.toml - installed by the ingestd package (a dpkg conffile: your
# changes are kept on upgrades). It is config/ingestd.example.toml with the database set
# to the local PostgreSQL (peer authentication as the system user ingestd) and the
# example's taxonomy rules, workflow and notification sinks commented out. The full
# example is /usr/share/doc/ingestd/ingestd.example.toml. After editing: `ingestd
# check-config`.

"""

_TABLE = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\-]+)\s*\]\]?\s*(#.*)?$")
_URL_LINE = re.compile(r'^#\s*url\s*=\s*"postgresql:///ingestd"\s*$')


def _example_only(table: str) -> bool:
    return any(table == t or table.startswith(t + ".") for t in EXAMPLE_ONLY)


def convert(text: str) -> str:
    out: list[str] = []
    table = ""
    urls = 0
    for line in text.splitlines():
        m = _TABLE.match(line)
        if m:
            table = m.group(1)
        if table == "database" and _URL_LINE.match(line.strip()):
            out.append(f'url = "{URL}"')
            urls += 1
            continue
        if _example_only(table) and line.strip() and not line.lstrip().startswith("#"):
            out.append("# " + line)
            continue
        out.append(line)
    if urls != 1:
        raise SystemExit(
            f'default_config: expected one line `# url = "{URL}"` in [database], found {urls}'
        )
    return HEADER + "\n".join(out) + "\n"


def check(text: str) -> None:
    data = tomllib.loads(text)
    problems = []
    if data.get("database", {}).get("url") != URL:
        problems.append(f"database.url is not {URL!r}")
    for key, want in PATHS.items():
        got = data.get("paths", {}).get(key)
        if got != want:
            problems.append(f"paths.{key} is {got!r}, not {want!r}")
    for name in EXAMPLE_ONLY:
        node: object = data
        for part in name.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node:
            problems.append(f"[[{name}]] is still active")
    if problems:
        raise SystemExit("default_config: " + "; ".join(problems))


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    text = convert(Path(argv[1]).read_text(encoding="utf-8"))
    check(text)
    Path(argv[2]).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
