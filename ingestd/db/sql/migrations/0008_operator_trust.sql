-- 0008 operator trust: attempts own their leases, side effects go through an outbox,
-- documents that cannot be analysed say so, operator events reach someone, and one
-- correlation id follows a file from arrival to its last job.

-- ---- attempts own their leases -------------------------------------------------------
-- Every claim makes a new token; heartbeat and outcomes apply only with the current one.
-- A worker name is not an owner: two workers started with the same --worker-id, or a
-- stopped attempt whose job was rescued and claimed again, must not record anything.
ALTER TABLE processing_jobs ADD COLUMN IF NOT EXISTS attempt UUID;

-- Which jobs a document's processing_status follows: its processing (analysis, and site
-- kinds from plugins), not a delivery of one of its webhooks nor its purge. One place for
-- the rule: the claim and every outcome query ask this function.
CREATE OR REPLACE FUNCTION ingestd_tracks_document(p_kind TEXT) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE AS $$ SELECT p_kind NOT IN ('deliver-webhook', 'purge-document') $$;

CREATE OR REPLACE FUNCTION ingestd_claim_from(
    p_tenant BIGINT, p_worker TEXT, p_lease INTERVAL, p_tenant_cap INT)
RETURNS processing_jobs LANGUAGE plpgsql AS $$
DECLARE
    job processing_jobs;
BEGIN
    IF p_tenant_cap IS NOT NULL AND (
        SELECT count(*) FROM processing_jobs
        WHERE tenant_id = p_tenant AND status = 'processing') >= p_tenant_cap THEN
        RETURN job;
    END IF;
    -- clock_timestamp(): now() is when the claim's transaction began, before its turn.
    UPDATE processing_jobs
    SET status = 'processing', started_at = clock_timestamp(), updated_at = clock_timestamp(),
        lease_expires_at = clock_timestamp() + p_lease, worker_id = p_worker,
        attempt = gen_random_uuid(), finished_at = NULL
    WHERE id = (
        SELECT r.id FROM processing_jobs r
        WHERE r.tenant_id = p_tenant AND r.status = 'queued'
          AND r.next_attempt_at <= clock_timestamp()
        ORDER BY r.next_attempt_at, r.id
        LIMIT 1
        FOR NO KEY UPDATE SKIP LOCKED)
    RETURNING * INTO job;
    IF FOUND AND ingestd_tracks_document(job.kind) THEN
        UPDATE documents SET processing_status = 'processing' WHERE id = job.document_id;
    END IF;
    RETURN job;
END $$;

-- ---- archived, but needs attention ------------------------------------------------------
-- A document kept in the archive that analysis cannot handle for a reason no retry fixes
-- (encrypted, damaged, over a limit, unsupported) ends here, with the reason, instead of
-- a plain 'failed' nobody looks at. An operator re-queues it or marks it done without text.
ALTER TABLE documents DROP CONSTRAINT IF EXISTS documents_processing_status_check;
ALTER TABLE documents ADD CONSTRAINT documents_processing_status_check
    CHECK (processing_status IN ('queued', 'processing', 'done', 'failed', 'attention'));
ALTER TABLE documents ADD COLUMN IF NOT EXISTS attention_reason TEXT;
CREATE INDEX IF NOT EXISTS idx_documents_attention
    ON documents (tenant_id, id) WHERE processing_status = 'attention';

-- ---- correlation id ---------------------------------------------------------------------
-- The id the file had when it arrived (the SFTP spool id, or one made when a hot-folder
-- or CLI file was taken); jobs carry it in their payload as "trace".
ALTER TABLE documents ADD COLUMN IF NOT EXISTS trace_id TEXT;

-- ---- the appliance's own tenant ----------------------------------------------------------
-- Operator notifications are jobs like any other, but many events have no tenant (an SFTP
-- ban) or outlive theirs (tenant deleted). They run under '_system', a name no real tenant
-- can have (tenant names start with a letter or digit), in its own round-robin lane.
ALTER TABLE tenants DROP CONSTRAINT IF EXISTS tenants_name_check;
ALTER TABLE tenants ADD CONSTRAINT tenants_name_check
    CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$' OR name = '_system');
INSERT INTO tenants (name, status) VALUES ('_system', 'active') ON CONFLICT (name) DO NOTHING;

-- Jobs that belong to no document: tenant jobs and notifications.
ALTER TABLE processing_jobs DROP CONSTRAINT IF EXISTS processing_jobs_document_required;
ALTER TABLE processing_jobs ADD CONSTRAINT processing_jobs_document_required
    CHECK (document_id IS NOT NULL OR kind IN ('provision-tenant', 'delete-tenant', 'notify'));

-- ---- operator events: the outbox of notifications ----------------------------------------
-- What an operator must hear about: a file refused or quarantined, a document that needs
-- attention, a job or a delivery failed for good, an SFTP ban, a tenant's lifecycle. Each
-- row is written where it is decided, in that transaction where there is one: this table
-- is the outbox. Workers relay new rows (relayed_at IS NULL) to one notify job per
-- matching [[notify]] sink, in one transaction, so every sink gets each event once, with
-- retries of its own, whether or not it is up right now.
CREATE TABLE IF NOT EXISTS operator_events (
    id         BIGSERIAL PRIMARY KEY,
    -- Made by the writer where the event may be written twice (a daemon event buffered on
    -- disk while Postgres was down): the second insert is a no-op.
    event_id   UUID NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    type       TEXT NOT NULL CHECK (type ~ '^[a-z_]+(\.[a-z_]+)+$'),
    severity   TEXT NOT NULL DEFAULT 'warning' CHECK (severity IN ('info', 'warning', 'error')),
    -- The tenant's name, not its id: the event outlives a deleted tenant. NULL: the
    -- appliance itself (an SFTP ban of an address).
    tenant     TEXT,
    detail     JSONB NOT NULL DEFAULT '{}'::jsonb,
    trace_id   TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- When a worker turned it into notify jobs (none, when no sink wanted it).
    relayed_at TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS idx_operator_events_created ON operator_events (created_at);
CREATE INDEX IF NOT EXISTS idx_operator_events_unrelayed
    ON operator_events (id) WHERE relayed_at IS NULL;

-- A tenant's lifecycle, however it changes (the CLI, a job, an admin's SQL).
CREATE OR REPLACE FUNCTION ingestd_tenant_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.name <> '_system' THEN
            INSERT INTO operator_events (type, severity, tenant, detail)
            VALUES ('tenant.created', 'info', NEW.name, jsonb_build_object('status', NEW.status));
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO operator_events (type, severity, tenant, detail)
        VALUES ('tenant.deleted', 'warning', OLD.name, jsonb_build_object('status', OLD.status));
    ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
        INSERT INTO operator_events (type, severity, tenant, detail)
        VALUES ('tenant.' || NEW.status,
                CASE WHEN NEW.status IN ('suspended', 'deleting') THEN 'warning' ELSE 'info' END,
                NEW.name, jsonb_build_object('from', OLD.status, 'to', NEW.status));
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS tenants_lifecycle_event ON tenants;
CREATE TRIGGER tenants_lifecycle_event AFTER INSERT OR DELETE OR UPDATE OF status ON tenants
    FOR EACH ROW EXECUTE FUNCTION ingestd_tenant_event();

-- ---- workflow webhooks through the outbox -----------------------------------------------
-- analyze-document no longer POSTs: the transaction that commits its results enqueues one
-- deliver-webhook job per webhook, and that job records here when the receiver took it.
ALTER TABLE document_workflow_runs ADD COLUMN IF NOT EXISTS webhook_delivered_at TIMESTAMPTZ;
