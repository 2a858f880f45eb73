"""`make demo`: the appliance on an embedded private PostgreSQL with sample scans.

Everything lives under .demo/ in the checkout; run it again to start over.
Each step is a real `ingestd` command, printed before it runs.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

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


def sftp_demo(port: int, scan: Any) -> None:
    """A scanner's upload with the real OpenSSH sftp client: date folders, temp name."""
    scans = DEMO / "scanner"
    scans.mkdir()
    (scans / "Scan_0002.pdf").write_bytes(
        scan(
            "Dachdeckerei Weber",
            "Datum: 12.11.2026",
            "Betreff: Angebot Dachreparatur",
            "Sehr geehrte Frau Schmidt,",
            "wir bieten Ihnen die Reparatur an.",
        )
    )
    (scans / "BRN3C2AF4123456_000124.pdf").write_bytes(
        scan("Lieferschein 0815", "Lieferdatum 2026-11-18", "Papier A4, 10 Kartons")
    )
    batch = DEMO / "scanner.batch"
    batch.write_text(
        "ls\n"
        "mkdir 2026\n"
        "mkdir 2026/11\n"
        "put BRN3C2AF4123456_000124.pdf 2026/11/BRN3C2AF4123456_000124.pdf\n"
        "put Scan_0002.pdf Scan_0002.pdf.part\n"
        "rename Scan_0002.pdf.part Scan_0002.pdf\n"
    )
    cmd = [
        "sftp",
        "-b",
        str(batch),
        "-P",
        str(port),
        "-i",
        str(DEMO / "scanner_key"),
        "-o",
        "StrictHostKeyChecking=accept-new",
        "-o",
        f"UserKnownHostsFile={DEMO / 'known_hosts'}",
        "-o",
        "IdentitiesOnly=yes",
        "scanner-2og@127.0.0.1",
    ]
    print(f"\n$ sftp -b scanner.batch -P {port} -i scanner_key scanner-2og@127.0.0.1")
    for line in batch.read_text().splitlines():
        print(f"  sftp> {line}")
    proc = subprocess.run(
        cmd, cwd=scans, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr, file=sys.stderr)
        raise SystemExit("demo: the sftp upload failed; see .demo/serve.log")
    print("  uploaded (every CLOSE was answered after the file was fsynced into the spool)")


