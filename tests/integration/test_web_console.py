"""The web console (issue 31) as a real `ingestd web` process on loopback, asked by a real
HTTP client: login with CSRF and a throttle, strict cookies and security headers, search
with a filter, a document's page and its download (the archive's SHA-256, audited), and
the tenant scope: another tenant's archive and documents are 404 on every route.
(The browser tests drive the same server with Debian's chromium.)"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from ingestd.db.database import Database
from ingestd.passwords import hash_password
from ingestd.people import accounts
from tests.fixtures.files import pdf_bytes
from tests.fixtures.scans import text_pdf
from tests.fixtures.web import PASSWORD, Console, csrf, ingest, metrics_url


def _entries(db: Database, kind: str) -> list[dict[str, Any]]:
    with db.transaction() as tx:
        rows = tx.raw(
            "SELECT tenant, document_id, body FROM audit_events WHERE kind = %(k)s "
            "ORDER BY chain, seq",
            {"k": kind},
        )
    return [{**r, "detail": json.loads(r["body"])["detail"]} for r in rows]


def test_every_page_has_the_security_headers_and_strict_cookies(console: Console) -> None:
    """A strict CSP without inline script, no framing, no sniffing; the session cookie is
    HttpOnly and SameSite=Strict (not Secure over plain loopback HTTP)."""
    with console.client() as c:
        r = c.get("/login")
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "secure" not in cookie
    assert "<script" not in r.text and not re.search(r"\son[a-z]+=", r.text)  # no inline code
    assert "server" not in r.headers


def test_login_needs_the_form_s_token_and_the_right_password(console: Console) -> None:
    """No token: 403 and no session. A wrong password: 401, said in the browser's
    language. The right one: the person's only archive."""
    with console.client() as c:
        c.get("/login")
        r = c.post("/login", data={"login": "anna", "password": PASSWORD})
        assert r.status_code == 403
        r = c.post("/login", data={"login": "anna", "password": PASSWORD, "csrf": "x" * 43})
        assert r.status_code == 403
        assert c.get("/t/acme/").status_code == 303  # still not logged in
    with console.client(headers={"accept-language": "de-DE,de;q=0.9,en;q=0.5"}) as c:
        r = c.post("/login", data={"login": "anna", "password": "wrong!", "csrf": csrf(c)})
        assert r.status_code == 401
        assert "Anmeldename oder Passwort ist falsch." in r.text
        assert '<html lang="de">' in r.text
    with console.login("ANNA") as c:  # a login matches in any case
        r = c.get("/")
        assert r.status_code == 303 and r.headers["location"] == "/t/acme/"
        page = c.get("/t/acme/")
        assert page.status_code == 200 and "anna" in page.text and ">user<" in page.text


def test_search_with_a_filter_a_document_and_its_download(console: Console) -> None:
    """The name finds the scan; an arrival filter after today drops it; its page is an
    audit entry; the download is the archive's bytes under the original name, audited."""
    doc = console.docs["Scan_0815.pdf"]
    with console.login("anna") as c:
        hits = c.get("/t/acme/", params={"q": "Scan_0815"})
        assert f'href="/t/acme/d/{doc}"' in hits.text
        assert "<title>acme · Search</title>" in hits.text  # the title holds only that
        later = c.get("/t/acme/", params={"q": "Scan_0815", "since": "2999-01-01"})
        assert f'href="/t/acme/d/{doc}"' not in later.text
        listed = c.get("/t/acme/", params={"name": "0815"})
        assert f'href="/t/acme/d/{doc}"' in listed.text
        assert c.get("/t/acme/", params={"since": "yesterday"}).status_code == 400
        page = c.get(f"/t/acme/d/{doc}")
        assert page.status_code == 200 and "Scan_0815.pdf" in page.text
        got = c.get(f"/t/acme/d/{doc}/original")
        assert got.status_code == 200
        assert hashlib.sha256(got.content).hexdigest() == console.shas["Scan_0815.pdf"]
        assert 'filename="Scan_0815.pdf"' in got.headers["content-disposition"]
        assert got.headers["content-disposition"].startswith("attachment")
        assert c.get(f"/t/acme/d/{doc}/searchable").status_code == 404  # not analysed yet
    viewed = _entries(console.db, "document.viewed")
    assert [(v["document_id"], v["detail"]["by"]["login"]) for v in viewed] == [(doc, "anna")]
    handed = _entries(console.db, "document.handed_out")
    assert [(h["detail"]["by"]["login"], h["detail"]["to"]) for h in handed] == [("anna", "web")]


