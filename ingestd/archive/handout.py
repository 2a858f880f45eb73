"""Handing a document out: its original (or searchable PDF) under its original file name,
re-hashed on the way out, and recorded in the tenant's audit chain.

The bytes are copied into a hidden temp file beside the destination (or an anonymous
one for stdout) while they are hashed; an original whose SHA-256 is not the one the
archive recorded is refused and its temp file removed: nothing is written, the refusal
is logged. Only a verified copy gets its name, with a no-overwrite link (a name taken in
the directory becomes ``name (2).pdf``), inside the transaction that appends the
``document.handed_out`` entry (who, what, which variant, the hash): a hand-out and its
record exist together or not at all. On stdout the entry is committed first, then the
bytes are written (a reader that leaves early still was handed them).

A searchable PDF has no hash of its own in the archive (it is derived data, made again
by a re-analysis); its hash is computed on the way out and recorded in the entry.

The name it gets is handout_names.py's; where and how it is written, handout_files.py's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from ingestd import log
from ingestd.archive import audit, derived
from ingestd.archive.handout_files import Destination, DestinationUnusable, place, temp_copy
from ingestd.archive.handout_names import fit, has_extension, safe_name, with_extension
from ingestd.archive.store import CHUNK, ArchiveStore
from ingestd.db.database import Database, Row
from ingestd.errors import ArchiveError, ExitCode, IngestdError, NotFound


class NoSuchDocument(NotFound):
    """No document with that id (of that tenant): nothing was written."""


class NoSearchablePdf(NotFound):
    """The document has no searchable PDF (yet): the reason says why; nothing written."""


class HandoutMismatch(IngestdError):
    """The archived bytes are not the ones recorded (altered or damaged): nothing was
    handed out; ``ingestd verify`` reports the damage. A person must look."""

    exit_code = ExitCode.archive_inconsistent
    attention = True


@dataclass(frozen=True, slots=True)
class HandedOut:
    document_id: int
    tenant: str
    variant: str  # "original" or "searchable"
    sha256: str
    size: int
    name: str  # the file name written (sanitised), also for stdout
    path: Path | None  # None: written to stdout
    trace: str | None = None  # the document's trace id (its log lines carry it)


def _what(
    db: Database, document_id: int, tenant: str | None, searchable: bool
) -> tuple[Row, str, str]:
    """The document's row, the variant and the name it is handed out under."""
    doc = db.one("document_handout", {"id": document_id, "tenant": tenant})  # one round trip
    if doc is None:
        where = f" of tenant {tenant}" if tenant else ""
        raise NoSuchDocument(f"document {document_id}: no such document{where}")
    variant = "searchable" if searchable else "original"
    fallback = f"document-{document_id}.{doc['extension'] or 'bin'}"
    name = safe_name(str(doc["original_filename"] or ""), fallback)
    if searchable:
        name = with_extension(name, "pdf")
    elif not has_extension(name) and doc["extension"]:
        name = fit(f"{name}.{doc['extension']}")  # a name without one opens as what it is
    return doc, variant, name


@dataclass
class Stream:
    """A hand-out to a network client (the console, WebDAV): sent as it is read, with
    the last piece held back until the whole file's SHA-256 matched the archive's and
    the hand-out is in the audit trail. On a mismatch the stream raises instead of
    sending that piece: the client, told ``size`` bytes beforehand, never receives a
    complete file that was not verified (and the refusal is logged as for ``get``)."""

    document_id: int
    tenant: str
    variant: str
    name: str
    size: int
    media_type: str
    trace: str | None
    chunks: Iterator[bytes]


