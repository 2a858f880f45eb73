"""Tags given to a document when it is recorded (folder names, source tags, tag barcodes)."""

from __future__ import annotations

from collections.abc import Iterable

from ingestd.db.database import Tx
from ingestd.intake.items import MAX_TAG_LENGTH


def tag_names(names: Iterable[str]) -> list[str]:
    """The tag names as they are stored: stripped, cut to the column's 100 characters (or
    a long folder name would fail the CHECK and the file would be retried forever), each
    once, sorted (so concurrent intakes lock tags alike)."""
    return sorted({t.strip()[:MAX_TAG_LENGTH] for t in names if t.strip()})


def link_tags(tx: Tx, tenant_id: int, document_id: int, names: Iterable[str], origin: str) -> None:
    """Create the tenant's tags as needed and link them, inside the caller's transaction
    (intake's own transaction does the same in ``intake_record``, migration 0012)."""
    tags = tag_names(names)
    if not tags:
        return
    params = {"names": tags, "tenant_id": tenant_id, "document_id": document_id, "origin": origin}
    tx.run("tags_ensure", params)
    tx.run("tags_link", params)
