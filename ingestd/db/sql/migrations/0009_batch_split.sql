-- 0009 batch split (issue 16): a batch scan stays archived as dropped and becomes the
-- parent of the documents split from it; every child is a document of its own (own
-- archived PDF, own SHA-256, own analysis) linked to its parent with its page range.

-- A parent's processing_status after its split-batch job: 'split' (analysed only
-- through its children).
ALTER TABLE documents DROP CONSTRAINT IF EXISTS documents_processing_status_check;
ALTER TABLE documents ADD CONSTRAINT documents_processing_status_check
    CHECK (processing_status IN ('queued', 'processing', 'done', 'failed', 'attention', 'split'));

-- Lineage. A table, not a parent column on documents: a child's bytes may equal a
-- document the tenant already has (the unique (tenant_id, sha256) makes that one
-- document), and that document is then the part, with no second copy. Cascades follow
-- purge and delete-tenant, which remove documents on purpose.
CREATE TABLE IF NOT EXISTS document_parts (
    parent_id   BIGINT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    position    INT NOT NULL CHECK (position >= 1),
    first_page  INT NOT NULL CHECK (first_page >= 1),   -- of the parent, 1-based
    last_page   INT NOT NULL CHECK (last_page >= first_page),
    child_id    BIGINT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    tenant_id   BIGINT NOT NULL REFERENCES tenants(id),
    PRIMARY KEY (parent_id, position),
    CHECK (child_id <> parent_id)
);
CREATE INDEX IF NOT EXISTS idx_document_parts_child ON document_parts (child_id);

-- Archive serial number (an ASN barcode such as ASN00042 on a page): unique per tenant,
-- so the number on the paper finds exactly one document.
ALTER TABLE documents ADD COLUMN IF NOT EXISTS asn BIGINT CHECK (asn >= 0);
CREATE UNIQUE INDEX IF NOT EXISTS documents_tenant_asn_key
    ON documents (tenant_id, asn) WHERE asn IS NOT NULL;

-- Tags read from a tag barcode.
ALTER TABLE document_tags DROP CONSTRAINT IF EXISTS document_tags_origin_check;
ALTER TABLE document_tags ADD CONSTRAINT document_tags_origin_check
    CHECK (origin IN ('intake', 'taxonomy', 'workflow', 'user', 'barcode'));
