-- 0002 tags: per-tenant tag names and their assignment to documents.
-- Intake assigns tags from hot-folder config and sub-folder names; taxonomy rules
-- (analyze-document) add more later. `origin` says who assigned a tag.

CREATE TABLE IF NOT EXISTS tags (
    id         BIGSERIAL PRIMARY KEY,
    tenant_id  BIGINT NOT NULL REFERENCES tenants(id),
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT tags_tenant_name_key UNIQUE (tenant_id, name)
);

CREATE TABLE IF NOT EXISTS document_tags (
    document_id BIGINT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    tag_id      BIGINT NOT NULL REFERENCES tags(id) ON DELETE CASCADE,
    tenant_id   BIGINT NOT NULL REFERENCES tenants(id),
    origin      TEXT NOT NULL DEFAULT 'intake' CHECK (origin IN ('intake', 'taxonomy', 'workflow', 'user')),
    PRIMARY KEY (document_id, tag_id)
);
CREATE INDEX IF NOT EXISTS idx_document_tags_tag ON document_tags(tag_id);
