-- 0003 queue: tenant-fair dispatch, leases, wake-up, retired kinds.
--
-- The claim (ingestd_claim) serves the least recently served tenant that has a ready
-- job, oldest job first, with SKIP LOCKED on both the tenant's row and the job row:
-- concurrent workers serve different tenants, so a round gives every waiting tenant one
-- job. Its cost is O(tenants with queued jobs x log(backlog)): a loose index scan over
-- the partial "queued" index finds those tenants, a probe per tenant finds its job.

-- Round-robin state: when each tenant was last served.
CREATE TABLE IF NOT EXISTS queue_tenants (
    tenant_id      BIGINT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    last_served_at TIMESTAMPTZ NOT NULL DEFAULT '-infinity'
);
INSERT INTO queue_tenants (tenant_id) SELECT id FROM tenants ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION ingestd_queue_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_tenants (tenant_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS tenants_queue_row ON tenants;
CREATE TRIGGER tenants_queue_row AFTER INSERT ON tenants
    FOR EACH ROW EXECUTE FUNCTION ingestd_queue_tenant();

ALTER TABLE processing_jobs ADD COLUMN IF NOT EXISTS finished_at TIMESTAMPTZ;

-- Exactly what is runnable, in the order a tenant's jobs are served.
CREATE INDEX IF NOT EXISTS idx_processing_jobs_ready
    ON processing_jobs (tenant_id, next_attempt_at, id) WHERE status = 'queued';
-- Running jobs: lease expiry (rescue) and per-tenant in-flight counts (cap).
CREATE INDEX IF NOT EXISTS idx_processing_jobs_running
    ON processing_jobs (lease_expires_at, tenant_id) WHERE status = 'processing';
-- Pruning finished jobs by age.
CREATE INDEX IF NOT EXISTS idx_processing_jobs_finished
    ON processing_jobs (finished_at) WHERE status IN ('done', 'failed');

-- Every job row is updated two or three times within seconds: vacuum early, and leave
-- room on each page for HOT updates.
ALTER TABLE processing_jobs SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);
ALTER TABLE queue_tenants SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0,
                               autovacuum_vacuum_threshold = 500);

-- Retired kinds (seed 004): refused for new rows. Not a CHECK: even NOT VALID, Postgres
-- would check it on every UPDATE, and an old row could then never be claimed and failed.
CREATE OR REPLACE FUNCTION ingestd_refuse_retired_kind() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind IN ('generate-thumbnails', 'generate-ocr-text') THEN
        RAISE EXCEPTION 'job kind % is retired; its work runs inside analyze-document',
            NEW.kind USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS processing_jobs_kind_not_retired ON processing_jobs;
CREATE TRIGGER processing_jobs_kind_not_retired BEFORE INSERT ON processing_jobs
    FOR EACH ROW EXECUTE FUNCTION ingestd_refuse_retired_kind();

-- One wake-up per INSERT statement (not per row): a batch of 1,000 jobs is one NOTIFY.
CREATE OR REPLACE FUNCTION ingestd_notify_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ingestd_jobs', '');
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS processing_jobs_notify ON processing_jobs;
CREATE TRIGGER processing_jobs_notify AFTER INSERT ON processing_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION ingestd_notify_jobs();

-- When a failed attempt runs again: base * 2^retry_count seconds (seed 000: 1, 2, 4 ...),
-- spread by +- jitter (a fraction) so that jobs failing together do not retry together.
CREATE OR REPLACE FUNCTION ingestd_retry_at(p_retry_count INT, p_base FLOAT8, p_jitter FLOAT8)
RETURNS TIMESTAMPTZ LANGUAGE sql VOLATILE AS $$
    SELECT now() + make_interval(secs => p_base * power(2, p_retry_count)
                                         * (1 + p_jitter * (2 * random() - 1)))
$$;