def daemon_demo(hot: Path, scan: Any, port: int) -> None:
    """Run the real daemon, upload over SFTP and drop scans into a hot folder."""
    from ingestd.demo import einvoices

    print(
        "\n$ ingestd serve   (in the background; SFTP on 127.0.0.1:"
        f"{port}, hot folder .demo/hot/acme)"
    )
    log_path = DEMO / "serve.log"
    with open(log_path, "wb") as log_file:
        daemon = subprocess.Popen(
            [str(BIN), "--config", str(DEMO / "ingestd.toml"), "serve"],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait(lambda: b"daemon.ready" in log_path.read_bytes(), 60)
            sh("hostkeys")
            sftp_demo(port, scan)
            (hot / "Buchhaltung" / "2026").mkdir(parents=True)
            drops = {
                "Buchhaltung/2026/2026-11-20 Rechnung Stadtwerke.pdf": scan(
                    "Stadtwerke Musterstadt", "Rechnung Strom Oktober", "Betrag 84,20 EUR"
                ),
                "Scan_20261124_101500.pdf": scan(
                    "Telekom Deutschland GmbH",
                    "Bonn, den 24.11.2026",
                    "Betreff: Mahnung",
                    "Bitte zahlen Sie die offene Rechnung.",
                ),
                "Vertrag Hausmeisterdienst.pdf.part": scan(
                    "Vertrag Hausmeisterdienst", "zwischen Hausverwaltung und Firma Meyer"
                ),
                # E-invoices for accounting: an XRechnung (UBL XML) and a ZUGFeRD PDF.
                "Buchhaltung/2026/xrechnung_RE-2026-0815.xml": einvoices.ubl_xml(
                    einvoices.SampleInvoice(number="RE-2026-0815")
                ),
                "Buchhaltung/2026/ZUGFeRD Rechnung Stadtwerke.pdf": einvoices.facturx_pdf(
                    einvoices.SampleInvoice(number="RE-2026-0816", profile=einvoices.EN16931)
                ),
                "~$Entwurf.pdf": b"office lock file",
                "malware.pdf": b"MZ\x90\x00" + b"\0" * 100,
            }
            for rel, data in drops.items():
                (hot / rel).write_bytes(data)
                print(f"  dropped {rel}")
            part = hot / "Vertrag Hausmeisterdienst.pdf.part"
            part.rename(part.with_suffix(""))
            print("  renamed Vertrag Hausmeisterdienst.pdf.part -> .pdf (upload finished)")
            stapel = drop_batch(hot.parent / "stapel")
            _wait(lambda: not list(hot.rglob("*.xml")), 60)
            _wait(lambda: not list(hot.rglob("*.pdf")) or _only_ignored(hot), 60)
            _wait(lambda: not stapel.exists(), 60)
            _wait(lambda: not any((DEMO / "spool" / "queue").glob("*.data")), 60)
            workers_demo()
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
    left = sorted(str(p.relative_to(hot)) for p in hot.rglob("*") if p.is_file())
    print(f"  left in the hot folder (ignored names): {left}")
    for note in sorted((DEMO / "failed").rglob("*.error.txt")):
        print(f"  refused -> {note.relative_to(DEMO)}:")
        for line in note.read_text().splitlines():
            print(f"      {line}")


def drop_batch(folder: Path) -> Path:
    """A batch scan: three letters with a PATCH-T separator sheet between each two (and
    an ASN sticker on the second letter), as one PDF of JPEG pages."""
    from ingestd.config.split import Symbology
    from ingestd.demo.batches import A6, Kind, Look, PrintedCode, Side, letter_lines, write_pdf

    sep = Side(Kind.separator, codes=(PrintedCode(Symbology.code39, "PATCHT", module=4),))
    asn = PrintedCode(Symbology.code128, "ASN00042", module=3, at=(0.75, 0.9))
    sides = [
        Side(Kind.letter, lines=letter_lines(2)[:7]),
        Side(Kind.letter, lines=letter_lines(2, 2)[:7]),
        sep,
        Side(Kind.letter, lines=letter_lines(3)[:7], codes=(asn,)),
        sep,
        Side(Kind.letter, lines=letter_lines(4)[:7]),
    ]
    path = write_pdf(folder / "Stapel_0001.pdf", sides, Look(size=A6))
    print(f"  dropped stapel/{path.name} (a batch: 6 pages, 2 separator sheets)")
    return path


def batch_demo() -> None:
    """The batch and its children: each letter a document with its own title."""
    from ingestd.config.load import load_config
    from ingestd.daemon.wiring import open_database

    config = load_config(DEMO / "ingestd.toml")
    with open_database(config) as db, db.transaction() as tx:
        rows = tx.raw("SELECT id FROM documents WHERE processing_status = 'split' ORDER BY id")
    for r in rows:
        sh("documents", "show", str(r["id"]))


def _only_ignored(hot: Path) -> bool:
    return all(p.name.startswith("~$") for p in hot.rglob("*.pdf"))


def workers_demo() -> None:
    """Two worker processes drain the queue: every document's analyze job ends done."""
    print("\n$ ingestd worker --drain   (two processes, as systemd's ingestd-worker@1/@2)")
    cmd = [str(BIN), "--config", str(DEMO / "ingestd.toml"), "worker", "--drain"]
    with open(DEMO / "worker.log", "wb") as log_file:
        procs = [subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT) for _ in range(2)]
        codes = [p.wait(timeout=300) for p in procs]
    if any(codes):
        raise SystemExit(f"demo: a worker exited with {codes}; see .demo/worker.log")
    import json

    done = [
        json.loads(line)
        for line in (DEMO / "worker.log").read_text().splitlines()
        if '"job.done"' in line
    ]
    print(
        f"  {len(done)} jobs done (OCR, title, date, taxonomy, workflows); each document's "
        "processing_status follows its job"
    )


def analysis_demo() -> None:
    """What analyze-document derived for each document."""
    from ingestd.config.load import load_config
    from ingestd.daemon.wiring import open_database

    print("\nwhat the workers derived (title, date, correspondent, tags, text):")
    config = load_config(DEMO / "ingestd.toml")
    with open_database(config) as db, db.transaction() as tx:
        rows = tx.raw(DERIVED)
    for r in rows:
        issued = r["issued_date"].isoformat() if r["issued_date"] else "-"
        print(f"  #{r['id']} {r['original_filename']}  [{r['job']}]")
        print(
            f"      title {r['title']!r}  date {issued}  correspondent "
            f"{r['correspondent'] or '-'}  tags {', '.join(r['tags']) or '-'}"
        )
        text = " ".join((r["text"] or "").split())[:90]
        print(f"      {r['pages'] or 0} page(s): {text!r}")


DERIVED = """
SELECT d.id, d.original_filename, d.title, d.issued_date, c.page_count AS pages,
       left(c.content, 400) AS text,
       (SELECT name FROM correspondents WHERE id = d.correspondent_id) AS correspondent,
       coalesce((SELECT array_agg(g.name ORDER BY g.name) FROM document_tags dt
                 JOIN tags g ON g.id = dt.tag_id WHERE dt.document_id = d.id), '{}') AS tags,
       (SELECT status FROM processing_jobs j WHERE j.document_id = d.id
        ORDER BY j.id DESC LIMIT 1) AS job
FROM documents d LEFT JOIN document_content c ON c.document_id = d.id ORDER BY d.id
"""