def test_another_tenant_is_404_on_every_route(console: Console) -> None:
    """anna (acme) never learns that beta or its document exist: the archive, the
    document through beta's URL and through acme's, its downloads, odd names: all 404."""
    beta_doc = console.docs["Beta_geheim.pdf"]
    with console.login("anna") as c:
        for path in (
            "/t/beta/",
            f"/t/beta/d/{beta_doc}",
            f"/t/beta/d/{beta_doc}/original",
            f"/t/acme/d/{beta_doc}",
            f"/t/acme/d/{beta_doc}/original",
            f"/t/acme/d/{beta_doc}/searchable",
            "/t/nosuch/",
            "/t/ACME/",
            "/t/acme/d/-1",
            "/t/acme/d/99999999999999999999999",
        ):
            r = c.get(path)
            assert r.status_code == 404, path
            assert "Beta_geheim" not in r.text
        hits = c.get("/t/acme/", params={"q": "Beta_geheim"})
        assert f"/d/{beta_doc}" not in hits.text and "No documents match." in hits.text
    assert _entries(console.db, "document.handed_out") == []


def test_a_readonly_member_may_not_do_what_the_set_lacks_and_removal_counts_at_once(
    console: Console,
) -> None:
    """rita (readonly) searches and downloads; once her membership is removed, her next
    request is 404 without logging in again."""
    doc = console.docs["Scan_0815.pdf"]
    with console.login("rita") as c:
        assert c.get(f"/t/acme/d/{doc}/original").status_code == 200
        with console.db.transaction() as tx:
            accounts.remove(tx, "rita", tenant="acme")
        assert c.get("/t/acme/").status_code == 303  # the person is gone: logged out
    with console.login("anna") as c:
        with console.db.transaction() as tx:
            accounts.add_member(tx, "anna", "beta", "webdav")
        assert c.get("/t/beta/").status_code == 403  # a member, but webdav cannot search


def test_failed_logins_are_throttled_before_the_password_is_checked(console: Console) -> None:
    """After 3 failures for a login, the 4th attempt is 429 with Retry-After even with
    the right password; logout needs the token and ends the session."""
    with console.login("anna") as c:
        assert c.post("/logout", data={}).status_code == 403
        assert c.get("/t/acme/").status_code == 200
        assert c.post("/logout", data={"csrf": csrf(c, "/t/acme/")}).status_code == 303
        assert c.get("/t/acme/").status_code == 303
    with console.client() as c:
        for _ in range(3):
            r = c.post("/login", data={"login": "bert", "password": "nope", "csrf": csrf(c)})
            assert r.status_code == 401
        r = c.post("/login", data={"login": "bert", "password": PASSWORD, "csrf": csrf(c)})
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
        # The address counts too: another login from it waits as well.
        r = c.post("/login", data={"login": "anna", "password": PASSWORD, "csrf": csrf(c)})
        assert r.status_code == 429
    log = (console.env.root / "web.log").read_text()
    assert '"web.login_throttled"' in log and '"web.login_failed"' in log
    assert PASSWORD not in log


def test_the_session_key_is_the_service_user_s_alone(console: Console) -> None:
    """<state_dir>/web/session.key exists, 0600, and is not in any page or log."""
    key = console.env.root / "state" / "web" / "session.key"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    secret = key.read_text().strip()
    assert secret not in (console.env.root / "web.log").read_text()
    assert Path(key).parent.stat().st_mode & 0o077 == 0


def test_a_copied_session_ends_at_logout_and_at_a_new_password(console: Console) -> None:
    """The session is a signed cookie, yet a copy of it does not outlive the person's
    logout, nor a new password set with `ingestd user passwd`: both answer with the login
    page. A login afterwards works as before."""
    with console.login("anna") as c:
        assert c.get("/t/acme/").status_code == 200
        with console.client(cookies=dict(c.cookies)) as copy:
            assert copy.get("/t/acme/").status_code == 200
            token = csrf(c, "/t/acme/")
            assert c.post("/logout", data={"csrf": token}).status_code == 303
            r = copy.get("/t/acme/")
            assert r.status_code == 303 and r.headers["location"] == "/login"
    with console.login("anna") as c:
        assert c.get("/t/acme/").status_code == 200
        with console.db.transaction() as tx:
            accounts.set_password(tx, "anna", hash_password(PASSWORD, rounds=4))
        assert c.get("/t/acme/").status_code == 303
    with console.login("anna") as c:
        assert c.get("/t/acme/").status_code == 200


