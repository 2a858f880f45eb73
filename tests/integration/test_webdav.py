"""The read-only WebDAV mount (issue 31) through real clients: plain PROPFIND and GET,
Debian's rclone and cadaver. A `webdav` member lists and downloads the archive's bytes
(audited), every write method is refused with nothing changed, another tenant and the
members of other sets get nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from ingestd.passwords import hash_password
from ingestd.people import accounts
from tests.fixtures.web import PASSWORD, Console, ingest


@pytest.fixture
def dav(console: Console) -> Console:
    """dave may mount acme (the webdav set); anna (user) may not mount anything."""
    with console.db.transaction() as tx:
        accounts.add_member(tx, "dave", "acme", "webdav", hash_password(PASSWORD, rounds=4))
    return console


def _where(console: Console, name: str) -> str:
    """The document's folder in the tree: /dav/<tenant>/<yyyy>/<mm>/."""
    with console.db.transaction() as tx:
        row = tx.raw(
            "SELECT t.name, to_char(d.created_at AT TIME ZONE 'UTC', 'YYYY/MM') AS ym "
            "FROM documents d JOIN tenants t ON t.id = d.tenant_id WHERE d.id = %(i)s",
            {"i": console.docs[name]},
        )[0]
    return f"/dav/{row['name']}/{row['ym']}/"


def _propfind(console: Console, path: str, auth: tuple[str, str], depth: str = "1") -> Any:
    return httpx.request(
        "PROPFIND", console.url + path, auth=auth, headers={"Depth": depth}, timeout=60
    )


def test_propfind_lists_only_what_the_person_may_mount(dav: Console) -> None:
    """dave sees acme (and nothing of beta); the month folder holds the scan under its
    original name; beta's tree is 404; anna (user set) and a wrong password are 401."""
    folder = _where(dav, "Scan_0815.pdf")
    root = _propfind(dav, "/dav/", ("dave", PASSWORD))
    assert root.status_code == 207, root.text
    assert "/dav/acme/" in root.text and "beta" not in root.text
    listing = _propfind(dav, folder, ("dave", PASSWORD))
    assert listing.status_code == 207 and "Scan_0815.pdf" in listing.text
    assert _propfind(dav, "/dav/beta/", ("dave", PASSWORD)).status_code == 404
    assert _propfind(dav, "/dav/acme/../beta/", ("dave", PASSWORD)).status_code in (403, 404)
    assert _propfind(dav, "/dav/", ("anna", PASSWORD)).status_code == 401
    assert _propfind(dav, "/dav/", ("dave", "wrong password")).status_code == 401
    assert httpx.request("PROPFIND", dav.url + "/dav/", timeout=60).status_code == 401


def test_a_download_is_the_archive_s_bytes_and_audited(dav: Console) -> None:
    """GET of the file is the archived original (SHA-256), recorded as handed out to
    webdav by dave; nothing is left in the spool."""
    url = dav.url + _where(dav, "Scan_0815.pdf") + "Scan_0815.pdf"
    got = httpx.get(url, auth=("dave", PASSWORD), timeout=60)
    assert got.status_code == 200
    assert hashlib.sha256(got.content).hexdigest() == dav.shas["Scan_0815.pdf"]
    with dav.db.transaction() as tx:
        rows = tx.raw("SELECT body FROM audit_events WHERE kind = 'document.handed_out'")
    by = [json.loads(r["body"])["detail"] for r in rows]
    assert [(d["by"]["login"], d["to"]) for d in by] == [("dave", "webdav")]


def test_a_new_password_ends_the_old_one_on_the_mount_at_once(dav: Console) -> None:
    """The mount remembers a good password a minute (one bcrypt check a minute for a
    client that sends it with every request), but a new password set since voids that at
    the next request: the old one is 401 at once, the new one works."""
    assert _propfind(dav, "/dav/", ("dave", PASSWORD)).status_code == 207
    assert _propfind(dav, "/dav/", ("dave", PASSWORD)).status_code == 207  # remembered
    with dav.db.transaction() as tx:
        accounts.set_password(tx, "dave", hash_password("ein neues Passwort", rounds=4))
    assert _propfind(dav, "/dav/", ("dave", PASSWORD)).status_code == 401
    assert _propfind(dav, "/dav/", ("dave", "ein neues Passwort")).status_code == 207


