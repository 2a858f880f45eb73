-- The job queue: enqueue, claim, outcomes, rescue, the jobs admin commands, and the
-- facts of the job kinds (job_kinds_sync, at every migrate).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

-- name: job_insert
INSERT INTO processing_jobs (tenant_id, document_id, kind, payload, derive_title)
VALUES (%(tenant_id)s, %(document_id)s, %(kind)s, %(payload)s, %(derive_title)s)
RETURNING id;

-- name: job_claim
-- The tenant comes along to save a round trip, but this statement's snapshot predates the
-- claim (which may wait for its turn): for a tenant created meanwhile it is NULL, and the
-- caller looks it up with job_tenant. Never an inner join: the claimed job would be lost.
-- The scope (ingestd.queue.pools.Scope): the pool recorded on the job, the share whose
-- serving order it follows, the tenants (NULL: all but those excluded) and kinds (NULL: all);
-- short_kinds: ingestd.jobkinds.SHORT_KINDS (migration 0016), never listed in SQL.
SELECT c.*, t.name AS tenant, t.status AS tenant_status
FROM ingestd_claim(%(worker)s, make_interval(secs => %(lease)s), %(tenant_cap)s,
                   %(pool)s, %(share)s, %(tenants)s::text[], %(exclude)s::text[],
                   %(kinds)s::text[], %(short_kinds)s::text[]) AS c
LEFT JOIN tenants t ON t.id = c.tenant_id;

-- name: scope_counts
-- (ready, running) jobs of one lane's scope: `worker --drain` ends when both are 0.
SELECT count(*) FILTER (WHERE j.status = 'queued' AND j.next_attempt_at <= now()) AS ready,
       count(*) FILTER (WHERE j.status = 'processing') AS running
FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id
WHERE j.status IN ('queued', 'processing')
  AND (%(tenants)s::text[] IS NULL OR t.name = ANY(%(tenants)s::text[]))
  AND (%(exclude)s::text[] IS NULL OR t.name <> ALL(%(exclude)s::text[]))
  AND (%(kinds)s::text[] IS NULL OR j.kind = ANY(%(kinds)s::text[]));

-- name: worker_id_lock
-- A worker's name is held by its session for its whole life (released when the session
-- ends, however the worker ends): a second live worker with the same --worker-id is
-- refused at start instead of sharing leases with the first.
SELECT pg_try_advisory_lock(7423002, hashtext(%(worker)s)) AS locked;

-- name: worker_id_unlock
-- Given back before the session closes: a closed connection's backend frees its locks only
-- when it has exited, a moment after the client has gone, and a worker restarted under the
-- same id at once would be refused in that moment.
SELECT pg_advisory_unlock(7423002, hashtext(%(worker)s)) AS unlocked;

-- name: job_tenant
SELECT name AS tenant, status AS tenant_status FROM tenants WHERE id = %(tenant_id)s;

-- Every outcome applies only to the attempt that claimed the job (its token, migration
-- 0008), never by worker name: a rescued attempt, or a second worker started with the
-- same --worker-id, changes nothing.
-- name: job_heartbeat
UPDATE processing_jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
WHERE id = %(id)s AND status = 'processing' AND attempt = %(attempt)s::uuid;

-- name: job_done
WITH j AS (
    UPDATE processing_jobs
    SET status = 'done', finished_at = now(), updated_at = now(), lease_expires_at = NULL,
        error_message = NULL
    WHERE id = %(id)s AND status = 'processing' AND attempt = %(attempt)s::uuid
    RETURNING document_id, kind
), d AS (
    UPDATE documents SET processing_status = 'done', attention_reason = NULL
    WHERE id IN (SELECT document_id FROM j WHERE ingestd_tracks_document(kind))
)
SELECT count(*) AS n FROM j;