def stream_out(
    db: Database,
    store: ArchiveStore,
    derived_root: Path,
    document_id: int,
    *,
    tenant: str,
    searchable: bool,
    by: Mapping[str, object],
    to: str,
) -> Stream:
    """Open one document's original (or searchable PDF) for sending; see Stream.
    Raises NoSuchDocument and NoSearchablePdf before anything is sent."""
    doc, variant, name = _what(db, document_id, tenant, searchable)
    stack = contextlib.ExitStack()
    src = stack.enter_context(_source(store, derived_root, doc, searchable))
    size = os.fstat(src.fileno()).st_size
    expected = None if searchable else str(doc["sha256"])

    def chunks() -> Iterator[bytes]:
        with stack:
            digest = hashlib.sha256()
            held = b""
            sent = 0
            for chunk in _pieces(src):
                digest.update(chunk)
                if held:
                    yield held
                    sent += len(held)
                held = chunk
            found = digest.hexdigest()
            total = sent + len(held)
            if expected is not None and found != expected:
                _refuse(doc, variant, expected, found, total)
            with db.transaction() as tx:
                audit.append(
                    tx,
                    chain=audit.chain_of(tx, str(doc["tenant"])),
                    tenant=str(doc["tenant"]),
                    kind=audit.AuditKind.handed_out,
                    document_id=document_id,
                    detail={
                        "by": dict(by),
                        "variant": variant,
                        "sha256": found,
                        "size": total,
                        "name": name,
                        "to": to,
                    },
                )
            if held:
                yield held

    media = "application/pdf" if searchable else str(doc["mime_type"] or "")
    return Stream(
        document_id,
        str(doc["tenant"]),
        variant,
        name,
        size,
        media or "application/octet-stream",
        doc["trace_id"],
        chunks(),
    )


def hand_out(
    db: Database,
    store: ArchiveStore,
    derived_root: Path,
    document_id: int,
    *,
    tenant: str | None,
    searchable: bool,
    dest: Destination,
    by: Mapping[str, object] | None = None,
    to: str | None = None,
) -> HandedOut:
    """Write one document's original (or searchable PDF) to ``dest``, verified and
    recorded as handed out ``by`` (default: the OS user, audit.actor()) ``to`` (default:
    stdout or file); raises NoSuchDocument, NoSearchablePdf, HandoutMismatch,
    DestinationTaken, DestinationUnusable."""
    doc, variant, name = _what(db, document_id, tenant, searchable)
    with _source(store, derived_root, doc, searchable) as src, temp_copy(dest) as (tmp, tmp_path):
        digest, size = _copy(src, tmp)
        expected = None if searchable else str(doc["sha256"])
        if expected is not None and digest != expected:
            _refuse(doc, variant, expected, digest, size)
        tmp.flush()
        os.fsync(tmp.fileno())
        detail = {
            "by": dict(by) if by is not None else audit.actor(),
            "variant": variant,
            "sha256": digest,
            "size": size,
            "name": name,
            "to": to or ("stdout" if dest.stdout is not None else "file"),
        }
        placed: Path | None = None
        try:
            with db.transaction() as tx:
                audit.append(
                    tx,
                    chain=audit.chain_of(tx, str(doc["tenant"])),
                    tenant=str(doc["tenant"]),
                    kind=audit.AuditKind.handed_out,
                    document_id=document_id,
                    detail=detail,
                )
                if tmp_path is not None:
                    placed = place(tmp, tmp_path, dest, name)
        except BaseException:
            if placed is not None:  # the record did not commit: neither does the file
                with contextlib.suppress(FileNotFoundError):
                    placed.unlink()
            raise
        if dest.stdout is not None:
            tmp.seek(0)
            while chunk := tmp.read(CHUNK):
                dest.stdout.write(chunk)
            dest.stdout.flush()
    who = detail["by"]
    assert isinstance(who, dict)
    # The audit chain holds the hand-out; the log line is for debugging, not for the
    # terminal of the admin who asked (the command prints its own one-line result).
    log.get_logger().debug(
        "document.handed_out",
        document=document_id,
        tenant=doc["tenant"],
        trace=doc["trace_id"],
        variant=variant,
        sha256=digest,
        path=str(placed) if placed else "-",
        user=who.get("user") or who.get("login"),
        sudo_user=who.get("sudo_user"),
    )
    return HandedOut(
        document_id,
        str(doc["tenant"]),
        variant,
        digest,
        size,
        placed.name if placed else name,
        placed,
        doc["trace_id"],
    )


