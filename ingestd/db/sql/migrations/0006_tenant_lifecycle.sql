-- 0006 tenant lifecycle (seed 004): provision-tenant, signed delete-tenant, purge-document.

-- Tenant jobs (provision-tenant, delete-tenant) belong to no document. Seed 000 made
-- document_id NOT NULL when every job was a document's; the guarantee is kept for the
-- document kinds by a CHECK instead (NOT VALID would skip old rows; all of them have one).
ALTER TABLE processing_jobs ALTER COLUMN document_id DROP NOT NULL;
ALTER TABLE processing_jobs DROP CONSTRAINT IF EXISTS processing_jobs_document_required;
ALTER TABLE processing_jobs ADD CONSTRAINT processing_jobs_document_required
    CHECK (document_id IS NOT NULL OR kind IN ('provision-tenant', 'delete-tenant'));

-- The system capability sets every tenant gets, and its members.
CREATE TABLE IF NOT EXISTS capability_sets (
    tenant_id    BIGINT NOT NULL REFERENCES tenants(id),
    name         TEXT NOT NULL CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    capabilities TEXT[] NOT NULL,
    system       BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (tenant_id, name)
);
CREATE TABLE IF NOT EXISTS tenant_members (
    tenant_id      BIGINT NOT NULL REFERENCES tenants(id),
    member         TEXT NOT NULL CHECK (length(member) BETWEEN 1 AND 200),
    capability_set TEXT NOT NULL,
    added_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, member),
    FOREIGN KEY (tenant_id, capability_set) REFERENCES capability_sets (tenant_id, name)
);
-- The text search configuration of a tenant's documents (the seed's per-tenant index).
CREATE TABLE IF NOT EXISTS tenant_search (
    tenant_id BIGINT PRIMARY KEY REFERENCES tenants(id),
    config    REGCONFIG NOT NULL DEFAULT 'german'
);

-- Trashed documents may be purged (ingestd document trash / purge).
ALTER TABLE documents ADD COLUMN IF NOT EXISTS trashed_at TIMESTAMPTZ;

-- Every delete-tenant nonce ever accepted, with the job that used it: a replay (the same
-- nonce in another job) is refused; a retry of the same job is not. No foreign keys: the
-- record outlives the tenant it deleted (it is the audit trail).
CREATE TABLE IF NOT EXISTS tenant_delete_nonces (
    nonce       TEXT PRIMARY KEY CHECK (length(nonce) BETWEEN 16 AND 128),
    job_id      BIGINT NOT NULL,
    tenant_id   BIGINT NOT NULL,
    tenant_name TEXT NOT NULL,
    action      TEXT NOT NULL,
    used_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ
);