def test_a_user_uploads_and_edits_a_readonly_member_sees_no_control_and_is_refused(
    console: Console,
) -> None:
    """anna (user) uploads a PDF (archived, source web:anna) and a text file (refused,
    said on the page) and edits a title (audited from/to); rita (readonly) has no upload
    or edit control, and posting them anyway is 403 with nothing changed."""
    doc = console.docs["Scan_0815.pdf"]
    pdf = pdf_bytes(seed=7)
    with console.login("anna") as c:
        token = csrf(c, "/t/acme/")
        r = c.post(
            "/t/acme/upload",
            data={"csrf": token},
            files=[
                ("file", ("C:\\fakepath\\Brief vom Amt.pdf", pdf, "application/pdf")),
                ("file", ("notes.txt", b"not a scan\n", "text/plain")),
            ],
        )
        assert r.status_code == 200, r.text
        assert "Brief vom Amt.pdf" in r.text and "fakepath" not in r.text
        assert "archived" in r.text and "refused" in r.text
        new_id = int(re.search(r'href="/t/acme/d/(\d+)"', r.text).group(1))  # type: ignore[union-attr]
        assert (
            c.post(
                "/t/acme/upload", files=[("file", ("x.pdf", pdf, "application/pdf"))]
            ).status_code
            == 403
        )
        page = c.get(f"/t/acme/d/{doc}")
        assert f'action="/t/acme/d/{doc}/edit"' in page.text
        r = c.post(
            f"/t/acme/d/{doc}/edit",
            data={"csrf": token, "title": "Rechnung März", "issued_date": "2026-03-01"},
        )
        assert r.status_code == 303
        assert "Rechnung März" in c.get(f"/t/acme/d/{doc}").text
        bad = c.post(f"/t/acme/d/{doc}/edit", data={"csrf": token, "title": "x\x00y"})
        assert bad.status_code == 400
    with console.db.transaction() as tx:
        row = tx.raw(
            "SELECT source, original_filename FROM documents WHERE id = %(i)s", {"i": new_id}
        )[0]
    assert row == {"source": "web:anna", "original_filename": "Brief vom Amt.pdf"}
    edited = _entries(console.db, "document.edited")
    assert [(e["detail"]["by"]["login"], e["detail"]["title"][1]) for e in edited] == [
        ("anna", "Rechnung März")
    ]
    with console.login("rita") as c:
        token = csrf(c, "/t/acme/")
        assert 'action="/t/acme/upload"' not in c.get("/t/acme/").text
        assert "/edit" not in c.get(f"/t/acme/d/{doc}").text
        r = c.post(f"/t/acme/d/{doc}/edit", data={"csrf": token, "title": "mine now"})
        assert r.status_code == 403
        r = c.post(
            "/t/acme/upload",
            data={"csrf": token},
            files=[("file", ("y.pdf", pdf_bytes(seed=8), "application/pdf"))],
        )
        assert r.status_code == 403
        assert c.get("/t/acme/attention").status_code == 403
    with console.db.transaction() as tx:
        titles = [
            r["title"]
            for r in tx.raw(
                "SELECT title FROM documents d JOIN tenants t ON t.id = d.tenant_id "
                "WHERE t.name = 'acme'"
            )
        ]
        count = tx.raw("SELECT count(*) AS n FROM documents")[0]["n"]
    assert "mine now" not in titles and count == 3


def test_an_owner_requeues_and_accepts_documents_in_attention(console: Console) -> None:
    """bert (beta owner) sees beta's documents in attention with the reason, re-queues
    one (a new analyze-document job) and accepts another without text."""
    first = console.docs["Beta_geheim.pdf"]
    second, _ = ingest(console.env, console.db, "beta", "Verschluesselt.pdf", seed=9)
    with console.db.transaction() as tx:
        tx.raw(
            "UPDATE documents SET processing_status = 'attention', "
            "attention_reason = 'encrypted: a password is needed' WHERE id = ANY(%(ids)s)",
            {"ids": [first, second]},
        )
        jobs_before = tx.raw("SELECT count(*) AS n FROM processing_jobs")[0]["n"]
    with console.login("bert") as c:
        page = c.get("/t/beta/attention")
        assert page.status_code == 200 and "encrypted: a password is needed" in page.text
        token = csrf(c, "/t/beta/attention")
        assert c.post(f"/t/beta/d/{first}/requeue", data={}).status_code == 403
        assert c.post(f"/t/beta/d/{first}/requeue", data={"csrf": token}).status_code == 303
        assert c.post(f"/t/beta/d/{second}/done", data={"csrf": token}).status_code == 303
        assert c.post(f"/t/beta/d/{second}/done", data={"csrf": token}).status_code == 404
    with console.db.transaction() as tx:
        assert tx.raw("SELECT count(*) AS n FROM processing_jobs")[0]["n"] == jobs_before + 1
        status = tx.raw("SELECT processing_status FROM documents WHERE id = %(i)s", {"i": second})
    assert status[0]["processing_status"] == "done"


