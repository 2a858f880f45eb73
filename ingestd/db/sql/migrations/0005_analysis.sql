-- 0005 analysis: what analyze-document derives (invariant 4: derived data only; the
-- archived original is never touched). Everything here can be rebuilt from the archive.

-- Taxonomy (seed 000: "Taxonomie-Autozuordnung"): per-tenant correspondents and document
-- types next to the tags of 0002. Rules that assign them live in config.
CREATE TABLE IF NOT EXISTS correspondents (
    id         BIGSERIAL PRIMARY KEY,
    tenant_id  BIGINT NOT NULL REFERENCES tenants(id),
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT correspondents_tenant_name_key UNIQUE (tenant_id, name)
);
CREATE TABLE IF NOT EXISTS document_types (
    id         BIGSERIAL PRIMARY KEY,
    tenant_id  BIGINT NOT NULL REFERENCES tenants(id),
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT document_types_tenant_name_key UNIQUE (tenant_id, name)
);
-- Nullable without default: adding them rewrites nothing.
ALTER TABLE documents ADD COLUMN IF NOT EXISTS correspondent_id BIGINT
    REFERENCES correspondents(id) ON DELETE SET NULL;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS document_type_id BIGINT
    REFERENCES document_types(id) ON DELETE SET NULL;

-- The text of a document, page by page, and where its derivatives are. One row per
-- document, replaced as a whole when the document is analyzed again (force).
CREATE TABLE IF NOT EXISTS document_content (
    document_id    BIGINT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
    tenant_id      BIGINT NOT NULL REFERENCES tenants(id),
    page_count     INT NOT NULL CHECK (page_count >= 0),
    pages          TEXT[] NOT NULL,          -- text per page, in page order
    content        TEXT NOT NULL,            -- the pages joined by form feeds
    languages      TEXT NOT NULL,            -- tesseract languages, e.g. deu+eng
    searchable_pdf TEXT,                     -- relative to paths.derived
    thumbnail      TEXT,                     -- relative to paths.derived (PNG of page 1)
    engine         TEXT NOT NULL,            -- ocrmypdf/tesseract versions that made it
    -- Title and text in two configurations: 'german' (stems: Rechnungen -> rechnung) and
    -- 'simple' (exact words, names, numbers, any language). Written with the row.
    search         TSVECTOR NOT NULL,
    analyzed_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_document_content_search
    ON document_content USING gin (search);
CREATE INDEX IF NOT EXISTS idx_document_content_tenant ON document_content (tenant_id);

-- On-upload workflows run once per document: a workflow whose webhook was delivered is
-- recorded at once, so a retry of the job (a later step failed) does not call it again.
CREATE TABLE IF NOT EXISTS document_workflow_runs (
    document_id BIGINT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    workflow    TEXT NOT NULL,
    tenant_id   BIGINT NOT NULL REFERENCES tenants(id),
    ran_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (document_id, workflow)
);
