-- 0001 initial schema: tenants, documents, processing_jobs.
--
-- processing_jobs is seed 000 verbatim (columns, defaults, indexes, the FK with
-- ON DELETE CASCADE, documents.processing_status DEFAULT 'done'), followed by what
-- dispatch needs on top (kind, payload, lease). Do not "tidy" the seed part: tests
-- compare it against the catalog.

CREATE TABLE IF NOT EXISTS tenants (
    id          BIGSERIAL PRIMARY KEY,
    -- The name is a path component of the archive and spool: keep it boring.
    name        TEXT NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    status      TEXT NOT NULL DEFAULT 'creating'
                CHECK (status IN ('creating', 'active', 'suspended', 'deleting')),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS documents (
    id                BIGSERIAL PRIMARY KEY,
    -- No cascade: a tenant's rows go only through delete-tenant, which removes files too.
    tenant_id         BIGINT NOT NULL REFERENCES tenants(id),
    sha256            TEXT NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size_bytes        BIGINT NOT NULL CHECK (size_bytes > 0),
    mime_type         TEXT NOT NULL,
    extension         TEXT NOT NULL,
    original_filename TEXT NOT NULL,
    -- 'cli', 'sftp:<account>', 'watch:<folder>'
    source            TEXT NOT NULL,
    -- sub-folder below the inbox / hot folder the file came from ('' for the root)
    source_subdir     TEXT NOT NULL DEFAULT '',
    -- relative to paths.archive: <tenant>/<yyyy>/<mm>/<sha256>.<ext>
    archive_path      TEXT NOT NULL,
    title             TEXT NOT NULL,
    issued_date       DATE,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Idempotent intake: the same bytes for the same tenant are one document.
    CONSTRAINT documents_tenant_sha256_key UNIQUE (tenant_id, sha256)
);

-- ---- seed 000 (verbatim) ------------------------------------------------------
CREATE TABLE IF NOT EXISTS processing_jobs (
    id BIGSERIAL PRIMARY KEY,
    tenant_id BIGINT NOT NULL,
    document_id BIGINT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    status TEXT NOT NULL DEFAULT 'queued', -- queued | processing | done | failed
    retry_count INT NOT NULL DEFAULT 0,
    derive_title BOOLEAN NOT NULL DEFAULT false,
    error_message TEXT,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

ALTER TABLE processing_jobs ADD COLUMN IF NOT EXISTS derive_title BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE processing_jobs ADD COLUMN IF NOT EXISTS next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE processing_jobs ADD COLUMN IF NOT EXISTS started_at TIMESTAMPTZ;
ALTER TABLE processing_jobs ADD COLUMN IF NOT EXISTS error_message TEXT;

CREATE INDEX IF NOT EXISTS idx_processing_jobs_dispatch
    ON processing_jobs(tenant_id, status, next_attempt_at, created_at);
CREATE INDEX IF NOT EXISTS idx_processing_jobs_document
    ON processing_jobs(document_id);
CREATE INDEX IF NOT EXISTS idx_processing_jobs_status
    ON processing_jobs(status);

-- Default 'done': legacy rows were processed synchronously and are done by
-- definition; deliberately no backfill. New documents are inserted as 'queued'.
ALTER TABLE documents ADD COLUMN IF NOT EXISTS processing_status TEXT NOT NULL DEFAULT 'done';
-- ---- end of seed 000 ------------------------------------------------------------

-- What dispatch needs on top of the seed.
ALTER TABLE processing_jobs ADD COLUMN IF NOT EXISTS kind TEXT NOT NULL DEFAULT 'analyze-document';
ALTER TABLE processing_jobs ADD COLUMN IF NOT EXISTS payload JSONB NOT NULL DEFAULT '{}'::jsonb;
-- A claimed job belongs to its worker until lease_expires_at; the heartbeat extends it.
ALTER TABLE processing_jobs ADD COLUMN IF NOT EXISTS lease_expires_at TIMESTAMPTZ;
ALTER TABLE processing_jobs ADD COLUMN IF NOT EXISTS worker_id TEXT;

ALTER TABLE processing_jobs ADD CONSTRAINT processing_jobs_tenant_fk
    FOREIGN KEY (tenant_id) REFERENCES tenants(id);
ALTER TABLE processing_jobs ADD CONSTRAINT processing_jobs_status_check
    CHECK (status IN ('queued', 'processing', 'done', 'failed'));
ALTER TABLE documents ADD CONSTRAINT documents_processing_status_check
    CHECK (processing_status IN ('queued', 'processing', 'done', 'failed'));

CREATE INDEX IF NOT EXISTS idx_documents_tenant_created ON documents(tenant_id, created_at);