def test_requests_logins_and_downloads_are_counted_by_route_and_logged_with_the_trace(
    console: Console,
) -> None:
    """/metrics (on its own port) counts requests by route pattern (never a URL with an
    id), logins by outcome and downloads; a download's log line carries the document's
    trace id."""
    import httpx

    doc = console.docs["Scan_0815.pdf"]
    with console.client() as c:
        c.post("/login", data={"login": "anna", "password": "wrong!", "csrf": csrf(c)})
    with console.login("anna") as c:
        assert c.get(f"/t/acme/d/{doc}/original").status_code == 200
    text = httpx.get(metrics_url(console), timeout=60).text
    route = 'route="/t/{tenant}/d/{doc}/original"'
    assert f'ingestd_web_requests_total{{method="GET",{route},status="200"}} 1.0' in text
    assert 'ingestd_web_logins_total{outcome="failed",via="web"} 1.0' in text
    assert 'ingestd_web_logins_total{outcome="ok",via="web"} 1.0' in text
    assert 'ingestd_web_downloads_total{via="web"} 1.0' in text
    assert f"/d/{doc}" not in text and "acme" not in text
    assert 'ingestd_web_request_seconds_bucket{le="0.5",route="/login"}' in text
    with console.db.transaction() as tx:
        trace = tx.raw("SELECT trace_id FROM documents WHERE id = %(i)s", {"i": doc})[0]
    lines = [
        json.loads(line)
        for line in (console.env.root / "web.log").read_text().splitlines()
        if '"web.download"' in line
    ]
    assert [(x["document"], x["trace"], x["login"]) for x in lines] == [
        (doc, trace["trace_id"], "anna")
    ]


