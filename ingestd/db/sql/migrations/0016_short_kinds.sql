-- 0016 short kinds (issue 29): which kinds are short is declared once, in Python
-- (ingestd.queue.kinds.LENGTHS), and every claim passes them (p_short_kinds). 0014 kept a
-- second list here (ingestd_short_kind) that had split-batch in it: a batch of minutes
-- could hold the short lane while a provisioning or a notification waited.

DROP FUNCTION IF EXISTS ingestd_claim_from(BIGINT, TEXT[], INT, TEXT, INTERVAL, TEXT);
DROP FUNCTION IF EXISTS ingestd_claim(TEXT, INTERVAL, INT, TEXT, TEXT, TEXT[], TEXT[], TEXT[]);
DROP FUNCTION IF EXISTS ingestd_short_kind(TEXT);

-- The oldest ready job of one tenant among p_kinds, marked processing; NULL fields if none.
-- At its cap (the lower of the tenant's max_running and the worker's tenant_cap) only
-- short kinds (p_short_kinds) are looked for.
CREATE OR REPLACE FUNCTION ingestd_claim_from(
    p_tenant BIGINT, p_kinds TEXT[], p_cap INT, p_worker TEXT, p_lease INTERVAL, p_pool TEXT,
    p_short_kinds TEXT[])
RETURNS processing_jobs LANGUAGE plpgsql AS $$
DECLARE
    job processing_jobs;
    kinds TEXT[] := p_kinds;