-- name: job_fail
-- An attempt failed: retry after base * 2^retry_count s (+- jitter), or failed for good
-- past max_retries or when the handler says the error is permanent. Failed for good, the
-- document is 'attention' (with the reason) when the handler said so, else 'failed'; and
-- the operator event (%(failed_event)s, NULL for none) is written in the same statement.
WITH j AS (
    UPDATE processing_jobs
    SET retry_count = CASE WHEN %(permanent)s THEN retry_count ELSE retry_count + 1 END,
        status = CASE WHEN %(permanent)s OR retry_count + 1 > %(max_retries)s
                      THEN 'failed' ELSE 'queued' END,
        next_attempt_at = ingestd_retry_at(retry_count, %(base)s, %(jitter)s),
        finished_at = CASE WHEN %(permanent)s OR retry_count + 1 > %(max_retries)s
                           THEN now() END,
        needs_attention = %(attention)s AND (%(permanent)s OR retry_count + 1 > %(max_retries)s),
        error_message = %(error)s, lease_expires_at = NULL, updated_at = now()
    WHERE id = %(id)s AND status = 'processing' AND attempt = %(attempt)s::uuid
    RETURNING id, tenant_id, kind, document_id, status, retry_count, next_attempt_at, payload
), d AS (
    UPDATE documents
    SET processing_status = CASE WHEN j.status = 'failed' AND %(attention)s
                                 THEN 'attention' ELSE j.status END,
        attention_reason = CASE WHEN j.status = 'failed' AND %(attention)s
                                THEN left(%(error)s, 2000) ELSE attention_reason END
    FROM j WHERE documents.id = j.document_id AND ingestd_tracks_document(j.kind)
), e AS (
    INSERT INTO operator_events (type, severity, tenant, detail, trace_id)
    SELECT CASE WHEN %(attention)s THEN 'document.needs_attention' ELSE %(failed_event)s END,
           'error', t.name,
           jsonb_build_object('job_id', j.id, 'kind', j.kind, 'document_id', j.document_id,
                              -- retry_count as returned counts this attempt, unless
                              -- the failure was permanent (not counted)
                              'attempts', CASE WHEN %(permanent)s OR %(attention)s
                                               THEN j.retry_count + 1 ELSE j.retry_count END,
                              'error', left(%(error)s, 2000)),
           j.payload->>'trace'
    FROM j JOIN tenants t ON t.id = j.tenant_id
    WHERE j.status = 'failed' AND (%(attention)s OR %(failed_event)s::text IS NOT NULL)
)
SELECT status, retry_count, next_attempt_at FROM j;

-- name: job_release
-- Hand a job back untouched (SIGTERM past the grace period): no attempt is counted.
WITH j AS (
    UPDATE processing_jobs
    SET status = 'queued', lease_expires_at = NULL, worker_id = NULL, started_at = NULL,
        next_attempt_at = now(), updated_at = now()
    WHERE id = %(id)s AND status = 'processing' AND attempt = %(attempt)s::uuid
    RETURNING document_id, kind
), d AS (
    UPDATE documents SET processing_status = 'queued'
    WHERE id IN (SELECT document_id FROM j WHERE ingestd_tracks_document(kind))
)
SELECT count(*) AS n FROM j;

-- name: jobs_rescue
-- Leases that ran out: the worker was killed or its host is gone. Counts as an attempt,
-- so a file that kills its worker every time still ends failed.
WITH j AS (
    UPDATE processing_jobs
    SET retry_count = retry_count + 1,
        status = CASE WHEN retry_count + 1 > %(max_retries)s THEN 'failed' ELSE 'queued' END,
        next_attempt_at = ingestd_retry_at(retry_count, %(base)s, %(jitter)s),
        finished_at = CASE WHEN retry_count + 1 > %(max_retries)s THEN now() END,
        error_message = 'lease expired: worker ' || coalesce(worker_id, '?')
                        || ' stopped heartbeating (killed, crashed or host lost)',
        lease_expires_at = NULL, updated_at = now()
    WHERE id IN (SELECT id FROM processing_jobs
                 WHERE status = 'processing' AND lease_expires_at < now()
                 ORDER BY lease_expires_at LIMIT 500 FOR NO KEY UPDATE SKIP LOCKED)
    RETURNING id, tenant_id, kind, document_id, status, worker_id, retry_count, payload,
              error_message
), d AS (
    UPDATE documents SET processing_status = j.status
    FROM j WHERE documents.id = j.document_id AND ingestd_tracks_document(j.kind)
), e AS (
    -- Failed for good (a file that kills its worker every time): the operator hears of it.
    INSERT INTO operator_events (type, severity, tenant, detail, trace_id)
    -- The kind's event from job_kinds (ingestd.jobkinds.FAILED_EVENTS; none for a
    -- notification, which would notify about notifying); a kind without a row (a
    -- plugin's) gets the default, %(failed_event)s.
    SELECT CASE WHEN k.kind IS NULL THEN %(failed_event)s ELSE k.failed_event END,
           'error', t.name,
           jsonb_build_object('job_id', j.id, 'kind', j.kind, 'document_id', j.document_id,
                              'attempts', j.retry_count, 'error', j.error_message),
           j.payload->>'trace'
    FROM j JOIN tenants t ON t.id = j.tenant_id
    LEFT JOIN job_kinds k ON k.kind = j.kind
    WHERE j.status = 'failed' AND (k.kind IS NULL OR k.failed_event IS NOT NULL)
)
SELECT j.id, j.status, j.worker_id, j.kind, coalesce(t.name, '') AS tenant
FROM j LEFT JOIN tenants t ON t.id = j.tenant_id;

