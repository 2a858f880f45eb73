"""`make demo`: the appliance on an embedded private PostgreSQL with sample scans.

Everything lives under .demo/ in the checkout; run it again to start over.
Each step is a real `ingestd` command, printed before it runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / ".demo"
BIN = Path(sys.executable).parent / "ingestd"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [str(BIN), "--config", str(DEMO / "ingestd.toml"), *args]
    print(f"\n$ ingestd {' '.join(args)}", flush=True)
    proc = subprocess.run(cmd, text=True, capture_output=True)
    print(proc.stdout, end="")
    if proc.returncode != 0 and check:
        print(proc.stderr, file=sys.stderr)
        raise SystemExit(f"demo step failed with exit code {proc.returncode}")
    return proc


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from ingestd.samples import pdf_bytes, png_bytes

    if DEMO.exists():
        state = DEMO / "state" / "pgdata"
        if state.exists():
            subprocess.run(
                [str(BIN), "--config", str(DEMO / "ingestd.toml"), "status"],
                capture_output=True,
                check=False,
            )
        shutil.rmtree(DEMO)
    DEMO.mkdir()
    # The embedded server runs unprivileged when we are root: it must reach its dir.
    for p in (DEMO, *DEMO.parents):
        if os.geteuid() == 0 and not p.stat().st_mode & 0o001:
            print(f"note: making {p} searchable (o+x) for the embedded PostgreSQL user")
            p.chmod(p.stat().st_mode | 0o001)
    (DEMO / "ingestd.toml").write_text(
        "# demo config: embedded database, everything under .demo/\n"
        '[paths]\nstate_dir = "state"\narchive = "archive"\nderived = "derived"\n'
        'spool = "spool"\n\n[log]\nformat = "console"\nlevel = "warning"\n'
    )
    inbox = DEMO / "inbox"
    inbox.mkdir()
    samples = {
        "2026-11-03 Rechnung Telekom.pdf": pdf_bytes("Rechnung Telekom", seed=1),
        "Scan_0001.pdf": pdf_bytes("Betreff: Kuendigung Mobilfunkvertrag", seed=2),
        "BRN3C2AF4123456_000123.pdf": pdf_bytes("Lieferschein", seed=3),
        "Whiteboard.png": png_bytes(seed=4),
        "invoice.pdf": b"\x7fELF\x02\x01\x01" + b"\0" * 64,  # an executable in disguise
        "copy of Rechnung.pdf": pdf_bytes("Rechnung Telekom", seed=1),  # same bytes again
    }
    for name, data in samples.items():
        (inbox / name).write_bytes(data)

    sh("check-config")
    sh("migrate")
    sh("tenant", "create", "acme")
    files = [str(inbox / n) for n in samples]
    sh("ingest", "--tenant", "acme", *files, check=False)
    print("\nleft in the inbox (refused, nothing lost):", sorted(p.name for p in inbox.iterdir()))
    sh("tenant", "list")
    sh("status")
    sh("verify")
    print("\narchive:")
    for p in sorted((DEMO / "archive").rglob("*.*")):
        print(f"  {oct(p.stat().st_mode & 0o777)}  {p.relative_to(DEMO)}")
    print("\nThe demo lives in .demo/ (config: .demo/ingestd.toml). `make demo` starts over.")


if __name__ == "__main__":
    main()