CREATE OR REPLACE FUNCTION ingestd_claim(p_worker TEXT, p_lease INTERVAL, p_tenant_cap INT)
RETURNS SETOF processing_jobs LANGUAGE plpgsql AS $$
DECLARE
    cand RECORD;
    job processing_jobs;
    busy BIGINT[];  -- tenants another worker was claiming for, in serving order
    tid BIGINT;
    served TIMESTAMPTZ;
    stale BOOLEAN;
BEGIN
    -- Claims take turns (a transaction-scoped advisory lock): each reads the serving order
    -- as the previous claim committed it, so no tenant is served twice in a round however
    -- many workers claim at once. The critical section is this function plus a commit
    -- that does not wait for the WAL flush: a claim lost in a database crash only means
    -- the job is claimed again, and jobs derive data idempotently.
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(7423001);  -- 'ingestd claim'
    -- Up to three reads of the serving order (one suffices under the lock; kept for a
    -- claim that runs without it, e.g. by hand).
    FOR attempt IN 1..3 LOOP
        busy := '{}';
        stale := false;
        FOR cand IN
            WITH RECURSIVE waiting AS (
                -- Loose index scan: each distinct tenant_id of the partial index.
                (SELECT p.tenant_id FROM processing_jobs p
                 WHERE p.status = 'queued' ORDER BY p.tenant_id LIMIT 1)
                UNION ALL
                SELECT (SELECT p.tenant_id FROM processing_jobs p
                        WHERE p.status = 'queued' AND p.tenant_id > w.tenant_id
                        ORDER BY p.tenant_id LIMIT 1)
                FROM waiting w WHERE w.tenant_id IS NOT NULL
            )
            SELECT q.tenant_id, q.last_served_at FROM waiting w
            JOIN queue_tenants q ON q.tenant_id = w.tenant_id
            ORDER BY q.last_served_at, q.tenant_id
        LOOP
            -- Another worker is claiming for this tenant right now: try the next tenant;
            -- come back to this one only if no other tenant has work (last resort below).
            SELECT q.last_served_at INTO served FROM queue_tenants q
            WHERE q.tenant_id = cand.tenant_id FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                busy := busy || cand.tenant_id;
                CONTINUE;
            END IF;
            -- Served by another worker since the order was read: its turn is over.
            IF served IS DISTINCT FROM cand.last_served_at THEN
                stale := true;
                CONTINUE;
            END IF;
            job := ingestd_claim_from(cand.tenant_id, p_worker, p_lease, p_tenant_cap);
            CONTINUE WHEN job.id IS NULL;  -- only jobs waiting for their retry time
            UPDATE queue_tenants SET last_served_at = clock_timestamp()
            WHERE tenant_id = cand.tenant_id;
            RETURN NEXT job;
            RETURN;
        END LOOP;
        EXIT WHEN NOT stale;
    END LOOP;
    -- Every tenant with work is being served by another worker this instant (one big
    -- tenant, or more workers than waiting tenants): take its next job anyway, or workers
    -- would idle while a backlog waits. Its turn was already recorded by the other claim.
    FOREACH tid IN ARRAY busy LOOP
        job := ingestd_claim_from(tid, p_worker, p_lease, p_tenant_cap);
        IF job.id IS NOT NULL THEN
            RETURN NEXT job;
            RETURN;
        END IF;
    END LOOP;
    RETURN;
END $$;

-- The oldest ready job of one tenant, marked processing; NULL fields if none (or capped).
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
        finished_at = NULL
    WHERE id = (
        SELECT r.id FROM processing_jobs r
        WHERE r.tenant_id = p_tenant AND r.status = 'queued'
          AND r.next_attempt_at <= clock_timestamp()
        ORDER BY r.next_attempt_at, r.id
        LIMIT 1
        FOR NO KEY UPDATE SKIP LOCKED)
    RETURNING * INTO job;
    IF FOUND THEN
        UPDATE documents SET processing_status = 'processing' WHERE id = job.document_id;
    END IF;
    RETURN job;
END $$;
