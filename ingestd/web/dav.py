"""The read-only WebDAV mount (issue 31) under ``/dav/``: a tenant's documents as a
virtual tree, for Windows Explorer, macOS Finder, davfs2, rclone and cadaver.

    /dav/                                   the tenants this person may mount
    /dav/<tenant>/<yyyy>/<mm>/<name>        by arrival year and month, the original name
    /dav/<tenant>/tags/<tag>/<name>         by tag

Invariants enforced here:
- every request is authenticated (HTTP Basic, the person's password; no anonymous share)
  and sees only tenants where the person's set allows ``mount``: any other tenant is
  absent (404), as in the console;
- the provider is read-only: PUT, DELETE, MKCOL, MOVE, COPY, PROPPATCH and LOCK are not
  offered (405); nothing here writes to the archive;
- a file is re-hashed against the archive before its first byte is sent (the hand-out),
  and each read is a ``document.handed_out`` entry (``to: webdav``);
- a name is made safe (no separators or control characters) and two documents of one
  folder never share a name: the later ones get `` (#ID)`` before the extension.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from wsgidav.dav_error import HTTP_FORBIDDEN, HTTP_NOT_FOUND, DAVError
from wsgidav.dav_provider import DAVCollection, DAVNonCollection, DAVProvider
from wsgidav.error_printer import ErrorPrinter
from wsgidav.http_authenticator import HTTPAuthenticator
from wsgidav.request_resolver import RequestResolver
from wsgidav.wsgidav_app import WsgiDAVApp

from ingestd import log
from ingestd.archive import handout, handout_names
from ingestd.archive.store import CHUNK
from ingestd.config.settings import TENANT_NAME
from ingestd.db.database import Row
from ingestd.people.accounts import Person
from ingestd.people.capabilities import Action, may
from ingestd.runtime import metrics
from ingestd.web.dav_login import (
    PERSON,
    DavContext,
    PeopleDomainController,
    PersonRateLimit,
    mountable,
)

_TENANT = re.compile(TENANT_NAME)
_YEAR = re.compile(r"^\d{4}$")
_MONTH = re.compile(r"^(0[1-9]|1[0-2])$")
TAGS = "tags"
FOLDERS_KEPT = 256  # month folders whose listing is kept (all dropped when more)


# -- the tree -------------------------------------------------------------------------------
def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value else None


class _Folder(DAVCollection):
    """A virtual folder: its members' names come from ``names``; a folder of documents
    also holds their rows (``files``), so listing it asks the database once, not once
    per member."""

    def __init__(
        self,
        path: str,
        environ: dict[str, Any],
        names: list[str],
        files: dict[str, Row] | None = None,
        ctx: DavContext | None = None,
    ) -> None:
        super().__init__(path, environ)
        self._names = names
        self._files = files or {}
        self._ctx = ctx

    def get_member_names(self) -> list[str]:
        return self._names

    def get_member(self, name: str) -> Any:
        path = self.path.rstrip("/") + "/" + name
        if name in self._files and self._ctx is not None:
            return _File(path, self.environ, self._files[name], self._ctx)
        return self.provider.get_resource_inst(path, self.environ)

    def get_creation_date(self) -> float | None:
        return None

    def get_last_modified(self) -> float | None:
        return None


class _File(DAVNonCollection):
    """One document's original, handed out (verified and audited) when read."""

    def __init__(self, path: str, environ: dict[str, Any], doc: Row, ctx: DavContext) -> None:
        super().__init__(path, environ)
        self.doc = doc
        self.ctx = ctx

    def get_content_length(self) -> int:
        return int(self.doc["size_bytes"] or 0)

    def get_content_type(self) -> str:
        return str(self.doc["mime_type"] or "application/octet-stream")

    def get_creation_date(self) -> float | None:
        return _ts(self.doc["created_at"])

    def get_last_modified(self) -> float | None:
        return _ts(self.doc["created_at"])

    def get_etag(self) -> str:
        return str(self.doc["sha256"])

    def support_etag(self) -> bool:
        return True

    def support_ranges(self) -> bool:
        return False

    def get_content(self) -> Any:
        """The file as it is read and hashed; its last piece only once it matched the
        archive (handout.Stream): a client never completes an unverified file."""
        ctx = self.ctx
        me: Person = self.environ[PERSON]
        try:
            out = handout.stream_out(
                ctx.db,
                ctx.store,
                ctx.config.paths.derived_dir,
                int(self.doc["id"]),
                tenant=str(self.doc["tenant"]),
                searchable=False,
                by={
                    "login": me.login,
                    "address": str(self.environ.get("REMOTE_ADDR") or "-"),
                    "via": "webdav",
                },
                to="webdav",
            )
        except handout.NoSuchDocument:
            raise DAVError(HTTP_NOT_FOUND) from None
        metrics.WEB_DOWNLOADS.labels("webdav").inc()
        metrics.WEB_DOWNLOAD_BYTES.labels("webdav").inc(out.size)
        log.get_logger().info(
            "dav.download",
            tenant=out.tenant,
            document=out.document_id,
            trace=out.trace,
            size=out.size,
            login=me.login,
        )
        return _Reader(out.chunks)