class _Hook(http.server.BaseHTTPRequestHandler):
    """The demo's webhook receiver: checks the signature of each event it gets."""

    secret = b""

    def do_POST(self) -> None:
        from worker.webhooks import verify_signature

        body = self.rfile.read(int(self.headers["Content-Length"]))
        ok = verify_signature(
            self.secret,
            self.headers["X-Ingestd-Timestamp"],
            body,
            self.headers["X-Ingestd-Signature"],
        )
        event = json.loads(body)
        print(
            f"  webhook received: {event['event']} workflow {event['workflow']!r} document "
            f"{event['document']['id']} {event['document']['filename']!r} "
            f"signature {'valid' if ok else 'INVALID'}"
        )
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def start_webhook_receiver(secret: bytes) -> tuple[str, http.server.ThreadingHTTPServer]:
    _Hook.secret = secret
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/hooks/ingestd", server


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(predicate: Any, timeout: float, what: str = "the daemon", log: str = "serve.log") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out waiting for {what}; see .demo/{log}")
        time.sleep(0.2)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from ingestd.demo.scans import A6, image_pdf, single_image

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
    hot = DEMO / "hot" / "acme"
    hot.mkdir(parents=True)
    (DEMO / "hot" / "stapel").mkdir()
    port = _free_port()
    secret = DEMO / "webhook.secret"
    secret.write_bytes(os.urandom(24).hex().encode())
    secret.chmod(0o600)
    hook_url, hook_server = start_webhook_receiver(secret.read_bytes())
    print(f"(a webhook receiver for the Buchhaltung workflow listens on {hook_url})")
    subprocess.run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "scanner-2og",
            "-f",
            str(DEMO / "scanner_key"),
        ],
        check=True,
    )
    pubkey = (DEMO / "scanner_key.pub").read_text().strip()
    print("\n$ ingestd account hash-password   (for scanners that only do passwords)")
    hashed = subprocess.run(
        [str(BIN), "account", "hash-password"],
        input="scanner-pw-1\n",
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    print(hashed)
    (DEMO / "ingestd.toml").write_text(
        "# demo config: embedded database, everything under .demo/\n"
        '[paths]\nstate_dir = "state"\narchive = "archive"\nderived = "derived"\n'
        'spool = "spool"\n\n[log]\nformat = "json"\nlevel = "info"\n\n'
        "[hotfolders]\nstable_seconds = 1.0\n\n"
        '[[watch]]\npath = "hot/acme"\ntenant = "acme"\ntags = ["Eingang"]\n'
        'subfolder_tags = true\nfailed = "failed/acme"\n\n'
        "# Batch scans: the feeder's stack of letters as one PDF, split on PATCH-T sheets.\n"
        '[[watch]]\npath = "hot/stapel"\ntenant = "acme"\ntags = ["Stapel"]\n'
        'failed = "failed/stapel"\n[watch.split]\nseparators = ["PATCHT"]\n'
        'asn_prefix = "ASN"\n\n'
        f'[sftp]\nlisten = "127.0.0.1:{port}"\n\n'
        '[[sftp.accounts]]\nusername = "scanner-2og"\ntenant = "acme"\n'
        f'password_hash = "{hashed}"\nauthorized_keys = ["{pubkey}"]\n'
        'tags = ["Scanner 2.OG"]\nsubfolder_tags = true\n\n'
        "[analysis]\njobs = 1\n\n"
        '[[taxonomy]]\ntenant = "acme"\nkind = "correspondent"\nname = "Telekom"\n'
        'algorithm = "fuzzy"\nmatch = "Telekom Deutschland"\n\n'
        '[[taxonomy]]\ntenant = "acme"\nkind = "tag"\nname = "Rechnung"\n'
        'algorithm = "any"\nmatch = "Rechnung Mahnung"\n\n'
        '[[workflows]]\ntenant = "acme"\nname = "buchhaltung"\n'
        '[workflows.when]\nsources = ["watch:*"]\nsubfolder = "Buchhaltung/*"\n'
        '[workflows.then]\nadd_tags = ["Buchhaltung"]\n'
        f'[workflows.then.webhook]\nurl = "{hook_url}"\nsecret_file = "{secret}"\n'
    )
    inbox = DEMO / "inbox"
    inbox.mkdir()

    def scan(*lines: str) -> bytes:
        """A one-page image-only scan (no text layer: OCR has to read it)."""
        path = image_pdf(DEMO / "tmp" / "scan.pdf", [list(lines)], size=A6)
        return path.read_bytes()

    telekom = scan(
        "Telekom Deutschland GmbH",
        "Rechnung Nr. 4711",
        "Datum: 15.10.2026",
        "Betreff: Ihre Rechnung Oktober",
    )
    whiteboard = single_image(
        DEMO / "tmp" / "wb.png", ["Sprint Planung", "Demo am Freitag"], "PNG", size=A6
    ).read_bytes()
    samples = {
        "2026-11-03 Rechnung Telekom.pdf": telekom,
        "Scan_0001.pdf": scan(
            "Stadtwerke Musterstadt",
            "Berlin, den 3. November 2026",
            "Betreff: Kündigung Mobilfunkvertrag",
            "Sehr geehrte Damen und Herren,",
        ),
        "BRN3C2AF4123456_000123.pdf": scan("Lieferschein 0815", "Papier A4, 10 Kartons"),
        "Whiteboard.png": whiteboard,
        "invoice.pdf": b"\x7fELF\x02\x01\x01" + b"\0" * 64,  # an executable in disguise
        "copy of Rechnung.pdf": telekom,  # same bytes again
    }
    for name, data in samples.items():
        (inbox / name).write_bytes(data)

    sh("check-config")
    sh("migrate")
    sh("tenant", "create", "acme", "--member", "admin@acme.example")
    sh("tenant", "list")
    print("  (a worker provisions it: directories, capability sets, members, search config)")
    sh("worker", "--drain")
    sh("tenant", "list")
    files = [str(inbox / n) for n in samples]
    sh("ingest", "--tenant", "acme", *files, check=False)
    print("\nleft in the inbox (refused, nothing lost):", sorted(p.name for p in inbox.iterdir()))
    daemon_demo(hot, scan, port)
    hook_server.shutdown()
    analysis_demo()
    sh("invoices", "list", "--tenant", "acme")
    batch_demo()
    sh("search", "--tenant", "acme", "Kündigung")
    sh("tenant", "list")
    sh("documents", "list")
    sh("jobs", "list", "--limit", "5")
    sh("status")
    sh("verify")
    print("\narchive:")
    for p in sorted((DEMO / "archive").rglob("*.*")):
        print(f"  {oct(p.stat().st_mode & 0o777)}  {p.relative_to(DEMO)}")
    web_demo()
    print("\nThe demo lives in .demo/ (config: .demo/ingestd.toml). `make demo` starts over.")


DEMO_PASSWORD = "demo-password"  # noqa: S105 (the demo's throwaway people)


def web_demo() -> None:
    """People and the web console: an owner and a mapped drive of acme, `ingestd web` on
    a free loopback port; at a terminal it serves until Ctrl-C."""
    for login, role in (("demo", "owner"), ("demo-drive", "webdav")):
        cmd = [str(BIN), "--config", str(DEMO / "ingestd.toml"), "user", "add", login,
               "--tenant", "acme", "--set", role, "--password-stdin", "--rounds", "10"]  # fmt: skip
        print(f"\n$ ingestd user add {login} --tenant acme --set {role} --password-stdin")
        proc = subprocess.run(cmd, input=DEMO_PASSWORD + "\n", text=True, capture_output=True)
        print(proc.stdout, end="")
        if proc.returncode != 0:
            raise SystemExit(f"demo: user add failed: {proc.stderr}")
    port = _free_port()
    with open(DEMO / "ingestd.toml", "a") as f:
        f.write(f'\n[web]\nlisten = "127.0.0.1:{port}"\n\n[metrics]\nweb_listen = "127.0.0.1:0"\n')
    url = f"http://127.0.0.1:{port}"
    print(f"\n$ ingestd web   (in the background; the console on {url})")
    log_path = DEMO / "web.log"
    with open(log_path, "wb") as log_file:
        web = subprocess.Popen(
            [str(BIN), "--config", str(DEMO / "ingestd.toml"), "web"],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:

            def answers() -> bool:
                if web.poll() is not None:
                    raise SystemExit(f"demo: ingestd web exited; see {log_path}")
                try:
                    with urllib.request.urlopen(url + "/login", timeout=5) as r:  # noqa: S310
                        return bool(r.status == 200)
                except OSError:
                    return False

            _wait(answers, 120, "the console", "web.log")
            print(f"  the web console:  {url}/   log in as demo / {DEMO_PASSWORD} (owner of acme)")
            print(f"  the mapped drive: {url}/dav/acme/   as demo-drive / {DEMO_PASSWORD}")
            print(f"    e.g. curl -u demo-drive -X PROPFIND -H 'Depth: 1' {url}/dav/acme/")
            if sys.stdin.isatty():
                print("  serving until Ctrl-C")
                with contextlib.suppress(KeyboardInterrupt):
                    web.wait()
        finally:
            web.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                web.wait(30)


if __name__ == "__main__":
    main()