-- name: jobs_prune
DELETE FROM processing_jobs
WHERE id IN (SELECT id FROM processing_jobs
             WHERE status IN ('done', 'failed')
               AND finished_at < now() - make_interval(secs => %(age)s)
             LIMIT 5000);

-- name: job_document
SELECT d.id, d.tenant_id, d.sha256, d.size_bytes, d.archive_path, d.original_filename,
       d.trace_id, d.created_at,
       d.title, d.mime_type, d.issued_date, d.source, d.source_subdir,
       c.name AS correspondent, y.name AS document_type,
       coalesce((SELECT array_agg(g.name ORDER BY g.name) FROM document_tags dt
                 JOIN tags g ON g.id = dt.tag_id WHERE dt.document_id = d.id), '{}') AS tags,
       coalesce((SELECT array_agg(r.workflow ORDER BY r.workflow)
                 FROM document_workflow_runs r WHERE r.document_id = d.id), '{}') AS workflows_run,
       dc.placeholder_title, dc.derived_title, dc.derived_issued_date,
       d.date_policy, d.name_date
FROM documents d
LEFT JOIN document_content dc ON dc.document_id = d.id
LEFT JOIN correspondents c ON c.id = d.correspondent_id
LEFT JOIN document_types y ON y.id = d.document_type_id
WHERE d.id = %(id)s AND d.tenant_id = %(tenant_id)s;

-- name: jobs_list
SELECT j.id, t.name AS tenant, j.kind, j.status, j.retry_count, j.document_id,
       j.next_attempt_at, j.started_at, j.finished_at, j.created_at, j.worker_id,
       left(j.error_message, 200) AS error
FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id
WHERE (%(tenant)s::text IS NULL OR t.name = %(tenant)s)
  AND (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s)
ORDER BY j.id DESC
LIMIT %(limit)s;

-- name: job_show
SELECT j.*, t.name AS tenant, t.status AS tenant_status,
       d.original_filename, d.processing_status AS document_status
FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id
LEFT JOIN documents d ON d.id = j.document_id
WHERE j.id = %(id)s;

-- name: job_retry
-- An admin retries failed jobs (or ones waiting for their retry time): fresh attempts, now.
-- One statement for any number of ids (`jobs retry ID...`, `jobs retry --failed`).
WITH j AS (
    UPDATE processing_jobs
    SET status = 'queued', retry_count = 0, next_attempt_at = now(), finished_at = NULL,
        lease_expires_at = NULL, worker_id = NULL, needs_attention = false, updated_at = now()
    WHERE id = ANY(%(ids)s::bigint[])
      AND (status = 'failed' OR (status = 'queued' AND next_attempt_at > now()))
    RETURNING id, document_id, kind
), d AS (
    UPDATE documents SET processing_status = 'queued'
    WHERE id IN (SELECT document_id FROM j WHERE ingestd_tracks_document(kind))
), n AS (
    SELECT pg_notify('ingestd_jobs', '') FROM j LIMIT 1
)
SELECT j.id, (SELECT count(*) FROM n) AS notified FROM j;

-- name: job_cancel
-- An admin cancels jobs that have not started: failed, with the reason (cli/jobs.py's
-- CANCELLED), never retried (nor by `jobs retry --failed`).
WITH j AS (
    UPDATE processing_jobs
    SET status = 'failed', finished_at = now(), updated_at = now(),
        error_message = %(reason)s
    WHERE id = ANY(%(ids)s::bigint[]) AND status = 'queued'
    RETURNING id, document_id, kind
), d AS (
    UPDATE documents SET processing_status = 'failed'
    WHERE id IN (SELECT document_id FROM j WHERE ingestd_tracks_document(kind))
)
SELECT id FROM j;