def test_a_folder_read_again_shows_arrivals_and_the_trash_at_once(dav: Console) -> None:
    """The mount keeps a month's listing between requests, but a document that arrives or
    goes to the trash shows at the next request: a second scan of the same name appears
    as `` (#ID)``, and when the first goes to the trash the second takes the plain name."""
    folder = _where(dav, "Scan_0815.pdf")
    assert "Scan_0815.pdf" in _propfind(dav, folder, ("dave", PASSWORD)).text
    second, sha = ingest(dav.env, dav.db, "acme", "Scan_0815.pdf", seed=77)
    listing = _propfind(dav, folder, ("dave", PASSWORD)).text
    assert f"Scan_0815 (#{second}).pdf" in listing.replace("%20", " ").replace("%23", "#")
    with dav.db.transaction() as tx:
        tx.raw("UPDATE documents SET trashed_at = now() WHERE id = %(i)s",
               {"i": dav.docs["Scan_0815.pdf"]})  # fmt: skip
    listing = _propfind(dav, folder, ("dave", PASSWORD)).text
    assert f"(#{second})" not in listing.replace("%23", "#") and "Scan_0815.pdf" in listing
    got = httpx.get(dav.url + folder + "Scan_0815.pdf", auth=("dave", PASSWORD), timeout=60)
    assert got.status_code == 200 and hashlib.sha256(got.content).hexdigest() == sha


def test_the_server_root_answers_the_options_probe_of_windows(dav: Console) -> None:
    """Windows' WebDAV client (DavClnt, Microsoft-WebDAV-MiniRedir) asks ``OPTIONS /`` of
    the server before it maps ``/dav/<tenant>``, and gives up ("the network name cannot be
    found") on a 405 or a redirect to a login page: the root says it speaks WebDAV, as the
    mount does, and tells nothing else."""
    mount = httpx.request("OPTIONS", dav.url + "/dav/", auth=("dave", PASSWORD), timeout=60)
    assert mount.status_code == 200
    assert len(mount.headers.get_list("date")) == 1  # one Date: the server's, not WsgiDAV's too
    for agent in ("DavClnt", "Microsoft-WebDAV-MiniRedir/10.0.19045"):
        root = httpx.request("OPTIONS", dav.url + "/", headers={"User-Agent": agent}, timeout=60)
        assert root.status_code == 200 and root.content == b""
        assert root.headers["dav"] == mount.headers["dav"]
        assert root.headers["ms-author-via"] == "DAV"
        assert "set-cookie" not in root.headers
    assert httpx.get(dav.url + "/", timeout=60).status_code in (303, 307)  # the console


@pytest.mark.parametrize("method", ["PUT", "DELETE", "MKCOL", "MOVE", "COPY", "PROPPATCH", "LOCK"])
def test_every_write_method_is_refused_and_changes_nothing(dav: Console, method: str) -> None:
    """403 or 405 for each write method, on the file and on its folder; the archive and
    the documents are as they were."""
    folder = _where(dav, "Scan_0815.pdf")
    before = _state(dav)
    for path in (folder + "Scan_0815.pdf", folder + "new.pdf", folder):
        r = httpx.request(
            method,
            dav.url + path,
            auth=("dave", PASSWORD),
            headers={"Destination": dav.url + folder + "moved.pdf", "Overwrite": "T"},
            content=b"%PDF-1.4 not really\n" if method == "PUT" else None,
            timeout=60,
        )
        assert r.status_code in (403, 405), (method, path, r.status_code)
    assert _state(dav) == before


def _state(console: Console) -> Any:
    with console.db.transaction() as tx:
        docs = tx.raw("SELECT id, sha256, original_filename, title FROM documents ORDER BY id")
    files = sorted(
        (str(p.relative_to(console.env.root)), p.stat().st_size)
        for p in (console.env.root / "archive").rglob("*")
        if p.is_file()
    )
    return docs, files