BEGIN
    -- Counted under the claim lock, after the previous claim committed: exact, on every
    -- host (idx_processing_jobs_dispatch: the tenant's running jobs, a handful).
    IF p_cap IS NOT NULL AND (
        SELECT count(*) FROM processing_jobs
        WHERE tenant_id = p_tenant AND status = 'processing'
          AND kind <> ALL(p_short_kinds)) >= p_cap THEN
        kinds := ARRAY(SELECT k FROM unnest(kinds) AS k WHERE k = ANY(p_short_kinds));
        IF cardinality(kinds) = 0 THEN
            RETURN job;
        END IF;
    END IF;
    -- One probe per kind (each an ordered index range), the oldest of them wins: a probe
    -- over all kinds at once would sort the tenant's whole backlog. The pick, its update
    -- and its document's are one statement: each statement costs the claim, which holds
    -- the turn, its own executor start and snapshot. No pick (only jobs waiting for their
    -- retry time, or locked by an admin): no row, NULL fields.
    WITH pick AS (
        SELECT r.id
        FROM unnest(kinds) AS k(kind)
        CROSS JOIN LATERAL (
            SELECT p.id, p.next_attempt_at FROM processing_jobs p
            WHERE p.kind = k.kind AND p.tenant_id = p_tenant AND p.status = 'queued'
              AND p.next_attempt_at <= clock_timestamp()
            ORDER BY p.kind, p.tenant_id, p.next_attempt_at, p.id
            LIMIT 1
            FOR NO KEY UPDATE SKIP LOCKED) AS r
        ORDER BY r.next_attempt_at, r.id
        LIMIT 1
    ), claimed AS (
        -- clock_timestamp(): now() is when the claim's transaction began, before its turn.
        UPDATE processing_jobs
        SET status = 'processing', started_at = clock_timestamp(),
            updated_at = clock_timestamp(), lease_expires_at = clock_timestamp() + p_lease,
            worker_id = p_worker, attempt = gen_random_uuid(), finished_at = NULL,
            pool = p_pool
        WHERE id = (SELECT pick.id FROM pick)
        RETURNING *
    ), doc AS (
        UPDATE documents SET processing_status = 'processing'
        WHERE id = (SELECT c.document_id FROM claimed c
                    WHERE ingestd_tracks_document(c.kind))
    )
    SELECT * INTO job FROM claimed;
    RETURN job;
END $$;

-- The claim within a scope: p_tenants (NULL: every tenant not in p_exclude), p_kinds
-- (NULL: every kind); p_pool is recorded on the job, p_share keys the serving order;
-- p_short_kinds are the kinds a tenant's cap neither counts nor holds back.
--
-- plan_cache_mode: PL/pgSQL keeps a plan per statement, but with array parameters of
-- unknown length the planner prices a generic plan above a custom one and so plans the
-- candidate query afresh on every call, which doubled the claim's time (0.8 -> 1.6 ms on
-- a server-side loop; bench/queue.py's throughput fell to 0.4x the plain FIFO claim).
-- The generic plan is the right one: every lookup is an index probe whatever the scope.
-- Set for the whole call, so it covers ingestd_claim_from too.
CREATE OR REPLACE FUNCTION ingestd_claim(
    p_worker TEXT, p_lease INTERVAL, p_tenant_cap INT,
    p_pool TEXT, p_share TEXT, p_tenants TEXT[], p_exclude TEXT[], p_kinds TEXT[],
    p_short_kinds TEXT[])
RETURNS SETOF processing_jobs LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    kinds TEXT[] := p_kinds;
    short_kinds TEXT[] := coalesce(p_short_kinds, '{}');
    only_ids BIGINT[];  -- p_tenants and p_exclude as ids: no join to tenants per candidate
    skip_ids BIGINT[];
    clock FLOAT8;
    have_clock BOOLEAN;
    cand RECORD;
    job processing_jobs;
BEGIN
    -- Outside the turn (below), what needs no turn: the scope's tenant ids and the kinds
    -- with queued jobs. A kind queued after this read waits for the next claim; one gone
    -- since simply has no candidates.
    IF p_tenants IS NOT NULL THEN
        only_ids := ARRAY(SELECT t.id FROM tenants t WHERE t.name = ANY(p_tenants));
    END IF;
    IF p_exclude IS NOT NULL THEN
        skip_ids := ARRAY(SELECT t.id FROM tenants t WHERE t.name = ANY(p_exclude));
    END IF;
    IF kinds IS NULL THEN
        -- Every kind with queued jobs: a loose index scan, one probe per distinct kind.
        WITH RECURSIVE k AS (
            (SELECT p.kind FROM processing_jobs p
             WHERE p.status = 'queued' ORDER BY p.kind LIMIT 1)
            UNION ALL
            SELECT (SELECT p.kind FROM processing_jobs p
                    WHERE p.status = 'queued' AND p.kind > k.kind ORDER BY p.kind LIMIT 1)
            FROM k WHERE k.kind IS NOT NULL
        )
        SELECT coalesce(array_agg(k.kind), '{}') INTO kinds FROM k WHERE k.kind IS NOT NULL;
    END IF;
    -- Claims take turns (a transaction-scoped advisory lock): each reads the serving order
    -- and the running counts as the previous claim committed them, so no tenant is served
    -- twice in a round and no cap is overrun, however many workers on however many hosts
    -- claim at once. The critical section is the rest of this function plus a commit that
    -- does not wait for the WAL flush: a claim lost in a database crash only means the
    -- job is claimed again, and jobs derive data idempotently.
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(7423001);  -- 'ingestd claim'
    SELECT c.vtime INTO clock FROM queue_clocks c WHERE c.share = p_share;
    have_clock := FOUND;
    clock := coalesce(clock, 0);
    FOR cand IN
        WITH RECURSIVE w AS (
            -- Per kind, each distinct tenant with queued jobs of it (a loose index scan).
            SELECT k.kind,
                   (SELECT p.tenant_id FROM processing_jobs p
                    WHERE p.status = 'queued' AND p.kind = k.kind
                    ORDER BY p.kind, p.tenant_id LIMIT 1) AS tenant_id
            FROM unnest(kinds) AS k(kind)
            UNION ALL
            SELECT w.kind,
                   (SELECT p.tenant_id FROM processing_jobs p
                    WHERE p.status = 'queued' AND p.kind = w.kind AND p.tenant_id > w.tenant_id
                    ORDER BY p.kind, p.tenant_id LIMIT 1)
            FROM w WHERE w.tenant_id IS NOT NULL
        ), waiting AS (
            SELECT w.tenant_id, array_agg(w.kind) AS kinds
            FROM w WHERE w.tenant_id IS NOT NULL GROUP BY w.tenant_id
        )
        SELECT wt.tenant_id, wt.kinds,
               coalesce(q.weight, 1) AS weight,
               -- least() ignores NULLs: no cap unless the tenant or the worker sets one.
               least(q.max_running, p_tenant_cap) AS cap,
               greatest(coalesce(s.pass, clock), clock) AS start,
               coalesce(s.served_at, '-infinity') AS served_at
        FROM waiting wt
        LEFT JOIN queue_tenants q ON q.tenant_id = wt.tenant_id
        LEFT JOIN queue_shares s ON s.share = p_share AND s.tenant_id = wt.tenant_id
        WHERE (only_ids IS NULL OR wt.tenant_id = ANY(only_ids))
          AND (skip_ids IS NULL OR wt.tenant_id <> ALL(skip_ids))
        ORDER BY start, served_at, wt.tenant_id
    LOOP
        job := ingestd_claim_from(cand.tenant_id, cand.kinds, cand.cap, p_worker, p_lease,
                                  p_pool, short_kinds);
        CONTINUE WHEN job.id IS NULL;  -- capped, or only jobs waiting for their retry time
        INSERT INTO queue_shares (share, tenant_id, pass, served_at)
        VALUES (p_share, cand.tenant_id, cand.start + 1.0 / cand.weight, clock_timestamp())
        ON CONFLICT (share, tenant_id)
        DO UPDATE SET pass = EXCLUDED.pass, served_at = EXCLUDED.served_at;
        -- The clock moves once a round (at weight 1), not on every claim: a write saved.
        IF cand.start > clock OR NOT have_clock THEN
            INSERT INTO queue_clocks (share, vtime) VALUES (p_share, cand.start)
            ON CONFLICT (share) DO UPDATE SET vtime = EXCLUDED.vtime;
        END IF;
        RETURN NEXT job;
        RETURN;
    END LOOP;
    RETURN;
END $$;

-- The claims of the earlier signatures (a worker of a previous release during an
-- upgrade): no kind is exempt from a tenant's cap for them, and the short lane of such a
-- worker claims the kinds it names itself.
CREATE OR REPLACE FUNCTION ingestd_claim(
    p_worker TEXT, p_lease INTERVAL, p_tenant_cap INT,
    p_pool TEXT, p_share TEXT, p_tenants TEXT[], p_exclude TEXT[], p_kinds TEXT[])
RETURNS SETOF processing_jobs LANGUAGE sql AS $$
    SELECT * FROM ingestd_claim(p_worker, p_lease, p_tenant_cap, p_pool, p_share,
                                p_tenants, p_exclude, p_kinds, '{}')
$$;

CREATE OR REPLACE FUNCTION ingestd_claim(p_worker TEXT, p_lease INTERVAL, p_tenant_cap INT)
RETURNS SETOF processing_jobs LANGUAGE sql AS $$
    SELECT * FROM ingestd_claim(p_worker, p_lease, p_tenant_cap, 'default', 'default',
                                NULL, NULL, NULL, '{}')
$$;
