"""analyze-document: derive what the archive does not hold (OCR text, title, date, tags).

This first step checks the archived file against its record: present, same size, same
SHA-256. A document whose bytes are gone or altered must not get derived data from
something else; that is a permanent failure an admin has to look at (`ingestd verify`).
OCR, title/date derivation, taxonomy and workflows follow as further steps.
"""

from __future__ import annotations

import hashlib
import os

from ingestd.archive import LocalArchive
from worker.jobs import JobContext, PermanentError, register

CHUNK = 1 << 20


@register("analyze-document")
def analyze_document(ctx: JobContext) -> None:
    job = ctx.job
    with ctx.db.transaction() as tx:
        doc = tx.one("job_document", {"id": job.document_id, "tenant_id": job.tenant_id})
    if doc is None:
        raise PermanentError(f"document {job.document_id} of tenant {job.tenant} not found")
    archive = LocalArchive(ctx.config.paths.archive_dir)
    path = archive.path_of(str(doc["archive_path"]))
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise PermanentError(f"archived file {doc['archive_path']} is missing") from None
    size = 0
    try:
        while chunk := os.read(fd, CHUNK):
            size += len(chunk)
            digest.update(chunk)
    finally:
        os.close(fd)
    if size != doc["size_bytes"] or digest.hexdigest() != doc["sha256"]:
        raise PermanentError(
            f"archived file {doc['archive_path']} does not match its record "
            f"(size {size}, expected {doc['size_bytes']}); run `ingestd verify`"
        )
    ctx.result["verified_bytes"] = size