def _rclone(console: Console, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    obscured = subprocess.run(
        ["rclone", "obscure", PASSWORD], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    env = {
        **os.environ,
        "RCLONE_CONFIG": str(tmp_path / "rclone.conf"),
        "RCLONE_CONFIG_ARCHIVE_TYPE": "webdav",
        "RCLONE_CONFIG_ARCHIVE_URL": console.url + "/dav/",
        "RCLONE_CONFIG_ARCHIVE_VENDOR": "other",
        "RCLONE_CONFIG_ARCHIVE_USER": "dave",
        "RCLONE_CONFIG_ARCHIVE_PASS": obscured,
    }
    return subprocess.run(
        ["rclone", *args], capture_output=True, text=True, timeout=180, env=env, check=False
    )


def test_rclone_lists_and_copies_and_cannot_write(dav: Console, tmp_path: Path) -> None:
    """rclone (Debian's) lists the tree recursively, copies the file (its bytes are the
    archive's) and fails to upload or delete."""
    listed = _rclone(dav, tmp_path, "lsf", "-R", "archive:")
    assert listed.returncode == 0, listed.stderr
    assert any(line.endswith("/Scan_0815.pdf") for line in listed.stdout.splitlines())
    assert "Beta_geheim" not in listed.stdout
    out = tmp_path / "copy"
    copied = _rclone(dav, tmp_path, "copy", "archive:acme", str(out))
    assert copied.returncode == 0, copied.stderr
    (got,) = [p for p in out.rglob("*.pdf")]
    assert hashlib.sha256(got.read_bytes()).hexdigest() == dav.shas["Scan_0815.pdf"]
    local = tmp_path / "mine.pdf"
    local.write_bytes(b"%PDF-1.4\n")
    folder = _where(dav, "Scan_0815.pdf").removeprefix("/dav/")
    assert _rclone(dav, tmp_path, "copyto", str(local), f"archive:{folder}mine.pdf").returncode != 0
    assert _rclone(dav, tmp_path, "deletefile", f"archive:{folder}Scan_0815.pdf").returncode != 0
    assert (
        httpx.get(
            dav.url + "/dav/" + folder + "Scan_0815.pdf", auth=("dave", PASSWORD), timeout=60
        ).status_code
        == 200
    )


def test_cadaver_browses_gets_and_is_refused_a_put(dav: Console, tmp_path: Path) -> None:
    """cadaver (Debian's) with the password in a .netrc: ls, get, and a put that fails."""
    word = "cadaver-Secret-1"  # a .netrc password has no spaces
    with dav.db.transaction() as tx:
        accounts.add_member(tx, "carl", "acme", "webdav", hash_password(word, rounds=4))
    home = tmp_path / "home"
    home.mkdir()
    netrc = home / ".netrc"
    netrc.write_text(f"machine 127.0.0.1 login carl password {word}\n")
    netrc.chmod(0o600)
    folder = _where(dav, "Scan_0815.pdf")
    (tmp_path / "up.pdf").write_bytes(b"%PDF-1.4\n")
    script = "ls\nget Scan_0815.pdf got.pdf\nput up.pdf\nquit\n"
    done = subprocess.run(
        ["cadaver", dav.url + folder],
        input=script,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(home)},
        check=False,
    )
    said = done.stdout + done.stderr
    assert "Scan_0815.pdf" in said, said
    got = tmp_path / "got.pdf"
    assert hashlib.sha256(got.read_bytes()).hexdigest() == dav.shas["Scan_0815.pdf"], said
    assert "failed" in said.lower() and ("405" in said or "403" in said), said


def test_the_tags_view_lists_a_tagged_document_and_names_never_clash(dav: Console) -> None:
    """/dav/acme/tags/<tag>/ holds the tagged document; two documents of one month with
    the same original name are both there, the later one as `name (#ID).pdf`."""
    from tests.fixtures.web import ingest

    doc = dav.docs["Scan_0815.pdf"]
    twin, _ = ingest(dav.env, dav.db, "acme", "Scan_0815.pdf", seed=77)
    with dav.db.transaction() as tx:
        tid = tx.raw("SELECT id FROM tenants WHERE name = 'acme'")[0]["id"]
        tag = tx.raw("INSERT INTO tags (tenant_id, name) VALUES (%(t)s, 'Rechnung') "
                     "RETURNING id", {"t": tid})[0]["id"]  # fmt: skip
        tx.raw("INSERT INTO document_tags (document_id, tag_id, tenant_id) "
               "VALUES (%(d)s, %(g)s, %(t)s)", {"d": doc, "g": tag, "t": tid})  # fmt: skip
    tags = _propfind(dav, "/dav/acme/tags/", ("dave", PASSWORD))
    assert tags.status_code == 207 and "/dav/acme/tags/Rechnung/" in tags.text
    tagged = _propfind(dav, "/dav/acme/tags/Rechnung/", ("dave", PASSWORD))
    assert "Scan_0815.pdf" in tagged.text and f"(#{twin})" not in tagged.text
    month = _propfind(dav, _where(dav, "Scan_0815.pdf"), ("dave", PASSWORD))
    assert "Scan_0815.pdf" in month.text and f"Scan_0815%20(%23{twin}).pdf" in month.text