def _refuse(doc: Row, variant: str, expected: str, found: str, size: int) -> None:
    log.get_logger().error(
        "document.handout_refused",
        document=doc["id"],
        tenant=doc["tenant"],
        variant=variant,
        archive_path=doc["archive_path"],
        expected_sha256=expected,
        found_sha256=found,
        size=size,
    )
    raise HandoutMismatch(
        f"document {doc['id']}: the archived file {doc['archive_path']} does not match its "
        f"recorded SHA-256 (expected {expected}, read {found}, {size} bytes); nothing was "
        "written. Run `ingestd verify` and restore the file from a backup"
    )


@contextlib.contextmanager
def _source(
    store: ArchiveStore, derived_root: Path, doc: Row, searchable: bool
) -> Iterator[BinaryIO]:
    """The bytes to hand out, opened for reading."""
    if not searchable:
        with contextlib.ExitStack() as stack:
            try:
                path = stack.enter_context(store.reading(str(doc["archive_path"])))
                original = stack.enter_context(open(path, "rb"))
            except FileNotFoundError:
                raise HandoutMismatch(
                    f"document {doc['id']}: its archived file {doc['archive_path']} is "
                    "missing; run `ingestd verify`"
                ) from None
            except OSError as exc:  # e.g. not run as the archive's owner
                raise ArchiveError(
                    f"document {doc['id']}: cannot read {doc['archive_path']}: {exc.strerror}"
                ) from None
            yield original
        return
    path = searchable_path(derived_root, doc)
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below; the error needs its own words)
    except FileNotFoundError:
        raise NoSearchablePdf(
            f"document {doc['id']}: its searchable PDF was made but is missing ({path}); "
            f"make it again: `ingestd documents analyze --tenant {doc['tenant']} --force "
            f"{doc['id']}`"
        ) from None
    with f:
        yield f


def searchable_path(derived_root: Path, doc: Row) -> Path:
    """Where the document's searchable PDF is; NoSearchablePdf with the reason when it
    has none (not analysed yet, needs attention, accepted without text)."""
    rel = doc["searchable_pdf"]
    if rel is None:
        raise NoSearchablePdf(f"document {doc['id']}: {_no_searchable_reason(doc)}")
    path = derived.inside(derived_root, str(rel))
    if path is None:
        raise ArchiveError(
            f"document {doc['id']}: its searchable PDF path escapes {derived_root.resolve()}"
        )
    return path


def _no_searchable_reason(doc: Row) -> str:
    status = doc["processing_status"]
    if status in ("queued", "processing"):
        return (
            f"no searchable PDF yet: its analysis is {status} (try again when "
            "`ingestd documents show` says done)"
        )
    if status == "attention":
        return (
            "no searchable PDF: it needs attention "
            f"({doc['attention_reason'] or 'no reason recorded'}); the original is there "
            "(without --searchable)"
        )
    if status == "failed":
        return "no searchable PDF: its analysis failed (`ingestd jobs list --status failed`)"
    if status == "split":
        return "no searchable PDF: a split batch; its documents have one each"
    if doc["has_content"]:
        return "no searchable PDF: it was accepted without text (the original is there)"
    return f"no searchable PDF (status {status}); the original is there (without --searchable)"


def _pieces(src: BinaryIO) -> Iterator[bytes]:
    """``src`` in CHUNK pieces; a read error is the archive's (ArchiveError)."""
    while True:
        try:
            chunk = src.read(CHUNK)
        except OSError as exc:
            raise ArchiveError(f"cannot read the stored file: {exc.strerror}") from None
        if not chunk:
            return
        yield chunk


def _copy(src: BinaryIO, out: IO[bytes]) -> tuple[str, int]:
    """Copy ``src`` to ``out``; its SHA-256 and size. A read error is the archive's
    (ArchiveError), a write error the destination's (DestinationUnusable)."""
    digest = hashlib.sha256()
    size = 0
    for chunk in _pieces(src):
        digest.update(chunk)
        size += len(chunk)
        try:
            out.write(chunk)
        except OSError as exc:
            raise DestinationUnusable(f"cannot write the copy: {exc.strerror}") from None
    return digest.hexdigest(), size