def test_a_tampered_original_is_never_delivered_complete(console: Console) -> None:
    """An archived file changed behind the archive's back: the download stops before its
    last piece (the client sees an incomplete body, never a complete altered file), the
    refusal is logged with both hashes, and no hand-out is recorded."""
    import os

    import httpx

    doc = console.docs["Scan_0815.pdf"]
    with console.db.transaction() as tx:
        rel = tx.raw("SELECT archive_path FROM documents WHERE id = %(i)s", {"i": doc})[0]
    path = console.env.config.paths.archive_dir / rel["archive_path"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.chmod(path, 0o640)
    path.write_bytes(bytes(data))
    os.chmod(path, 0o440)
    # The body ends short of its Content-Length: the client says so.
    with console.login("anna") as c, pytest.raises(httpx.RemoteProtocolError):
        c.get(f"/t/acme/d/{doc}/original")
    assert _entries(console.db, "document.handed_out") == []
    log = (console.env.root / "web.log").read_text()
    assert '"document.handout_refused"' in log and console.shas["Scan_0815.pdf"] in log


def test_filters_by_tag_correspondent_type_and_status(console: Console) -> None:
    """Each filter keeps the documents that have it (any case), with and without words;
    the choices are the tenant's own; a status that does not exist is 400."""
    doc = console.docs["Scan_0815.pdf"]
    other, _ = ingest(console.env, console.db, "acme", "Anderes.pdf", seed=21)
    with console.db.transaction() as tx:
        tid = tx.raw("SELECT id FROM tenants WHERE name = 'acme'")[0]["id"]
        tag = tx.raw(
            "INSERT INTO tags (tenant_id, name) VALUES (%(t)s, 'Rechnung') RETURNING id", {"t": tid}
        )[0]["id"]
        tx.raw("INSERT INTO document_tags (document_id, tag_id, tenant_id) "
               "VALUES (%(d)s, %(g)s, %(t)s)", {"d": doc, "g": tag, "t": tid})  # fmt: skip
        corr = tx.raw(
            "INSERT INTO correspondents (tenant_id, name) VALUES (%(t)s, 'Telekom') RETURNING id",
            {"t": tid},
        )[0]["id"]
        tx.raw("UPDATE documents SET correspondent_id = %(c)s, processing_status = 'done' "
               "WHERE id = %(d)s", {"c": corr, "d": other})  # fmt: skip
    with console.login("anna") as c:

        def ids(**params: str) -> set[int]:
            page = c.get("/t/acme/", params=params)
            assert page.status_code == 200, page.text
            return {int(i) for i in re.findall(r'href="/t/acme/d/(\d+)"', page.text)}

        assert ids() == {doc, other}
        assert ids(tag="rechnung") == {doc}
        assert ids(correspondent="TELEKOM") == {other}
        assert ids(status="done") == {other}
        assert ids(status="queued") == {doc}
        assert ids(q="Scan_0815", tag="Rechnung") == {doc}
        assert ids(q="Scan_0815", correspondent="Telekom") == set()
        assert ids(type="Vertrag") == set()
        assert c.get("/t/acme/", params={"status": "deleted"}).status_code == 400
        page = c.get("/t/acme/").text
        assert "<option>Rechnung</option>" in page and "<option>Telekom</option>" in page


def test_an_owner_sees_arrivals_and_manages_people_an_admin_sees_the_appliance(
    console: Console,
) -> None:
    """bert (beta owner): beta's arrivals with the outcome; changes anna's set in beta and
    removes her (audited), never his own membership. anna (user) gets 403 for those
    pages. An admin sees every tenant's counts on /admin; a member gets 404 there."""
    with console.db.transaction() as tx:
        accounts.add_member(tx, "anna", "beta", "readonly")
        accounts.grant_admin(tx, "ops", hash_password(PASSWORD, rounds=4))
    with console.login("bert") as c:
        page = c.get("/t/beta/arrivals")
        assert page.status_code == 200 and "Beta_geheim.pdf" in page.text
        assert "archived" in page.text
        assert "Beta_geheim" in c.get("/t/beta/arrivals", params={"name": "GEHEIM"}).text
        assert "Beta_geheim" not in c.get("/t/beta/arrivals", params={"name": "zzz"}).text
        people = c.get("/t/beta/members")
        assert people.status_code == 200 and "anna" in people.text
        token = csrf(c, "/t/beta/members")
        r = c.post("/t/beta/members/anna", data={"csrf": token, "action": "user"})
        assert r.status_code == 303
        assert (
            c.post("/t/beta/members/bert", data={"csrf": token, "action": "readonly"}).status_code
            == 400
        )
        assert (
            c.post("/t/beta/members/nobody", data={"csrf": token, "action": "user"}).status_code
            == 404
        )
        assert c.post("/t/beta/members/anna", data={"action": "remove"}).status_code == 403
        r = c.post("/t/beta/members/anna", data={"csrf": token, "action": "remove"})
        assert r.status_code == 303
        assert c.get("/admin").status_code == 404
    kinds = [e["detail"].get("set") for e in _entries(console.db, "member.changed")]
    assert kinds == ["user"]
    assert len(_entries(console.db, "member.removed")) == 1
    with console.login("anna") as c:
        for path in ("/t/acme/arrivals", "/t/acme/members"):
            assert c.get(path).status_code == 403, path
        assert c.get("/t/beta/").status_code == 404  # removed from beta a moment ago
    with console.login("ops") as c:
        page = c.get("/admin")
        assert page.status_code == 200 and "acme" in page.text and "beta" in page.text
        assert c.get("/t/acme/").status_code == 404  # an admin sees no tenant's documents


def test_an_owner_adds_a_person_who_sets_their_password_once_through_the_link(
    console: Console,
) -> None:
    """bert (beta owner) adds clara in the browser and asks for her link: shown once, not
    cached; clara sets her password through it (typed twice, the rules of every password),
    the link is void after, and the audit names bert as the one who handed it out. A link
    is refused for a person with a password or one who reaches another archive (the owner
    must never choose the password of someone who can see more than his archive); an
    altered link is 404; bad logins, sets and a missing token change nothing."""
    with console.db.transaction() as tx:
        accounts.add_member(tx, "dora", "beta", "readonly")
        accounts.add_member(tx, "dora", "acme", "readonly")  # no password, two archives
    with console.login("bert") as c:
        token = csrf(c, "/t/beta/members")
        for bad in ({"login": "cla ra", "set": "user"}, {"login": "clara", "set": "admin"},
                    {"login": "bert", "set": "readonly"}):  # fmt: skip
            assert c.post("/t/beta/members", data={"csrf": token, **bad}).status_code == 400
        assert c.post("/t/beta/members", data={"login": "clara", "set": "user"}).status_code == 403
        r = c.post("/t/beta/members", data={"csrf": token, "login": "clara", "set": "user"})
        assert r.status_code == 303
        assert "clara" in c.get("/t/beta/members").text
        page = c.post("/t/beta/members/clara/welcome", data={"csrf": token})
        assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
        found = re.search(r'value="(http://[^"]+/welcome/([^"]+))"', page.text)
        assert found, page.text
        link = found.group(2)
        for other in ("anna", "dora", "bert", "nobody"):
            r = c.post(f"/t/beta/members/{other}/welcome", data={"csrf": token})
            assert r.status_code == 400, other
    with console.login("anna") as c:  # a user of acme: not the owner's business
        assert c.post("/t/acme/members", data={"csrf": csrf(c, "/t/acme/"), "login": "x",
                                               "set": "user"}).status_code == 403  # fmt: skip
    with console.client() as anonymous:
        assert anonymous.get(f"/welcome/{link[:-2]}xy").status_code == 404
        form = anonymous.get(f"/welcome/{link}")
        assert form.status_code == 200 and "clara" in form.text
        token = csrf(anonymous, f"/welcome/{link}")
        for new, again in (("lang genug 1", "lang genug 2"), ("kurz", "kurz")):
            r = anonymous.post(f"/welcome/{link}", data={"csrf": token, "new": new,
                                                         "again": again})  # fmt: skip
            assert r.status_code == 400
        r = anonymous.post(
            f"/welcome/{link}",
            data={"csrf": token, "new": "Claras Passwort", "again": "Claras Passwort"},
        )
        assert r.status_code == 303 and r.headers["location"] == "/login?welcome=1"
        assert anonymous.get(f"/welcome/{link}").status_code == 404  # used: void
        r = anonymous.post(f"/welcome/{link}", data={"csrf": token, "new": "ein anderes 12",
                                                     "again": "ein anderes 12"})  # fmt: skip
        assert r.status_code == 404
    with console.login("clara", "Claras Passwort") as c:
        assert c.get("/t/beta/").status_code == 200
        assert c.get("/t/acme/").status_code == 404
    (entry,) = [
        e for e in _entries(console.db, "person.password_set") if e["detail"]["login"] == "clara"
    ]
    assert entry["detail"]["by"]["link_from"] == "bert"
    added = [e for e in _entries(console.db, "member.added") if e["detail"]["login"] == "clara"]
    assert added[0]["detail"]["by"]["login"] == "bert"


def test_hostile_people_forms_and_links_change_nothing_and_say_why(console: Console) -> None:
    """What an attacker (or a careless paste) puts into the new people forms: CR/LF and a
    header after it, an RFC 2047 encoded word, a NUL, 10,000 characters (never cut down to
    a login that could name someone), path tricks, markup; another archive's members page;
    a link padded to 8 KB, one signed for another archive's member, one with its JSON
    swapped. Each is refused with a status and a reason (logged with the tenant), and the
    people and their passwords stay exactly as they were."""
    import urllib.parse

    def people() -> list[tuple[str, str | None, bool]]:
        with console.db.transaction() as tx:
            rows = tx.raw(
                "SELECT p.login, m.capability_set, p.password_hash IS NOT NULL AS pw "
                "FROM people p LEFT JOIN tenant_members m ON m.member = p.login ORDER BY 1, 2"
            )
        return [(r["login"], r["capability_set"], r["pw"]) for r in rows]

    before = people()
    hostile = ["anna\r\nSet-Cookie: x=1", "=?utf-8?b?YW5uYQ==?=", "an\x00na", "a" * 10_000,
               "../../etc/passwd", "<script>x</script>", "anna bert", ""]  # fmt: skip
    with console.login("bert") as c:
        token = csrf(c, "/t/beta/members")
        for login in hostile:
            r = c.post("/t/beta/members", data={"csrf": token, "login": login, "set": "user"})
            assert r.status_code == 400, login[:40]
            assert "cannot be a login" in r.text and "<script>x" not in r.text
        for path in ("a" * 201, "..%2F..%2Fetc", "anna%0d%0aX:1"):
            r = c.post(f"/t/beta/members/{path}/welcome", data={"csrf": token})
            assert r.status_code in (400, 404), path
            r = c.post(f"/t/beta/members/{path}", data={"csrf": token, "action": "owner"})
            assert r.status_code in (400, 404), path
        assert c.post("/t/acme/members", data={"csrf": token, "login": "mallory",
                                               "set": "owner"}).status_code == 404  # fmt: skip
        assert c.get("/t/acme/members").status_code == 404
    log = (console.env.root / "web.log").read_text()
    assert '"web.member_refused"' in log and '"tenant": "beta"' in log
    with console.client() as anonymous:
        assert anonymous.get("/welcome/" + "A" * 8_000).status_code in (404, 414, 431)
        for token in ("", "x.y.z", "eyJsb2dpbiI6ImFubmEiLCJ0ZW5hbnQiOiJhY21lIiwiYnkiOiJiZXJ0In0"
                      ".AAAAAA.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"):  # fmt: skip
            assert anonymous.get("/welcome/" + urllib.parse.quote(token)).status_code == 404
    assert people() == before


def test_a_person_changes_their_own_password_and_their_other_sessions_end(console: Console) -> None:
    """anna changes her password on her account page: the current one is asked first (a
    wrong one is a failed login), the new one twice; her session in another browser ends,
    this one goes on, and the new password is the one that logs in."""
    with console.login("anna") as elsewhere, console.login("anna") as c:
        assert elsewhere.get("/t/acme/").status_code == 200
        page = c.get("/account")
        assert page.status_code == 200 and "acme" in page.text
        token = csrf(c, "/account")
        wrong = {"csrf": token, "current": "falsch!!", "new": "neu und lang", "again":
                 "neu und lang"}  # fmt: skip
        assert c.post("/account/password", data=wrong).status_code == 403
        differ = {"csrf": token, "current": PASSWORD, "new": "neu und lang", "again": "anders"}
        assert c.post("/account/password", data=differ).status_code == 400
        assert c.post("/account/password", data={**differ, "again": "neu und lang",
                                                  "csrf": "x"}).status_code == 403  # fmt: skip
        r = c.post("/account/password", data={**differ, "again": "neu und lang"})
        assert r.status_code == 303 and r.headers["location"] == "/account?changed=1"
        assert c.get("/account?changed=1").status_code == 200
        assert c.get("/t/acme/").status_code == 200  # this session goes on
        r = elsewhere.get("/t/acme/")
        assert r.status_code == 303 and r.headers["location"] == "/login"
    with console.client() as c:
        r = c.post("/login", data={"login": "anna", "password": PASSWORD, "csrf": csrf(c)})
        assert r.status_code == 401
    with console.login("anna", "neu und lang") as c:
        assert c.get("/t/acme/").status_code == 200
    *_, entry = [
        e for e in _entries(console.db, "person.password_set") if e["detail"]["login"] == "anna"
    ]
    assert entry["detail"]["by"]["via"] == "web" and entry["detail"]["by"]["login"] == "anna"


def test_the_page_preview_is_served_and_never_a_path_outside_derived(console: Console) -> None:
    """The document's page-1 PNG is shown inline to a member; a stored path that would
    leave paths.derived is 404, as is another tenant's document."""
    doc = console.docs["Scan_0815.pdf"]
    derived = console.env.config.paths.derived_dir
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 64
    (derived / "acme").mkdir(parents=True, exist_ok=True)
    (derived / "acme" / "p1.png").write_bytes(png)
    with console.db.transaction() as tx:
        tid = tx.raw("SELECT id FROM tenants WHERE name = 'acme'")[0]["id"]
        tx.run(
            "content_upsert",
            {
                "document_id": doc, "tenant_id": tid, "page_count": 1, "pages": ["x"],
                "content": "x", "languages": "deu", "searchable_pdf": None,
                "thumbnail": "acme/p1.png", "engine": "test", "placeholder_title": None,
                "derived_title": None, "derived_issued_date": None,
            },
        )  # fmt: skip
    with console.login("anna") as c:
        r = c.get(f"/t/acme/d/{doc}/preview.png")
        assert r.status_code == 200 and r.content == png
        assert r.headers["content-type"] == "image/png"
        beta = console.docs["Beta_geheim.pdf"]
        assert c.get(f"/t/acme/d/{beta}/preview.png").status_code == 404
        with console.db.transaction() as tx:
            tx.raw("UPDATE document_content SET thumbnail = '../../../etc/passwd' "
                   "WHERE document_id = %(d)s", {"d": doc})  # fmt: skip
        assert c.get(f"/t/acme/d/{doc}/preview.png").status_code == 404


def _png_width(data: bytes) -> int:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big")  # IHDR's width


def test_every_page_is_previewed_drawn_once_and_a_hostile_pdf_costs_only_its_preview(
    console: Console,
) -> None:
    """A three-page searchable PDF: the document page shows three previews, each page is
    a PNG 800 px wide drawn on first view and kept beside the derived data; page 0, 4 and
    a non-number are 404, as is another tenant's page. A PDF that is garbage gets 404 for
    its pages while the console goes on serving."""
    doc = console.docs["Scan_0815.pdf"]
    derived = console.env.config.paths.derived_dir
    pdf = text_pdf(derived / "acme" / "2026" / "01" / "abc" / "searchable.pdf",
                   [["Seite eins"], ["Seite zwei"], ["Seite drei"]])  # fmt: skip
    with console.db.transaction() as tx:
        tid = tx.raw("SELECT id FROM tenants WHERE name = 'acme'")[0]["id"]
        tx.run(
            "content_upsert",
            {
                "document_id": doc, "tenant_id": tid, "page_count": 3, "pages": ["1", "2", "3"],
                "content": "x", "languages": "deu",
                "searchable_pdf": "acme/2026/01/abc/searchable.pdf", "thumbnail": None,
                "engine": "test", "placeholder_title": None, "derived_title": None,
                "derived_issued_date": None,
            },
        )  # fmt: skip
        tx.raw("UPDATE documents SET processing_status = 'done' WHERE id = %(d)s", {"d": doc})
    with console.login("anna") as c:
        page = c.get(f"/t/acme/d/{doc}").text
        for n in (1, 2, 3):
            assert f'src="/t/acme/d/{doc}/page/{n}.png"' in page
        assert "/page/4.png" not in page
        first = [c.get(f"/t/acme/d/{doc}/page/{n}.png") for n in (1, 2, 3)]
        assert [r.status_code for r in first] == [200, 200, 200], (
            console.env.root / "web.log"
        ).read_text()[-3000:]
        assert all(_png_width(r.content) == 800 for r in first)
        assert len({r.content for r in first}) == 3  # three different pages
        kept = sorted(p.name.split("-")[0] for p in (pdf.parent / "previews").glob("*.png"))
        assert kept == ["1", "2", "3"]
        assert c.get(f"/t/acme/d/{doc}/page/2.png").content == first[1].content
        for bad in ("0", "4", "x", "1e3", "99999999"):
            assert c.get(f"/t/acme/d/{doc}/page/{bad}.png").status_code == 404, bad
        beta = console.docs["Beta_geheim.pdf"]
        assert c.get(f"/t/acme/d/{beta}/page/1.png").status_code == 404

        pdf.write_bytes(b"%PDF-1.4\n" + b"\xff" * 4096)  # analysed again into garbage
        assert c.get(f"/t/acme/d/{doc}/page/1.png").status_code == 404
        assert c.get(f"/t/acme/d/{doc}").status_code == 200  # the console goes on


def test_a_pdf_not_analysed_yet_is_previewed_from_its_original(console: Console) -> None:
    """Before analysis made a searchable PDF (or when it failed: a document in attention)
    the document page shows the first page of a PDF original, said to be that, drawn from
    the archive and kept where analysis writes; a page the PDF lacks is 404, and so is
    another tenant's document."""
    doc = console.docs["Scan_0815.pdf"]
    with console.db.transaction() as tx:
        rel = tx.raw("SELECT archive_path FROM documents WHERE id = %(i)s", {"i": doc})[0]
    stem = rel["archive_path"].rsplit(".", 1)[0]
    with console.login("anna") as c:
        page = c.get(f"/t/acme/d/{doc}").text
        assert f'src="/t/acme/d/{doc}/page/1.png"' in page and "/page/2.png" not in page
        assert "the first page of the original" in page
        r = c.get(f"/t/acme/d/{doc}/page/1.png")
        assert r.status_code == 200, (console.env.root / "web.log").read_text()[-2000:]
        assert _png_width(r.content) == 800
        kept = console.env.config.paths.derived_dir / stem / "previews" / "original-1-800.png"
        assert kept.read_bytes() == r.content
        assert c.get(f"/t/acme/d/{doc}/page/2.png").status_code == 404  # a one-page PDF
        beta = console.docs["Beta_geheim.pdf"]
        assert c.get(f"/t/acme/d/{beta}/page/1.png").status_code == 404


def test_one_person_over_the_rate_gets_429_and_others_go_on(make_env: Any, db: Database) -> None:
    """requests_per_minute = 10: anna's 11th request within the minute is 429 with
    Retry-After; rita, logged in meanwhile, is served. The WebDAV mount has the same
    per-person rate: dave's 11th PROPFIND is 429 with Retry-After."""
    from tests.fixtures.web import started_console

    with started_console(make_env, db, {"requests_per_minute": 10}) as con:
        with con.login("anna") as c:
            codes = [c.get("/t/acme/").status_code for _ in range(11)]
            assert codes[:10] == [200] * 10 and codes[10] == 429
            r = c.get("/t/acme/")
            assert r.status_code == 429 and 0 < int(r.headers["retry-after"]) <= 61
        with con.login("rita") as c:
            assert c.get("/t/acme/").status_code == 200
        with db.transaction() as tx:
            accounts.add_member(tx, "dave", "acme", "webdav", hash_password(PASSWORD, rounds=4))
        with httpx.Client(base_url=con.url, auth=("dave", PASSWORD), timeout=60) as d:
            codes = [d.request("PROPFIND", "/dav/", headers={"Depth": "0"}).status_code
                     for _ in range(11)]  # fmt: skip
            assert codes[:10] == [207] * 10 and codes[10] == 429, codes
            r = d.request("PROPFIND", "/dav/", headers={"Depth": "0"})
            assert r.status_code == 429 and 0 < int(r.headers["retry-after"]) <= 61


def test_one_ban_list_for_every_front_door(console: Console) -> None:
    """A failed web login is reported for the SFTP server's ban list; once the server has
    banned the address (here: enough reports absorbed), the console refuses logins from
    it before any password is checked, with the time left."""
    from ingestd.config.settings import SftpBansConfig
    from ingestd.sources.sftp.bans import REPORT_DIR, BanList

    state = console.env.config.paths.state_dir
    with console.client() as c:
        assert c.post("/login", data={"login": "anna", "password": "nope!", "csrf": csrf(c)}
                      ).status_code == 401  # fmt: skip
    assert (state / REPORT_DIR / "127.0.0.1").read_text() == "wrong\n"
    bans = BanList(SftpBansConfig(threshold=1), state)  # the server's, as it runs
    assert bans.absorb_reports() == 1
    assert not (state / REPORT_DIR / "127.0.0.1").exists()
    with console.client() as c:
        r = c.post("/login", data={"login": "anna", "password": PASSWORD, "csrf": csrf(c)})
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 1
    log = (console.env.root / "web.log").read_text()
    assert '"web.login_throttled"' in log


def test_with_its_own_certificate_it_speaks_https_with_secure_cookies(
    make_env: Any, tmp_path: Path
) -> None:
    """[web] tls_certificate and tls_key: the console answers HTTPS (checked against the
    certificate) and not plain HTTP; its session cookie is Secure and HSTS is sent."""
    import subprocess
    import sys

    import httpx

    from tests.conftest import wait_until
    from tests.fixtures.web import _free_port

    cert, key = tmp_path / "web.crt", tmp_path / "web.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    key.chmod(0o600)
    port = _free_port()
    env = make_env(
        web={"listen": f"127.0.0.1:{port}", "tls_certificate": str(cert), "tls_key": str(key)},
        metrics={"web_listen": "127.0.0.1:0"},
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ingestd.cli", "web", "--config", str(env.config_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"https://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None
        try:
            return httpx.get(url + "/login", verify=str(cert), timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(up, timeout=120, interval=0.3)
        r = httpx.get(url + "/login", verify=str(cert), timeout=30)
        assert "secure" in r.headers["set-cookie"].lower()
        assert r.headers["strict-transport-security"].startswith("max-age=")
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/login", timeout=10)
    finally:
        proc.terminate()
        proc.wait(60)
