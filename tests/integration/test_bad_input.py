"""Bad input in one batch: each refused with a clear log line, nothing archived, rest ingested."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ingestd.db.database import Database
from tests.conftest import Env, run_cli
from tests.fixtures.files import pdf_bytes, write

LIMIT = 64 * 1024


def _log_lines(stderr: str) -> list[dict[str, object]]:
    out = []
    for line in stderr.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def test_bad_files_are_refused_and_the_rest_ingested(
    make_env: object, db: Database, tenant: str
) -> None:
    """Symlink, FIFO, empty, oversize, ELF-as-PDF and bad names are refused; good files pass."""
    env: Env = make_env(intake={"max_file_size": LIMIT})  # type: ignore[operator]
    inbox = env.root / "inbox"
    inbox.mkdir()
    good1 = write(inbox / "Rechnung.pdf", pdf_bytes(seed=1))
    bad: dict[str, Path] = {}
    bad["symlink"] = inbox / "passwd.pdf"
    os.symlink("/etc/passwd", bad["symlink"])
    bad["not_regular"] = inbox / "pipe.pdf"
    os.mkfifo(bad["not_regular"])
    bad["empty"] = write(inbox / "empty.pdf", b"")
    over = pdf_bytes(seed=2, pad_to=LIMIT + 1)
    over += b"%" * (LIMIT + 1 - len(over))
    assert len(over) == LIMIT + 1
    bad["too_large"] = write(inbox / "big.pdf", over)
    bad["bad_type"] = write(inbox / "invoice.pdf", b"\x7fELF\x02\x01\x01" + os.urandom(2000))
    nonutf8 = os.fsdecode(b"Rechnung-\xff\xfe.pdf")
    bad["bad_filename:utf8"] = write(inbox / nonutf8, pdf_bytes(seed=3))
    long_name = "a" * 251 + ".pdf"
    assert len(long_name.encode()) == 255
    bad["bad_filename:long"] = write(inbox / long_name, pdf_bytes(seed=4))
    bad["bad_filename:newline"] = write(inbox / "evil\nname.pdf", pdf_bytes(seed=5))
    good2 = write(inbox / "Vertrag.pdf", pdf_bytes(seed=6))

    files = [good1, *bad.values(), good2]
    proc = run_cli(env, "ingest", "--tenant", tenant, "--json", *map(str, files))
    assert proc.returncode == 1, proc.stderr  # ExitCode.refused: some files were refused
    report = json.loads(proc.stdout)
    outcomes = [r["outcome"] for r in report]
    assert outcomes[0] == outcomes[-1] == "ingested"
    for key, entry in zip(bad, report[1:-1], strict=True):
        assert entry["outcome"] == "refused", (key, entry)
        assert entry["reason"] == key.split(":")[0], (key, entry)
        assert entry["detail"], key

    # Every refusal has a log line with tenant, file name and reason.
    refusals = [e for e in _log_lines(proc.stderr) if e.get("event") == "intake.refused"]
    assert len(refusals) == len(bad)
    for e in refusals:
        assert e["tenant"] == tenant and e["filename"] and e["reason"] and e["detail"]
    # The newline in a name is escaped inside its JSON line: it cannot forge a second line.
    assert any("\n" in str(e["filename"]) for e in refusals)
    assert all(line.startswith("{") for line in proc.stderr.splitlines())

    # Nothing of the bad files was archived; they are all still where they were.
    with db.transaction() as tx:
        docs = tx.raw("SELECT original_filename FROM documents ORDER BY id")
    assert [d["original_filename"] for d in docs] == ["Rechnung.pdf", "Vertrag.pdf"]
    archived = [p for p in env.config.paths.archive_dir.rglob("*") if p.is_file()]
    assert len(archived) == 2
    for path in bad.values():
        assert os.path.lexists(path)
    assert not good1.exists() and not good2.exists()
    assert Path("/etc/passwd").exists()


def test_hardlink_is_refused(env: Env, db: Database, tenant: str) -> None:
    """A file with a second hard link is refused (it may point at a file we must not read)."""
    target = write(env.root / "secret.pdf", pdf_bytes(seed=11))
    link = env.root / "inbox" / "looks-harmless.pdf"
    link.parent.mkdir()
    os.link(target, link)
    proc = run_cli(env, "ingest", "--tenant", tenant, "--json", str(link))
    report = json.loads(proc.stdout)
    assert report[0]["reason"] == "hardlink"
    assert link.exists() and target.exists()


def test_polyglots_with_a_pdf_header_are_refused_with_their_real_type(
    env: Env, db: Database, tenant: str
) -> None:
    """A ZIP or ELF file with '%PDF-' in its first KiB is refused as ZIP/ELF, not archived."""
    inbox = env.root / "inbox"
    inbox.mkdir()
    pdf = pdf_bytes(seed=21)
    zip_polyglot = write(inbox / "Scan_0001.pdf", b"PK\x03\x04" + bytes(60) + pdf)
    elf_polyglot = write(inbox / "Scan_0002.pdf", b"\x7fELF\x02\x01\x01" + bytes(100) + pdf)
    proc = run_cli(
        env, "ingest", "--tenant", tenant, "--json", str(zip_polyglot), str(elf_polyglot)
    )
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert [r["reason"] for r in report] == ["bad_type", "bad_type"]
    assert "ZIP archive" in report[0]["detail"]
    assert "ELF executable" in report[1]["detail"]
    with db.transaction() as tx:
        assert tx.raw("SELECT count(*) AS n FROM documents")[0]["n"] == 0
    assert zip_polyglot.exists() and elf_polyglot.exists()