class _Reader(io.RawIOBase):
    """A file WsgiDAV can read() from, over the hand-out's chunks."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._left = b""

    def readable(self) -> bool:
        return True

    def _next(self) -> bool:
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return False
        return True

    def read(self, size: int | None = -1) -> bytes:
        """A whole chunk when ``size`` takes it (WsgiDAV reads CHUNK at a time): no copy."""
        if size is None or size < 0:  # all that is left
            rest = [self._left, *self._chunks]
            self._left = b""
            return b"".join(rest)
        if not self._next():
            return b""
        if size >= len(self._left):
            out, self._left = self._left, b""
            return out
        out, self._left = self._left[:size], self._left[size:]
        return out

    def readinto(self, buffer: Any) -> int:
        if not self._next():
            return 0
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
        super().close()


class ArchiveProvider(DAVProvider):
    """The read-only tree over the documents of the tenants a person may mount."""

    def __init__(self, ctx: DavContext) -> None:
        super().__init__()
        self.ctx = ctx
        # (tenant, year, month) -> (its version, its files by name); see _month
        self._folders: dict[tuple[str, int, int], tuple[dict[str, Any], dict[str, Row]]] = {}
        self._lock = threading.Lock()

    def is_readonly(self) -> bool:
        return True

    def get_resource_inst(self, path: str, environ: dict[str, Any]) -> Any:
        me: Person | None = environ.get(PERSON)
        if me is None:
            raise DAVError(HTTP_FORBIDDEN)
        parts = [p for p in path.split("/") if p]
        if not parts:
            return _Folder("/", environ, mountable(me))
        tenant, rest = parts[0], parts[1:]
        if not _TENANT.fullmatch(tenant) or not may(me.set_in(tenant), Action.mount):
            return None  # 404: the tenant does not exist for this person
        base = "/" + tenant
        if not rest:
            return _Folder(base, environ, [*self._years(tenant), TAGS])
        if rest[0] == TAGS:
            if len(rest) == 1:
                return _Folder(f"{base}/{TAGS}", environ, self._tags(tenant))
            files = self._tagged(tenant, rest[1])
            return self._in_folder(environ, f"{base}/{TAGS}/{rest[1]}", files, rest[2:])
        if not _YEAR.fullmatch(rest[0]):
            return None
        if len(rest) == 1:
            return _Folder(f"{base}/{rest[0]}", environ, self._months(tenant, rest[0]))
        if not _MONTH.fullmatch(rest[1]):
            return None
        files = self._month(tenant, int(rest[0]), int(rest[1]))
        return self._in_folder(environ, f"{base}/{rest[0]}/{rest[1]}", files, rest[2:])

    def _in_folder(
        self, environ: dict[str, Any], folder: str, files: dict[str, Row], rest: list[str]
    ) -> Any:
        if not files and not rest:
            return None
        if not rest:
            return _Folder(folder, environ, sorted(files), files, self.ctx)
        if len(rest) == 1 and rest[0] in files:
            return _File(f"{folder}/{rest[0]}", environ, files[rest[0]], self.ctx)
        return None

    # -- the database, every query by tenant -----------------------------------------------
    def _rows(self, query: str, params: dict[str, Any]) -> list[Row]:
        return self.ctx.db.all(query, params)  # one round trip, no transaction block

    def _years(self, tenant: str) -> list[str]:
        return [str(r["y"]) for r in self._rows("dav_years", {"tenant": tenant})]

    def _months(self, tenant: str, year: str) -> list[str]:
        rows = self._rows("dav_months", {"tenant": tenant, "year": int(year)})
        return [f"{int(r['m']):02d}" for r in rows]

    def _month(self, tenant: str, year: int, month: int) -> dict[str, Row]:
        """The month's folder by name. A client reads one folder over and over (each GET
        and PROPFIND of a file in it); a folder of thousands of documents is listed again
        only when its version (dav_month_version, one small row) says it changed."""
        params = {"tenant": tenant, "year": year, "month": month}
        version = self.ctx.db.one("dav_month_version", params)
        key = (tenant, year, month)
        with self._lock:
            kept = self._folders.get(key)
        if kept is not None and version is not None and kept[0] == version:
            return kept[1]
        named = _named(self._rows("dav_month", params))
        with self._lock:
            if len(self._folders) >= FOLDERS_KEPT:
                self._folders.clear()
            if version is not None:
                self._folders[key] = (dict(version), named)
        return named

    def _tags(self, tenant: str) -> list[str]:
        return [_safe_tag(str(r["name"])) for r in self._rows("dav_tags", {"tenant": tenant})]

    def _tagged(self, tenant: str, shown_tag: str) -> dict[str, Row]:
        for r in self._rows("dav_tags", {"tenant": tenant}):
            if _safe_tag(str(r["name"])) == shown_tag:
                return _named(self._rows("dav_tagged", {"tenant": tenant, "tag": r["name"]}))
        return {}


def _safe_tag(name: str) -> str:
    return handout_names.safe_name(name, "tag")


def _named(rows: list[Row]) -> dict[str, Row]:
    """Each document under its safe original name; a name taken gets `` (#ID)``."""
    out: dict[str, Row] = {}
    for r in rows:
        name = handout_names.safe_name(str(r["original_filename"] or ""), f"document-{r['id']}")
        if name in out:
            stem, dot, ext = name.rpartition(".")
            name = f"{stem} (#{r['id']}).{ext}" if dot and stem else f"{name} (#{r['id']})"
        out[name] = r
    return out


def one_date_header(app: Any) -> Any:
    """``app`` without the Date header WsgiDAV writes: the HTTP server adds its own, and a
    response with two is malformed (Date is a single header)."""

    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(k, v) for k, v in headers if k.lower() != "date"]
            return start_response(status, kept, exc_info)

        return app(environ, start)

    return wrapped


def make_dav_app(ctx: DavContext) -> WsgiDAVApp:
    """The WSGI app of the mount (served under /dav by the console)."""
    config = {
        "mount_path": "/dav",
        "provider_mapping": {"/": ArchiveProvider(ctx)},
        "http_authenticator": {
            "domain_controller": PeopleDomainController,
            "accept_basic": True,
            "accept_digest": False,
            "default_to_digest": False,
            "trusted_auth_header": None,
        },
        "ingestd": ctx,
        # WsgiDAV's stack without CORS and the directory browser (both off), with the
        # person's rate after authentication.
        "middleware_stack": [ErrorPrinter, HTTPAuthenticator, PersonRateLimit, RequestResolver],
        "lock_storage": None,
        # A file goes out in the hand-out's pieces (1 MiB), not 8 KiB ones: each block
        # crosses from the WSGI thread to the event loop once.
        "block_size": CHUNK,
        "property_manager": None,
        "dir_browser": {"enable": False},
        "suppress_version_info": True,
        "verbose": 1,
        "logging": {"enable": False},
        "cors": {"allow_origin": None},
    }
    return WsgiDAVApp(config)