-- name: jobs_failed
-- `jobs retry --failed [--tenant T] [--kind K]`: the failed jobs it retries (job_retry),
-- not those an admin cancelled (their reason is %(cancelled)s).
SELECT j.id FROM processing_jobs j
WHERE j.status = 'failed' AND j.error_message IS DISTINCT FROM %(cancelled)s
  AND (%(tenant_id)s::bigint IS NULL OR j.tenant_id = %(tenant_id)s)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s)
ORDER BY j.id;

-- name: jobs_live
-- Which of these jobs are still queued or running (their work files are in use).
SELECT id FROM processing_jobs
WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('queued', 'processing');

-- name: pool_status
-- Per pool (issue 21), for `status` and /metrics: the ready jobs in its scope and the
-- oldest one's age, the jobs its workers claimed that still run, and its live lanes on
-- every host. The pools come as one JSON array of their scopes (Scope.params(): pool,
-- tenants, exclude, kinds; null: all), so one statement serves them all, and the queued
-- jobs are read once, grouped by tenant and kind, before the pools are matched (pools
-- may overlap: a pool of some kinds shares its tenants with the default pool). A live
-- lane holds a session named ingestd-lane:POOL:LANE (lane: jobs or short) in this
-- database; a killed host's sessions end with it, so nothing is left stale. A running
-- job without a pool was claimed before migration 0014, as the default pool's.
WITH p AS (
    SELECT * FROM jsonb_to_recordset(%(pools)s::jsonb)
        AS p(pool text, tenants text[], exclude text[], kinds text[])
), ready AS (
    SELECT t.name AS tenant, j.kind, count(*) AS n, min(j.created_at) AS oldest
    FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id
    WHERE j.status = 'queued' AND j.next_attempt_at <= now()
    GROUP BY t.name, j.kind
), running AS (
    SELECT coalesce(j.pool, 'default') AS pool, count(*) AS n
    FROM processing_jobs j WHERE j.status = 'processing'
    GROUP BY 1
), lanes AS (
    -- One session per live worker process, named ingestd-worker:POOL:JOBS:SHORT with its
    -- number of job slots and short slots (ingestd.queue.pools.worker_application_name).
    SELECT split_part(a.application_name, ':', 2) AS pool,
           sum(split_part(a.application_name, ':', 3)::int) AS jobs,
           sum(split_part(a.application_name, ':', 4)::int) AS short
    FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND a.application_name ~ '^ingestd-worker:[^:]+:[0-9]{1,4}:[0-9]{1,4}$'
    GROUP BY 1
)
SELECT p.pool,
       coalesce(sum(r.n), 0)::bigint AS ready,
       extract(epoch FROM now() - min(r.oldest))::bigint AS oldest_ready_seconds,
       coalesce(max(u.n), 0)::bigint AS running,
       coalesce(max(l.jobs), 0)::bigint AS jobs_lanes,
       coalesce(max(l.short), 0)::bigint AS short_lanes
FROM p
LEFT JOIN ready r ON (p.tenants IS NULL OR r.tenant = ANY(p.tenants))
                 AND (p.exclude IS NULL OR r.tenant <> ALL(p.exclude))
                 AND (p.kinds IS NULL OR r.kind = ANY(p.kinds))
LEFT JOIN running u ON u.pool = p.pool
LEFT JOIN lanes l ON l.pool = p.pool
GROUP BY p.pool;

-- name: job_kinds_sync
-- The facts of ingestd.jobkinds (table_rows, as JSON) into job_kinds: rows for kinds
-- no longer declared go, changed ones are updated, equal ones are not written at all.
WITH facts AS (
    SELECT f.kind, f.short, f.tracks_document, f.failed_event
    FROM jsonb_to_recordset(%(kinds)s::jsonb)
        AS f(kind text, short boolean, tracks_document boolean, failed_event text)
), gone AS (
    DELETE FROM job_kinds k WHERE NOT EXISTS (SELECT 1 FROM facts f WHERE f.kind = k.kind)
)
INSERT INTO job_kinds AS k (kind, short, tracks_document, failed_event)
SELECT kind, short, tracks_document, failed_event FROM facts
ON CONFLICT (kind) DO UPDATE
SET short = EXCLUDED.short, tracks_document = EXCLUDED.tracks_document,
    failed_event = EXCLUDED.failed_event
WHERE (k.short, k.tracks_document, k.failed_event)
      IS DISTINCT FROM (EXCLUDED.short, EXCLUDED.tracks_document, EXCLUDED.failed_event);
