-- Named queries. Each block starts with "-- name: <name>" and runs with
-- psycopg's %(param)s placeholders. Python code refers to queries by name only.

-- name: tenant_by_name
SELECT id, name, status, created_at FROM tenants WHERE name = %(name)s;

-- name: tenant_lock_for_intake
-- FOR SHARE: a concurrent suspend/delete waits for this intake transaction to end,
-- so no document can slip into a tenant that is being wiped.
SELECT id, name, status FROM tenants WHERE name = %(name)s FOR SHARE;

-- name: tenant_insert
INSERT INTO tenants (name, status) VALUES (%(name)s, %(status)s)
ON CONFLICT (name) DO NOTHING
RETURNING id, name, status, created_at;

-- name: tenant_list
-- Not '_system' (migration 0008): the appliance's own lane for notifications.
SELECT t.id, t.name, t.status, t.created_at,
       (SELECT count(*) FROM documents d WHERE d.tenant_id = t.id) AS documents,
       coalesce(q.weight, 1) AS weight, q.max_running
FROM tenants t LEFT JOIN queue_tenants q ON q.tenant_id = t.id
WHERE t.name <> '_system' ORDER BY t.name;

-- name: tenant_limits_set
-- Weight and cap (migration 0014); NULL leaves a value as it is, uncap removes the cap.
INSERT INTO queue_tenants (tenant_id, weight, max_running)
SELECT t.id, coalesce(%(weight)s::int, 1),
       CASE WHEN %(uncap)s::boolean THEN NULL ELSE %(max_running)s::int END
FROM tenants t WHERE t.name = %(name)s
ON CONFLICT (tenant_id) DO UPDATE
SET weight = coalesce(%(weight)s::int, queue_tenants.weight),
    max_running = CASE WHEN %(uncap)s::boolean THEN NULL
                       ELSE coalesce(%(max_running)s::int, queue_tenants.max_running) END
RETURNING weight, max_running;

-- name: tenant_set_status
UPDATE tenants SET status = %(status)s, updated_at = now()
WHERE name = %(name)s AND status = ANY(%(from_statuses)s)
RETURNING id, name, status;

-- name: job_insert
INSERT INTO processing_jobs (tenant_id, document_id, kind, payload, derive_title)
VALUES (%(tenant_id)s, %(document_id)s, %(kind)s, %(payload)s, %(derive_title)s)
RETURNING id;

-- name: intake_lock
-- The first round trip of an intake transaction: the tenant row FOR SHARE (a suspend or
-- delete-tenant waits for this transaction, so no file is linked behind its back) and
-- the document that already has these bytes, if any (then nothing is linked at all).
SELECT t.id, t.name, t.status,
       (SELECT d.id FROM documents d
        WHERE d.tenant_id = t.id AND d.sha256 = %(sha256)s) AS existing
FROM tenants t WHERE t.name = %(name)s
FOR SHARE OF t;

-- name: intake_record
-- The second and last, sent with its COMMIT: every row of the intake (migration 0012).
SELECT document, job, duplicate_of FROM intake_record(
    p_tenant_id => %(tenant_id)s, p_tenant => %(tenant)s, p_sha256 => %(sha256)s,
    p_size => %(size_bytes)s, p_mime => %(mime_type)s, p_extension => %(extension)s,
    p_filename => %(original_filename)s, p_source => %(source)s,
    p_subdir => %(source_subdir)s, p_archive_path => %(archive_path)s,
    p_title => %(title)s, p_issued => %(issued_date)s, p_trace => %(trace_id)s,
    p_job_kind => %(job_kind)s, p_job_payload => %(job_payload)s,
    p_derive_title => %(derive_title)s, p_tags => %(tags)s::text[],
    p_archived => %(archived)s, p_duplicate => %(duplicate)s);

-- name: status_documents
SELECT t.name AS tenant, d.processing_status AS status, count(*) AS n
FROM documents d JOIN tenants t ON t.id = d.tenant_id
GROUP BY t.name, d.processing_status ORDER BY 1, 2;

-- name: status_jobs
-- A job that ended because its document needs an operator (an encrypted PDF; job_fail's
-- needs_attention, migration 0018) is counted as 'attention', not failed, also once an
-- operator marked the document done.
SELECT t.name AS tenant, j.kind,
       CASE WHEN j.needs_attention THEN 'attention' ELSE j.status END AS status,
       count(*) AS n
FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;

-- name: verify_documents
SELECT d.id, t.name AS tenant, d.sha256, d.size_bytes, d.archive_path
FROM documents d JOIN tenants t ON t.id = d.tenant_id ORDER BY d.id;

-- name: integrity_counts
-- Invariant 1 as numbers: both must be 0.
SELECT
  (SELECT count(*) FROM documents d
    WHERE NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.document_id = d.id))
    AS documents_without_job,
  (SELECT count(*) FROM processing_jobs j
    WHERE j.document_id IS NOT NULL  -- tenant jobs and notifications have none
      AND NOT EXISTS (SELECT 1 FROM documents d WHERE d.id = j.document_id))
    AS jobs_without_document;

-- name: tags_ensure
-- Two statements, not one: a tag created by a concurrent intake is invisible to this
-- statement's snapshot (ON CONFLICT waits for it but returns nothing), while the next
-- statement (tags_link) sees it.
INSERT INTO tags (tenant_id, name)
SELECT %(tenant_id)s, name FROM unnest(%(names)s::text[]) AS name
ON CONFLICT ON CONSTRAINT tags_tenant_name_key DO NOTHING;

-- name: tags_link
INSERT INTO document_tags (document_id, tag_id, tenant_id, origin)
SELECT %(document_id)s, t.id, %(tenant_id)s, %(origin)s
FROM tags t WHERE t.tenant_id = %(tenant_id)s AND t.name = ANY(%(names)s::text[])
ON CONFLICT DO NOTHING;

-- name: document_tag_names
SELECT t.name FROM document_tags dt JOIN tags t ON t.id = dt.tag_id
WHERE dt.document_id = %(document_id)s ORDER BY t.name;

-- name: documents_list
-- parts: how many children a split batch has; part_of/position: a child's parent.
-- Filters (each NULL: not applied): name, a LIKE pattern matched case-insensitively on
-- the original file name (`--name GLOB`, translated by the CLI); source, a whole source
-- ("sftp:scanner1"), its kind ("sftp", "watch") or its account or folder ("scanner1");
-- since/until, the arrival time (created_at), since inclusive, until exclusive.
SELECT d.id, t.name AS tenant, d.title, d.issued_date, d.original_filename, d.source,
       d.source_subdir, d.processing_status, d.size_bytes, d.created_at, d.asn, d.trace_id,
       coalesce((SELECT array_agg(g.name ORDER BY g.name) FROM document_tags dt
                 JOIN tags g ON g.id = dt.tag_id WHERE dt.document_id = d.id), '{}') AS tags,
       (SELECT count(*) FROM document_parts p WHERE p.parent_id = d.id) AS parts,
       (SELECT min(p.parent_id) FROM document_parts p WHERE p.child_id = d.id) AS part_of,
       (SELECT min(p.position) FROM document_parts p WHERE p.child_id = d.id) AS position
FROM documents d JOIN tenants t ON t.id = d.tenant_id
WHERE (%(tenant)s::text IS NULL OR t.name = %(tenant)s)
  AND (%(name)s::text IS NULL OR d.original_filename ILIKE %(name)s::text)
  AND (%(source)s::text IS NULL OR d.source = %(source)s::text
       OR split_part(d.source, ':', 1) = %(source)s::text
       OR (strpos(d.source, ':') > 0
           AND substr(d.source, strpos(d.source, ':') + 1) = %(source)s::text))
  AND (%(since)s::timestamptz IS NULL OR d.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR d.created_at < %(until)s::timestamptz)
ORDER BY d.id DESC
LIMIT %(limit)s;

-- ===================================================================== queue (worker)
-- name: job_claim
-- The tenant comes along to save a round trip, but this statement's snapshot predates the
-- claim (which may wait for its turn): for a tenant created meanwhile it is NULL, and the
-- caller looks it up with job_tenant. Never an inner join: the claimed job would be lost.
-- The scope (ingestd.queue.pools.Scope): the pool recorded on the job, the share whose
-- serving order it follows, the tenants (NULL: all but those excluded) and kinds (NULL: all);
-- short_kinds: ingestd.queue.kinds.SHORT_KINDS (migration 0016), never listed in SQL.
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

-- ===================================================================== outcomes
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
    -- Not for a notification itself, which would notify about notifying.
    INSERT INTO operator_events (type, severity, tenant, detail, trace_id)
    SELECT CASE WHEN j.kind = 'deliver-webhook' THEN 'delivery.failed' ELSE 'job.failed' END,
           'error', t.name,
           jsonb_build_object('job_id', j.id, 'kind', j.kind, 'document_id', j.document_id,
                              'attempts', j.retry_count, 'error', j.error_message),
           j.payload->>'trace'
    FROM j JOIN tenants t ON t.id = j.tenant_id
    WHERE j.status = 'failed' AND j.kind <> 'notify'
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
       dc.placeholder_title, dc.derived_title, dc.derived_issued_date
FROM documents d
LEFT JOIN document_content dc ON dc.document_id = d.id
LEFT JOIN correspondents c ON c.id = d.correspondent_id
LEFT JOIN document_types y ON y.id = d.document_type_id
WHERE d.id = %(id)s AND d.tenant_id = %(tenant_id)s;

-- ===================================================================== analysis results
-- Written by the worker in the transaction that marks the analyze-document job done.

-- name: content_upsert
-- The search vector: title (weight A) and text (B), each in the tenant's configuration
-- (tenant_search, made by provision-tenant; 'german' stems by default) and 'simple'
-- (exact words, names, numbers). The text is capped so a 3,000-page
-- scan stays under tsvector's 1 MB limit; the whole text is still stored.
INSERT INTO document_content AS c (document_id, tenant_id, page_count, pages, content,
    languages, searchable_pdf, thumbnail, engine, placeholder_title, derived_title,
    derived_issued_date, search, analyzed_at)
SELECT d.id, d.tenant_id, %(page_count)s, %(pages)s, %(content)s, %(languages)s,
       %(searchable_pdf)s, %(thumbnail)s, %(engine)s, %(placeholder_title)s,
       %(derived_title)s, %(derived_issued_date)s,
       setweight(to_tsvector(cfg.config, d.title), 'A')
       || setweight(to_tsvector('simple', d.title), 'A')
       || setweight(to_tsvector(cfg.config, left(%(content)s, 200000)), 'B')
       || setweight(to_tsvector('simple', left(%(content)s, 200000)), 'B'),
       now()
FROM documents d
CROSS JOIN LATERAL (SELECT coalesce((SELECT config FROM tenant_search
                                     WHERE tenant_id = d.tenant_id), 'german') AS config) cfg
WHERE d.id = %(document_id)s AND d.tenant_id = %(tenant_id)s
ON CONFLICT (document_id) DO UPDATE SET
    page_count = EXCLUDED.page_count, pages = EXCLUDED.pages, content = EXCLUDED.content,
    languages = EXCLUDED.languages, searchable_pdf = EXCLUDED.searchable_pdf,
    thumbnail = EXCLUDED.thumbnail, engine = EXCLUDED.engine,
    placeholder_title = EXCLUDED.placeholder_title, derived_title = EXCLUDED.derived_title,
    derived_issued_date = EXCLUDED.derived_issued_date, search = EXCLUDED.search,
    analyzed_at = EXCLUDED.analyzed_at;

-- name: document_title_derived
-- Only over the title the handler saw (a placeholder, or what analysis set before): a
-- title a person set meanwhile is kept.
UPDATE documents SET title = %(title)s
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND title = %(title_was)s;

-- name: document_title_workflow
UPDATE documents SET title = %(title)s WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: document_issued_date
-- A date from the file name (set at intake) or by a person wins over one read from text:
-- only over the date the handler saw (none, or what analysis set before).
UPDATE documents SET issued_date = %(issued_date)s
WHERE id = %(id)s AND tenant_id = %(tenant_id)s
  AND issued_date IS NOT DISTINCT FROM %(issued_was)s::date;

-- name: correspondent_ensure
INSERT INTO correspondents (tenant_id, name) VALUES (%(tenant_id)s, %(name)s)
ON CONFLICT ON CONSTRAINT correspondents_tenant_name_key DO NOTHING;

-- name: document_correspondent
UPDATE documents SET correspondent_id =
    (SELECT id FROM correspondents WHERE tenant_id = %(tenant_id)s AND name = %(name)s)
WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: document_type_ensure
INSERT INTO document_types (tenant_id, name) VALUES (%(tenant_id)s, %(name)s)
ON CONFLICT ON CONSTRAINT document_types_tenant_name_key DO NOTHING;

-- name: document_document_type
UPDATE documents SET document_type_id =
    (SELECT id FROM document_types WHERE tenant_id = %(tenant_id)s AND name = %(name)s)
WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: workflow_ran
INSERT INTO document_workflow_runs (document_id, workflow, tenant_id)
VALUES (%(document_id)s, %(workflow)s, %(tenant_id)s)
ON CONFLICT DO NOTHING;

-- ===================================================================== tenant lifecycle
-- name: capability_sets_ensure
INSERT INTO capability_sets (tenant_id, name, capabilities, system)
SELECT %(tenant_id)s, s.name, s.caps, true
FROM jsonb_each(%(sets)s::jsonb) AS e(name, caps_json),
     LATERAL (SELECT e.name, ARRAY(SELECT jsonb_array_elements_text(e.caps_json)) AS caps) s
ON CONFLICT (tenant_id, name) DO UPDATE SET capabilities = EXCLUDED.capabilities
WHERE capability_sets.system;

-- name: people_ensure
-- The members named at `tenant create` as people (no password yet); a login known in
-- another spelling of case is that person (people_login_lower).
INSERT INTO people (login)
SELECT m FROM unnest(%(members)s::text[]) AS m
ON CONFLICT DO NOTHING;

-- name: tenant_members_add
INSERT INTO tenant_members (tenant_id, member, capability_set)
SELECT %(tenant_id)s, p.login, %(capability_set)s
FROM unnest(%(members)s::text[]) AS m JOIN people p ON lower(p.login) = lower(m)
ON CONFLICT (tenant_id, member) DO NOTHING;

-- name: tenant_search_ensure
INSERT INTO tenant_search (tenant_id, config) VALUES (%(tenant_id)s, %(config)s::regconfig)
ON CONFLICT (tenant_id) DO NOTHING;

-- name: tenant_activate_provisioned
UPDATE tenants SET status = 'active', updated_at = now()
WHERE id = %(tenant_id)s AND status = 'creating';

-- name: tenant_running_jobs
-- Other jobs of the tenant still running (started before it was marked deleting).
SELECT count(*) AS n FROM processing_jobs
WHERE tenant_id = %(tenant_id)s AND status = 'processing' AND id <> %(job_id)s;

-- name: tenant_nonce_use
-- First use wins; the same job may come back (a retry), another job may not (a replay).
WITH ins AS (
    INSERT INTO tenant_delete_nonces (nonce, job_id, tenant_id, tenant_name, action)
    VALUES (%(nonce)s, %(job_id)s, %(tenant_id)s, %(tenant_name)s, %(action)s)
    ON CONFLICT (nonce) DO NOTHING
    RETURNING job_id
)
SELECT job_id FROM ins
UNION ALL
SELECT job_id FROM tenant_delete_nonces WHERE nonce = %(nonce)s
LIMIT 1;

-- name: tenant_queued_jobs_delete
DELETE FROM processing_jobs
WHERE tenant_id = %(tenant_id)s AND id <> %(job_id)s AND status <> 'processing';

-- name: tenant_wipe
-- Every row of the tenant's data, children first. Its jobs go with its documents (ON
-- DELETE CASCADE) and by tenant; the delete job itself stays unless the tenant goes.
WITH docs AS (DELETE FROM documents WHERE tenant_id = %(tenant_id)s RETURNING id),
     jobs AS (DELETE FROM processing_jobs
              WHERE tenant_id = %(tenant_id)s AND id <> %(job_id)s RETURNING id)
SELECT (SELECT count(*) FROM docs) AS documents, (SELECT count(*) FROM jobs) AS jobs;

-- name: tenant_wipe_taxonomy
WITH t AS (DELETE FROM tags WHERE tenant_id = %(tenant_id)s),
     c AS (DELETE FROM correspondents WHERE tenant_id = %(tenant_id)s),
     y AS (DELETE FROM document_types WHERE tenant_id = %(tenant_id)s),
     m AS (DELETE FROM tenant_members WHERE tenant_id = %(tenant_id)s),
     s AS (DELETE FROM tenant_search WHERE tenant_id = %(tenant_id)s)
SELECT 1;

-- name: tenant_wipe_capabilities
DELETE FROM capability_sets WHERE tenant_id = %(tenant_id)s;

-- name: tenant_remove
-- Last: the delete job's own row (already marked done in this transaction), the
-- round-robin row, the tenant.
WITH j AS (DELETE FROM processing_jobs WHERE tenant_id = %(tenant_id)s)
DELETE FROM tenants WHERE id = %(tenant_id)s AND status = 'deleting';

-- name: tenant_leave_empty
UPDATE tenants SET status = %(status)s, updated_at = now()
WHERE id = %(tenant_id)s AND status = 'deleting';

-- name: tenant_nonce_finished
UPDATE tenant_delete_nonces SET finished_at = now() WHERE nonce = %(nonce)s;

-- name: tenant_mark_deleting
UPDATE tenants SET status = 'deleting', updated_at = now()
WHERE name = %(name)s AND status IN ('creating', 'active', 'suspended', 'deleting')
RETURNING id, name, status;

-- ===================================================================== purge
-- name: document_for_purge
SELECT d.id, d.sha256, d.archive_path, d.created_at, d.trashed_at,
       (SELECT count(*) FROM documents o
        WHERE o.archive_path = d.archive_path AND o.id <> d.id) AS sharing
FROM documents d WHERE d.id = %(id)s AND d.tenant_id = %(tenant_id)s;

-- name: document_trash
UPDATE documents SET trashed_at = coalesce(trashed_at, now())
WHERE id = %(id)s AND tenant_id = %(tenant_id)s
RETURNING id, trashed_at;

-- name: document_purge
-- Its tags, text, workflow runs and jobs (this purge job too) go by ON DELETE CASCADE.
DELETE FROM documents WHERE id = %(id)s AND tenant_id = %(tenant_id)s
  AND trashed_at IS NOT NULL;

-- name: search_timeout_set
-- The statement timeout of one search (ingestd/search/query.py), for the rest of this
-- transaction; returns the one it replaces, which the search sets back when done.
SELECT current_setting('statement_timeout') AS was,
       set_config('statement_timeout', %(timeout)s, true) AS now;

-- name: search_terms
-- What query `search` looks for (ingestd/cli/search.py runs both): the web-search query
-- (words ANDed, "a phrase", or, -word) in the tenant's configuration (tenant_search,
-- 'german' by default: a word finds its inflections) and in 'simple' (a name or number
-- finds itself); of its lexemes those looked for inside longer words, and the LIKE
-- patterns a compound match needs one of (migration 0013). Passed on as values, so the
-- planner of `search` sees them and picks the trigram index by their selectivity.
WITH cfg AS (
    SELECT coalesce((SELECT config FROM tenant_search WHERE tenant_id = %(tenant_id)s),
                    'german') AS config
), q AS (
    SELECT cfg.config, websearch_to_tsquery(cfg.config, %(query)s)
           || websearch_to_tsquery('simple', %(query)s) AS query
    FROM cfg
)
SELECT q.config::text AS config, q.query::text AS tsquery,
       search_infixes(q.query::text) AS infixes, search_anchors(q.query) AS anchors
FROM q;

-- name: search
-- Tenant-scoped search in three tiers: name hits, then exact ones, then compound ones.
-- exact: the full-text query (search_terms) matches the document's vector; ts_rank_cd.
-- compound (unless compounds is false): a query word of 3+ characters, not only digits,
-- occurs inside a longer word - 'rechnung' in "Abschlagsrechnung", the stem 'kundig' in
-- "Kündigungsfrist" - found by the trigram index on search_words. The document's vector
-- with the query words found inside its words added must match the same query: `or` and
-- -word keep their meaning (a negated word excludes a document that has it inside a
-- word too), a phrase's words must still be whole words in a row (only those have
-- positions). Searched only while the exact tier leaves room below the limit (else no
-- compound hit would be shown). Snippets mark the words the query was found in.
-- name (issue 30): the query as typed occurs in the original file name (%(name_pattern)s,
-- a case-insensitive LIKE pattern, NULL for a query under 3 characters; found through
-- the trigram index of migration 0019): `Scan_0815` finds the scan
-- whose title became its sender's name, analysed or not. Ranked above the others (a file
-- name is what the user remembers); a document is listed once, in its best tier.
WITH q AS (
    SELECT %(config)s::regconfig AS config, %(tsquery)s::tsquery AS query
), named AS MATERIALIZED (
    SELECT d.id AS document_id, 1::real AS rank
    FROM documents d
    WHERE %(name_pattern)s::text IS NOT NULL AND d.tenant_id = %(tenant_id)s
      AND d.original_filename ILIKE %(name_pattern)s::text
    ORDER BY d.id DESC
    LIMIT %(limit)s
), exact AS MATERIALIZED (
    SELECT c.document_id, ts_rank_cd(c.search, %(tsquery)s::tsquery) AS rank
    FROM document_content c
    WHERE c.tenant_id = %(tenant_id)s AND c.search @@ %(tsquery)s::tsquery
), compound AS (
    SELECT c.document_id, ts_rank(c.search || x.found, %(tsquery)s::tsquery) AS rank
    FROM document_content c
    CROSS JOIN LATERAL (
        SELECT array_to_tsvector(array_agg(l)) AS found
        FROM unnest(%(infixes)s::text[]) AS l
        WHERE strpos(c.search_words, l) > 0) x
    WHERE %(compounds)s AND (SELECT count(*) FROM exact) < %(limit)s
      AND c.tenant_id = %(tenant_id)s
      AND c.search_words LIKE ANY (%(anchors)s::text[])
      AND NOT c.search @@ %(tsquery)s::tsquery
      AND c.search || x.found @@ %(tsquery)s::tsquery
), best AS (
    SELECT DISTINCT ON (document_id) document_id, tier, rank
    FROM (SELECT document_id, 0 AS tier, rank FROM named
          UNION ALL
          SELECT document_id, 1, rank FROM exact
          UNION ALL
          SELECT document_id, 2, rank FROM compound) h
    ORDER BY document_id, tier, rank DESC
), top AS (
    SELECT document_id, tier, rank FROM best
    ORDER BY tier, rank DESC, document_id DESC
    LIMIT %(limit)s
)
SELECT d.id, d.title, d.issued_date, d.original_filename, c.page_count,
       CASE t.tier WHEN 0 THEN 'name' WHEN 1 THEN 'exact' ELSE 'compound' END AS match,
       t.rank,
       CASE WHEN c.document_id IS NOT NULL THEN ts_headline(
           CASE t.tier WHEN 2 THEN 'simple'::regconfig ELSE q.config END,
           left(c.content, 100000),
           CASE t.tier WHEN 2 THEN coalesce(q.query || (
               SELECT string_agg('''' || replace(replace(w, '\', '\\'), '''', '''''') || '''',
                                 ' | ')::tsquery
               FROM unnest(tsvector_to_array(c.search)) AS w
               WHERE EXISTS (SELECT FROM unnest(%(infixes)s::text[]) AS l
                             WHERE strpos(w, l) > 0)), q.query) ELSE q.query END,
           'MaxFragments=2, MaxWords=18, MinWords=6, StartSel=«, StopSel=»') END AS snippet
FROM top t
JOIN documents d ON d.id = t.document_id
LEFT JOIN document_content c ON c.document_id = t.document_id
CROSS JOIN q
ORDER BY t.tier, t.rank DESC, d.id DESC;

-- ===================================================================== jobs (admin)
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

-- name: status_queue
-- Per tenant: ready, waiting for a retry, running, oldest ready job, failures in the last hour.
SELECT t.name AS tenant,
       count(*) FILTER (WHERE j.status = 'queued' AND j.next_attempt_at <= now()) AS ready,
       count(*) FILTER (WHERE j.status = 'queued' AND j.next_attempt_at > now()) AS retrying,
       count(*) FILTER (WHERE j.status = 'processing') AS running,
       extract(epoch FROM now() - min(j.created_at)
               FILTER (WHERE j.status = 'queued' AND j.next_attempt_at <= now()))::bigint
           AS oldest_ready_seconds,
       count(*) FILTER (WHERE j.status = 'failed' AND j.finished_at > now() - interval '1 hour'
                          -- a document in attention is not a failed job (status_jobs)
                          AND NOT j.needs_attention)
           AS failed_last_hour
FROM tenants t JOIN processing_jobs j ON j.tenant_id = t.id
WHERE j.status IN ('queued', 'processing')
   OR (j.status = 'failed' AND j.finished_at > now() - interval '1 hour')
GROUP BY t.name ORDER BY t.name;

-- name: tenant_statuses
-- Every tenant's status, for the SFTP server's login check (refreshed every few seconds).
SELECT name, status FROM tenants;

-- ===================================================================== outbox
-- name: workflow_webhook_delivered
UPDATE document_workflow_runs SET webhook_delivered_at = now()
WHERE document_id = %(document_id)s AND workflow = %(workflow)s AND tenant_id = %(tenant_id)s;

-- name: operator_event_insert
-- Events decided outside a transaction (the daemon: a quarantined file, an SFTP ban) carry
-- their own event_id, so one buffered on disk while Postgres was down is inserted once.
INSERT INTO operator_events (event_id, type, severity, tenant, detail, trace_id, created_at)
VALUES (%(event_id)s::uuid, %(type)s, %(severity)s, %(tenant)s, %(detail)s, %(trace_id)s,
        %(created_at)s)
ON CONFLICT (event_id) DO NOTHING;

-- name: operator_event
SELECT event_id, type, severity, tenant, detail, trace_id, created_at
FROM operator_events WHERE event_id = %(event_id)s::uuid;

-- name: operator_events_to_relay
-- New events, oldest first; SKIP LOCKED: workers relaying at once take different rows.
SELECT id, event_id, type, severity, tenant, detail, trace_id, created_at
FROM operator_events WHERE relayed_at IS NULL
ORDER BY id LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: operator_events_relayed
UPDATE operator_events SET relayed_at = now() WHERE id = ANY(%(ids)s::bigint[]);

-- name: system_tenant
SELECT id FROM tenants WHERE name = '_system';

-- name: operator_events_prune
DELETE FROM operator_events
WHERE id IN (SELECT id FROM operator_events
             WHERE created_at < now() - make_interval(secs => %(age)s) LIMIT 5000);

-- ===================================================================== attention
-- name: documents_attention
SELECT d.id, t.name AS tenant, d.original_filename, d.title, d.source, d.created_at,
       d.attention_reason, d.trace_id, d.archive_path
FROM documents d JOIN tenants t ON t.id = d.tenant_id
WHERE d.processing_status = 'attention'
  AND (%(tenant)s::text IS NULL OR t.name = %(tenant)s)
ORDER BY d.id
LIMIT %(limit)s;

-- name: document_mark_done
-- An operator accepts a document that cannot be analysed as it is: done, without text.
-- The reason stays, prefixed, so the record says why it has none.
UPDATE documents
SET processing_status = 'done',
    attention_reason = 'marked done without text by an operator: ' || attention_reason
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND processing_status = 'attention'
RETURNING id;


-- ===================================================================== batch split (0009)
-- name: split_parent
-- The batch a split-batch job cuts, with what its children inherit.
SELECT d.id, d.tenant_id, d.sha256, d.size_bytes, d.archive_path, d.original_filename,
       d.title, d.mime_type, d.source, d.source_subdir, d.trace_id, d.created_at,
       coalesce((SELECT array_agg(g.name ORDER BY g.name) FROM document_tags dt
                 JOIN tags g ON g.id = dt.tag_id
                 WHERE dt.document_id = d.id AND dt.origin = 'intake'), '{}') AS intake_tags
FROM documents d WHERE d.id = %(id)s AND d.tenant_id = %(tenant_id)s;

-- name: asn_owners
-- Which of these ASNs other documents of the tenant already carry.
SELECT id, asn FROM documents
WHERE tenant_id = %(tenant_id)s AND asn = ANY(%(asns)s::bigint[]) AND id <> %(parent_id)s
ORDER BY asn;

-- name: document_insert_child
-- A child of a batch; ON CONFLICT: the tenant already has these exact bytes (that
-- document becomes the part, and is not analysed again).
INSERT INTO documents (tenant_id, sha256, size_bytes, mime_type, extension,
                       original_filename, source, source_subdir, archive_path,
                       title, processing_status, trace_id, asn)
VALUES (%(tenant_id)s, %(sha256)s, %(size_bytes)s, 'application/pdf', 'pdf',
        %(original_filename)s, %(source)s, %(source_subdir)s, %(archive_path)s,
        %(title)s, 'queued', %(trace_id)s, %(asn)s)
ON CONFLICT ON CONSTRAINT documents_tenant_sha256_key DO NOTHING
RETURNING id;

-- name: document_by_sha256_any
SELECT id FROM documents WHERE tenant_id = %(tenant_id)s AND sha256 = %(sha256)s;

-- name: document_part_insert
INSERT INTO document_parts (parent_id, position, first_page, last_page, child_id, tenant_id)
VALUES (%(parent_id)s, %(position)s, %(first_page)s, %(last_page)s, %(child_id)s,
        %(tenant_id)s);

-- name: document_mark_split
-- After job_done set it 'done' in the same transaction: a split batch says so.
UPDATE documents SET processing_status = 'split', attention_reason = NULL
WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: document_as_whole
-- A "batch" without a separator is one document: analysed as it is (its analyze job is
-- queued in the same transaction), with the ASN its pages carry.
UPDATE documents SET processing_status = 'queued', asn = coalesce(%(asn)s, asn)
WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: document_lineage
-- A document's parent (if it is a child) and its children (if it is a batch).
SELECT 'parent' AS relation, p.parent_id AS id, p.position, p.first_page, p.last_page,
       d.title, d.processing_status, d.asn,
       (SELECT count(*) FROM document_parts q WHERE q.parent_id = p.parent_id) AS parts
FROM document_parts p JOIN documents d ON d.id = p.parent_id
WHERE p.child_id = %(id)s
UNION ALL
SELECT 'child', p.child_id, p.position, p.first_page, p.last_page, d.title,
       d.processing_status, d.asn,
       (SELECT count(*) FROM document_parts q WHERE q.parent_id = p.parent_id)
FROM document_parts p JOIN documents d ON d.id = p.child_id
WHERE p.parent_id = %(id)s
ORDER BY relation DESC, position;

-- name: document_show
SELECT d.id, t.name AS tenant, d.title, d.issued_date, d.original_filename, d.source,
       d.source_subdir, d.processing_status, d.attention_reason, d.size_bytes, d.sha256,
       d.archive_path, d.mime_type, d.created_at, d.asn, d.trace_id,
       c.name AS correspondent, y.name AS document_type,
       coalesce((SELECT array_agg(g.name ORDER BY g.name) FROM document_tags dt
                 JOIN tags g ON g.id = dt.tag_id WHERE dt.document_id = d.id), '{}') AS tags
FROM documents d JOIN tenants t ON t.id = d.tenant_id
LEFT JOIN correspondents c ON c.id = d.correspondent_id
LEFT JOIN document_types y ON y.id = d.document_type_id
WHERE d.id = %(id)s AND (%(tenant)s::text IS NULL OR t.name = %(tenant)s);

-- name: verify_lineage
-- Lineage problems: a split batch without parts, parts that overlap or run backwards.
SELECT d.id, 'split batch without children' AS detail
FROM documents d
WHERE d.processing_status = 'split'
  AND NOT EXISTS (SELECT 1 FROM document_parts p WHERE p.parent_id = d.id)
UNION ALL
SELECT p.parent_id, format('part %s (pages %s-%s) overlaps part %s (pages %s-%s)',
                           p.position, p.first_page, p.last_page,
                           q.position, q.first_page, q.last_page)
FROM document_parts p JOIN document_parts q
  ON q.parent_id = p.parent_id AND q.position = p.position + 1
WHERE q.first_page <= p.last_page
ORDER BY 1;

-- name: split_state
-- For `documents split` and `documents analyze`: is it split already, and the policy its
-- last split-batch job carried (the policy of the moment it arrived).
SELECT d.id, d.processing_status, d.trace_id, d.original_filename, d.mime_type,
       (SELECT count(*) FROM document_parts p WHERE p.parent_id = d.id) AS parts,
       (SELECT j.payload -> 'policy' FROM processing_jobs j
        WHERE j.document_id = d.id AND j.kind = 'split-batch'
        ORDER BY j.id DESC LIMIT 1) AS policy,
       EXISTS (SELECT 1 FROM processing_jobs j WHERE j.document_id = d.id
               AND j.status IN ('queued', 'processing')) AS busy
FROM documents d WHERE d.id = %(id)s AND d.tenant_id = %(tenant_id)s;

-- name: documents_reanalyze
-- `documents analyze --all` (through queue.enqueue.enqueue_each): one job of %(kind)s with
-- %(payload)s, plus each document's id and trace, for every document of an active tenant,
-- in one statement. Left out, and counted: one in the trash (it waits for its purge), a
-- split batch (analysed through its children, as split_state tells `documents analyze`),
-- one with a job of %(kind)s still queued (it runs with today's rules anyway). With
-- count_only nothing is inserted: the counts for the confirmation.
WITH scope AS (
    SELECT d.id, d.tenant_id, d.trace_id,
           CASE WHEN d.trashed_at IS NOT NULL THEN 'trashed'
                WHEN EXISTS (SELECT 1 FROM document_parts p WHERE p.parent_id = d.id)
                    THEN 'batch'
                WHEN EXISTS (SELECT 1 FROM processing_jobs j WHERE j.document_id = d.id
                             AND j.kind = %(kind)s AND j.status = 'queued')
                    THEN 'queued'
           END AS skipped
    FROM documents d JOIN tenants t ON t.id = d.tenant_id
    WHERE d.tenant_id = %(tenant_id)s AND t.status = 'active'
), jobs AS (
    INSERT INTO processing_jobs (tenant_id, document_id, kind, payload, derive_title)
    SELECT tenant_id, id, %(kind)s,
           %(payload)s::jsonb || jsonb_build_object('document_id', id)
               || CASE WHEN trace_id IS NULL THEN '{}'::jsonb
                       ELSE jsonb_build_object('trace', trace_id) END, false
    FROM scope WHERE skipped IS NULL AND NOT %(count_only)s
    ORDER BY id
    RETURNING id
)
SELECT (SELECT count(*) FROM jobs) AS queued,
       count(*) FILTER (WHERE skipped IS NULL) AS eligible,
       count(*) FILTER (WHERE skipped = 'trashed') AS trashed,
       count(*) FILTER (WHERE skipped = 'batch') AS batches,
       count(*) FILTER (WHERE skipped = 'queued') AS already_queued
FROM scope;

-- name: jobs_live
-- Which of these jobs are still queued or running (their work files are in use).
SELECT id FROM processing_jobs
WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('queued', 'processing');

-- ===================================================================== audit trail
-- name: audit_append
-- One entry at the end of a chain (the function in migration 0010 builds and hashes it).
SELECT seq, hash FROM audit_append(%(chain)s, %(tenant)s, %(kind)s, %(document_id)s,
                                   %(detail)s);

-- name: audit_chain_of_tenant
-- A tenant's chain by name (its id); NULL when no such tenant exists.
SELECT id AS chain FROM tenants WHERE name = %(tenant)s;

-- name: audit_chains
-- Every chain with its head, the tenant's name (NULL once it is deleted) and its newest
-- seal.
SELECT h.chain, h.seq, h.hash, t.name AS tenant
FROM audit_heads h LEFT JOIN tenants t ON t.id = h.chain
ORDER BY h.chain;

-- name: audit_entries
-- A chain's entries in order (verify streams these).
SELECT seq, kind, tenant, document_id, body, prev_hash, hash
FROM audit_events WHERE chain = %(chain)s ORDER BY seq;

-- name: audit_entries_all
-- Every entry of every chain in order (verify streams these).
SELECT chain, seq, kind, tenant, document_id, body, prev_hash, hash
FROM audit_events ORDER BY chain, seq;

-- name: audit_entries_between
-- A chain's entries made in [from, to) (export).
SELECT seq, body, prev_hash, hash FROM audit_events
WHERE chain = %(chain)s AND at >= %(from)s AND at < %(to)s ORDER BY seq;

-- name: audit_seals_of
SELECT id, chain, seq, head, body, signature, public_key, tsa_reply, made_at
FROM audit_seals WHERE chain = %(chain)s ORDER BY id;

-- name: audit_seals_all
-- Every seal without its roster (a roster per hourly seal adds up; verify reads the
-- newest one only: audit_newest_appliance_seal).
SELECT id, chain, seq, head, body, signature, public_key, tsa_reply, made_at
FROM audit_seals ORDER BY chain, id;

-- name: audit_newest_appliance_seal
-- The newest seal of the appliance's chain that carries a roster, with it.
SELECT id, chain, seq, head, body, signature, public_key, tsa_reply, made_at, roster
FROM audit_seals WHERE chain = 0 AND roster IS NOT NULL ORDER BY seq DESC, id DESC LIMIT 1;

-- name: audit_roster_heads
-- Every tenant chain's head, for the roster a seal of the appliance's chain signs.
SELECT chain, seq, hash FROM audit_heads WHERE chain <> 0 AND seq > 0 ORDER BY chain;

-- name: audit_seal_keys
-- The keys seals were made with (adopting a key made before its entry in chain 0).
SELECT DISTINCT public_key FROM audit_seals;

-- name: audit_key_entries
-- The appliance's sealing keys as its own chain records them, oldest first.
SELECT seq, kind, body FROM audit_events
WHERE chain = 0 AND kind IN ('key.created', 'key.rotated') ORDER BY seq;

-- name: seal_lock
-- One seal run at a time, and no verify snapshot in the middle of one (a run seals the
-- tenant chains, then the appliance's chain that lists them): sealing holds it, verify
-- takes it shared before its snapshot.
SELECT pg_advisory_lock(%(k)s);

-- name: seal_lock_shared
SELECT pg_advisory_lock_shared(%(k)s);

-- name: seal_unlock
SELECT pg_advisory_unlock(%(k)s);

-- name: seal_unlock_shared
SELECT pg_advisory_unlock_shared(%(k)s);

-- name: audit_head_for_seal
-- A chain's head, locked so that nothing is appended between reading it and sealing it;
-- with the kind of its last entry (a chain whose last entry is its seal needs no new one).
SELECT h.chain, h.seq, h.hash, e.kind AS last_kind, t.name AS tenant
FROM audit_heads h
LEFT JOIN audit_events e ON e.chain = h.chain AND e.seq = h.seq
LEFT JOIN tenants t ON t.id = h.chain
WHERE h.chain = %(chain)s
FOR UPDATE OF h;

-- name: audit_seal_insert
INSERT INTO audit_seals (chain, seq, head, body, signature, public_key, tsa_reply, roster)
VALUES (%(chain)s, %(seq)s, %(head)s, %(body)s, %(signature)s, %(public_key)s, %(tsa_reply)s,
        %(roster)s)
RETURNING id;

-- name: audit_documents
-- The document rows verify checks against the chains.
SELECT id, tenant_id, sha256, archive_path FROM documents;

-- name: snapshot_read_only
-- First in a transaction: every statement after it sees the same snapshot.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: audit_head_of
SELECT seq, hash FROM audit_heads WHERE chain = %(chain)s;

-- ===================================================================== retention, holds
-- name: retention_documents
-- Each document of a tenant (or the one given) with its retention period, the last day
-- it must be kept, and whether a legal hold (its own or the tenant's) is on it.
WITH docs AS (
    SELECT d.id, d.created_at, retention_years(d.id, %(rules)s, %(default_years)s) AS years,
           EXISTS (SELECT 1 FROM legal_holds h
                   WHERE h.tenant_id = d.tenant_id AND h.released_at IS NULL
                     AND (h.document_id IS NULL OR h.document_id = d.id)) AS held
    FROM documents d
    WHERE d.tenant_id = %(tenant_id)s
      AND (%(document_id)s::bigint IS NULL OR d.id = %(document_id)s::bigint)
)
SELECT id, created_at, years, held, retention_until(created_at, years) AS retain_until
FROM docs ORDER BY id;

-- name: retention_summary
-- What stands in the way of removing a tenant's documents: how many are within
-- retention (and the earliest expiry among them) and how many are under a legal hold.
WITH docs AS (
    SELECT retention_until(d.created_at, retention_years(d.id, %(rules)s, %(default_years)s))
               AS retain_until,
           EXISTS (SELECT 1 FROM legal_holds h
                   WHERE h.tenant_id = d.tenant_id AND h.released_at IS NULL
                     AND (h.document_id IS NULL OR h.document_id = d.id)) AS held
    FROM documents d WHERE d.tenant_id = %(tenant_id)s
)
SELECT count(*) FILTER (WHERE retain_until >= %(today)s) AS retained,
       min(retain_until) FILTER (WHERE retain_until >= %(today)s) AS earliest_expiry,
       count(*) FILTER (WHERE held) AS held,
       (SELECT count(*) FROM legal_holds h
        WHERE h.tenant_id = %(tenant_id)s AND h.released_at IS NULL
          AND h.document_id IS NULL) AS tenant_holds
FROM docs;

-- name: retention_policy_of
SELECT fingerprint FROM retention_policies WHERE tenant_id = %(tenant_id)s;

-- name: retention_policy_record
INSERT INTO retention_policies (tenant_id, fingerprint, policy)
VALUES (%(tenant_id)s, %(fingerprint)s, %(policy)s)
ON CONFLICT (tenant_id) DO UPDATE
SET fingerprint = EXCLUDED.fingerprint, policy = EXCLUDED.policy, recorded_at = now();

-- name: hold_set
INSERT INTO legal_holds (tenant_id, document_id, reason)
VALUES (%(tenant_id)s, %(document_id)s, %(reason)s)
ON CONFLICT (tenant_id, coalesce(document_id, 0)) WHERE released_at IS NULL DO NOTHING
RETURNING id, set_at;

-- name: hold_release
UPDATE legal_holds SET released_at = now()
WHERE tenant_id = %(tenant_id)s AND released_at IS NULL
  AND document_id IS NOT DISTINCT FROM %(document_id)s::bigint
RETURNING id, reason;

-- name: hold_list
SELECT h.id, t.name AS tenant, h.document_id, h.reason, h.set_at
FROM legal_holds h JOIN tenants t ON t.id = h.tenant_id
WHERE h.released_at IS NULL AND (%(tenant_id)s::bigint IS NULL OR h.tenant_id = %(tenant_id)s)
ORDER BY t.name, h.document_id NULLS FIRST;

-- name: document_of_tenant
SELECT id FROM documents WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- ===================================================================== pools (status, metrics)
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
    SELECT split_part(a.application_name, ':', 2) AS pool,
           count(*) FILTER (WHERE split_part(a.application_name, ':', 3) = 'jobs') AS jobs,
           count(*) FILTER (WHERE split_part(a.application_name, ':', 3) = 'short') AS short
    FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND split_part(a.application_name, ':', 1) = 'ingestd-lane'
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

-- name: status_queue_limits
-- The weight and cap (migration 0014) of the tenants `status` lists in its queue table.
SELECT t.name AS tenant, coalesce(q.weight, 1) AS weight, q.max_running
FROM tenants t LEFT JOIN queue_tenants q ON q.tenant_id = t.id
WHERE t.name = ANY(%(tenants)s::text[]);

-- name: standbys_behind
-- The WAL position to wait for (NULL: the insert position, just after a COMMIT: its
-- record is in, even with synchronous_commit off) and how many streaming standbys have
-- not written it yet (Database.wait_for_standbys). write_lsn is NULL to a role without
-- pg_read_all_stats: such standbys are not waited for.
SELECT w.lsn::text AS lsn, count(r.pid) FILTER (WHERE r.write_lsn < w.lsn) AS behind,
       count(r.pid) AS standbys
FROM (SELECT coalesce(%(lsn)s::pg_lsn, pg_current_wal_insert_lsn()) AS lsn) w
LEFT JOIN pg_stat_replication r ON r.state = 'streaming'
GROUP BY w.lsn;

-- ---- backup and restore (issue 30, point 5) ----------------------------------------------
-- name: restore_tables_in_use
-- Tables a database already holds: restore refuses such a database without --force.
SELECT count(*) AS n FROM pg_catalog.pg_tables
WHERE schemaname NOT IN ('pg_catalog', 'information_schema');

-- name: backup_archive_paths
-- The archive files the (restored) database knows.
SELECT archive_path FROM documents;

-- ===================================================================== status says why (#30)
-- name: status_refusals
-- Files refused and quarantined in the last %(hours)s hours, by tenant and reason: every
-- one, from their arrival rows (0017; written by intake, the hot folders and the SFTP
-- server alike). Files that arrived in the window (the arrived_at index; a refusal is
-- decided as the file arrives).
SELECT tenant, outcome, reason, count(*) AS n, max(decided_at) AS last_at
FROM arrivals
WHERE outcome IN ('refused', 'quarantined')
  AND arrived_at > now() - make_interval(hours => %(hours)s)
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;

-- name: status_attention_documents
-- Documents that need an operator (ingestd_documents_attention, `status`), by tenant.
SELECT t.name AS tenant, count(*) AS n
FROM documents d JOIN tenants t ON t.id = d.tenant_id
WHERE d.processing_status = 'attention'
GROUP BY t.name ORDER BY t.name;

-- ===================================================================== hand-out (issue 30)
-- name: document_handout
-- `documents get` (ingestd/archive/handout.py): what handing a document out needs, its
-- searchable PDF (relative to paths.derived) if analysis made one.
SELECT d.id, t.name AS tenant, d.original_filename, d.extension, d.sha256, d.size_bytes,
       d.archive_path, d.mime_type, d.processing_status, d.attention_reason, d.trace_id,
       c.searchable_pdf, c.document_id IS NOT NULL AS has_content
FROM documents d JOIN tenants t ON t.id = d.tenant_id
LEFT JOIN document_content c ON c.document_id = d.id
WHERE d.id = %(id)s AND (%(tenant)s::text IS NULL OR t.name = %(tenant)s);

-- ===================================================================== arrivals (0017, #30)
-- name: arrival_note
-- One file's arrival as decided (ingestd/arrivals/record.py); idempotent by trace id.
SELECT arrival_upsert(%(trace_id)s, %(tenant)s, %(source)s, %(origin)s, %(subdir)s,
                      %(original_name)s, %(size_bytes)s, %(sha256)s, %(arrived_at)s,
                      %(decided_at)s, %(outcome)s, %(document_id)s, %(reason)s, %(detail)s,
                      %(location)s) AS id;

-- name: arrival_intake
-- In the intake transaction, after intake_record or the duplicate's audit entry: the
-- document holding these bytes is this file's (archived) or an earlier one's (duplicate).
SELECT arrival_upsert(%(trace_id)s, %(tenant)s, %(source)s, %(origin)s, %(subdir)s,
                      %(original_name)s, %(size_bytes)s, %(sha256)s, %(arrived_at)s,
                      now(),  -- the transaction's time, as the document's and its job's
                      CASE WHEN d.trace_id IS NOT DISTINCT FROM %(trace_id)s
                                AND d.created_at >= now()
                           THEN 'archived' ELSE 'duplicate' END,
                      d.id, '', '', NULL) AS id
FROM documents d
WHERE d.tenant_id = %(tenant_id)s AND d.sha256 = %(sha256)s;

-- name: arrivals_find
-- `ingestd documents find`: arrivals, newest first, with their document's state; and
-- documents that have no arrival row (archived before migration 0017) as archived ones.
WITH found AS (
    SELECT a.trace_id, a.tenant, a.source, a.origin, a.subdir, a.original_name,
           a.size_bytes, a.sha256, a.arrived_at, a.decided_at, a.outcome, a.document_id,
           a.reason, a.detail, a.location
    FROM arrivals a
    UNION ALL
    SELECT d.trace_id, t.name, split_part(d.source, ':', 1),
           substr(d.source, length(split_part(d.source, ':', 1)) + 2), d.source_subdir,
           d.original_filename, d.size_bytes, d.sha256, d.created_at, d.created_at,
           'archived', d.id, '', '', NULL
    FROM documents d JOIN tenants t ON t.id = d.tenant_id
    WHERE NOT EXISTS (SELECT 1 FROM arrivals a WHERE a.trace_id = d.trace_id)
)
SELECT f.*, d.title, d.processing_status AS document_status, d.archive_path
FROM found f
LEFT JOIN tenants t ON t.name = f.tenant
LEFT JOIN documents d ON d.id = f.document_id AND d.tenant_id = t.id
WHERE (%(tenant)s::text IS NULL OR f.tenant = %(tenant)s)
  AND (%(name)s::text IS NULL OR lower(f.original_name) LIKE %(name)s ESCAPE '\')
  AND (%(source)s::text IS NULL OR f.source = %(source)s OR f.origin = %(source)s
       OR f.source || ':' || f.origin = %(source)s)
  AND (%(since)s::timestamptz IS NULL OR f.arrived_at >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR f.arrived_at < %(until)s)
  AND (%(status)s::text IS NULL OR f.outcome = %(status)s
       OR d.processing_status = %(status)s)
ORDER BY f.arrived_at DESC, f.trace_id DESC
LIMIT %(limit)s;

-- name: arrivals_for_trace
-- `ingestd trace`: the arrivals a name, a trace id or a document id stands for.
SELECT a.* FROM arrivals a
WHERE (%(tenant)s::text IS NULL OR a.tenant = %(tenant)s)
  AND (a.trace_id = %(key)s OR a.document_id = %(document_id)s
       OR lower(a.original_name) = lower(%(key)s))
ORDER BY a.arrived_at DESC, a.id DESC
LIMIT %(limit)s;

-- name: trace_document
SELECT d.id, d.title, d.sha256, d.size_bytes, d.archive_path, d.processing_status,
       d.attention_reason, d.created_at, d.trace_id, d.original_filename, d.source,
       t.name AS tenant
FROM documents d JOIN tenants t ON t.id = d.tenant_id
WHERE d.id = %(id)s;

-- name: trace_jobs
-- Every job of the document: analysis, splits, deliveries (webhooks) and the rest.
SELECT j.id, j.kind, j.status, j.retry_count, j.error_message, j.created_at,
       j.started_at, j.finished_at, j.updated_at
FROM processing_jobs j WHERE j.document_id = %(id)s ORDER BY j.id;

-- name: trace_audit
SELECT e.seq, e.at, e.kind, e.body FROM audit_events e
WHERE e.document_id = %(id)s AND e.tenant = %(tenant)s ORDER BY e.at, e.seq;

-- name: trace_events
-- Operator events of the file (notifications are relayed from these), by trace id.
SELECT o.type, o.severity, o.detail, o.created_at, o.relayed_at FROM operator_events o
WHERE o.trace_id = %(trace_id)s ORDER BY o.created_at, o.id;

-- name: arrivals_export
SELECT * FROM arrivals
WHERE tenant = %(tenant)s AND arrived_at >= %(from)s AND arrived_at < %(to)s
ORDER BY arrived_at, id;

-- name: arrivals_prune
-- Housekeeping: arrivals older than [arrivals] keep_days, a batch at a time.
DELETE FROM arrivals
WHERE id IN (SELECT id FROM arrivals
             WHERE arrived_at < now() - make_interval(days => %(days)s) LIMIT 5000);

-- name: arrivals_wipe
-- delete-tenant (and reset): the tenant's arrivals go with its documents.
DELETE FROM arrivals WHERE tenant = %(tenant)s;

-- ===================================================================== people (issue 31)
-- name: person_get
SELECT login, password_hash, admin, created_at, password_set_at, directory,
       GREATEST(sessions_from, password_set_at) AS sessions_from
FROM people WHERE lower(login) = lower(%(login)s);

-- name: person_sign_out
-- Every session of the person that began before now ends (the console's logout).
UPDATE people SET sessions_from = to_timestamp(%(at)s) WHERE login = %(login)s;

-- name: person_insert
INSERT INTO people (login, password_hash, admin, password_set_at)
VALUES (%(login)s, %(password_hash)s, %(admin)s,
        CASE WHEN %(password_hash)s::text IS NULL THEN NULL ELSE now() END)
ON CONFLICT DO NOTHING
RETURNING login;

-- name: person_set_password
UPDATE people SET password_hash = %(password_hash)s, password_set_at = now()
WHERE login = %(login)s
RETURNING login;

-- name: person_set_admin
UPDATE people SET admin = %(admin)s WHERE login = %(login)s
RETURNING login;

-- name: person_now
-- The person (any case) with their memberships, in one statement: what the console reads
-- on every request. memberships: [{tenant, tenant_id, capability_set}] by tenant name.
SELECT p.login, p.password_hash, p.admin, p.directory,
       GREATEST(p.sessions_from, p.password_set_at) AS sessions_from,
       COALESCE((SELECT jsonb_agg(jsonb_build_object(
                    'tenant', t.name, 'tenant_id', t.id, 'capability_set', m.capability_set)
                  ORDER BY t.name)
                 FROM tenant_members m JOIN tenants t ON t.id = m.tenant_id
                 WHERE m.member = p.login), '[]'::jsonb) AS memberships
FROM people p WHERE lower(p.login) = lower(%(login)s);

-- name: member_set
-- Add the membership, or change its set; `previous` is the set it had (NULL: new), as
-- the statement's snapshot saw it (no FOR UPDATE: evaluated for RETURNING, after the
-- update, a locking read skips the row this statement changed).
WITH old AS MATERIALIZED (
    SELECT capability_set FROM tenant_members
    WHERE tenant_id = %(tenant_id)s AND member = %(login)s
)
INSERT INTO tenant_members (tenant_id, member, capability_set)
VALUES (%(tenant_id)s, %(login)s, %(capability_set)s)
ON CONFLICT (tenant_id, member) DO UPDATE SET capability_set = EXCLUDED.capability_set
RETURNING (SELECT capability_set FROM old) AS previous;

-- name: member_remove
DELETE FROM tenant_members WHERE tenant_id = %(tenant_id)s AND member = %(login)s
RETURNING capability_set;

-- name: person_remove
-- The person and every membership; each membership removed is returned with its tenant.
WITH m AS (
    DELETE FROM tenant_members WHERE member = %(login)s RETURNING tenant_id, capability_set
), p AS (
    DELETE FROM people WHERE login = %(login)s RETURNING login
)
SELECT t.name AS tenant, m.capability_set FROM m JOIN tenants t ON t.id = m.tenant_id
ORDER BY t.name;

-- name: person_remove_if_idle
-- A person who is no tenant's member and no admin is nobody's login: removed (not one of
-- the directory's: the directory says at the next login what they may do, if anything).
DELETE FROM people p
WHERE login = %(login)s AND NOT admin AND directory = 'local'
  AND NOT EXISTS (SELECT 1 FROM tenant_members m WHERE m.member = p.login)
RETURNING login;

-- name: people_list
SELECT p.login, p.admin, p.password_hash IS NOT NULL AS has_password, p.password_set_at,
       t.name AS tenant, m.capability_set, m.added_at
FROM people p
LEFT JOIN tenant_members m ON m.member = p.login
LEFT JOIN tenants t ON t.id = m.tenant_id
WHERE %(tenant)s::text IS NULL OR t.name = %(tenant)s
ORDER BY lower(p.login), t.name;

-- ===================================================================== web console (issue 31)
-- name: web_documents
-- The tenant's newest documents through the page's filters (each NULL: not applied):
-- ids the hits of a search (the search ranks, this keeps or drops), name a LIKE pattern
-- on the original file name, source a whole source or its kind, since/until the arrival
-- time, status, correspondent, type and tag by name (any case).
SELECT d.id, d.title, d.issued_date, d.original_filename, d.source, d.processing_status,
       d.created_at
FROM documents d
LEFT JOIN correspondents c ON c.id = d.correspondent_id
LEFT JOIN document_types y ON y.id = d.document_type_id
WHERE d.tenant_id = %(tenant_id)s
  AND (%(ids)s::bigint[] IS NULL OR d.id = ANY(%(ids)s::bigint[]))
  AND (%(name)s::text IS NULL OR d.original_filename ILIKE %(name)s::text)
  AND (%(source)s::text IS NULL OR d.source = %(source)s::text
       OR split_part(d.source, ':', 1) = %(source)s::text)
  AND (%(since)s::timestamptz IS NULL OR d.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR d.created_at < %(until)s::timestamptz)
  AND (%(status)s::text IS NULL OR d.processing_status = %(status)s::text)
  AND (%(correspondent)s::text IS NULL OR lower(c.name) = lower(%(correspondent)s::text))
  AND (%(doc_type)s::text IS NULL OR lower(y.name) = lower(%(doc_type)s::text))
  AND (%(tag)s::text IS NULL OR EXISTS (
        SELECT 1 FROM document_tags dt JOIN tags g ON g.id = dt.tag_id
        WHERE dt.document_id = d.id AND lower(g.name) = lower(%(tag)s::text)))
ORDER BY d.id DESC
LIMIT %(limit)s;

-- name: web_facets
-- What the filters can choose from in the tenant: its tags, correspondents and types.
SELECT 'tag' AS kind, name FROM tags WHERE tenant_id = %(tenant_id)s
UNION ALL
SELECT 'correspondent', name FROM correspondents WHERE tenant_id = %(tenant_id)s
UNION ALL
SELECT 'type', name FROM document_types WHERE tenant_id = %(tenant_id)s
ORDER BY 1, 2;

-- name: web_document_lineage
-- A split batch's parts (with pages) and a part's batch, in the tenant.
SELECT p.parent_id, p.child_id, p.position, p.first_page, p.last_page
FROM document_parts p JOIN documents d ON d.id = p.parent_id
WHERE (p.parent_id = %(id)s OR p.child_id = %(id)s) AND d.tenant_id = %(tenant_id)s
ORDER BY p.parent_id, p.position;

-- name: web_document_edit
-- A person's title and date (never the original); `was_*` what they replaced.
WITH old AS MATERIALIZED (
    SELECT title, issued_date FROM documents
    WHERE id = %(id)s AND tenant_id = %(tenant_id)s
)
UPDATE documents d SET title = %(title)s, issued_date = %(issued_date)s::date
WHERE d.id = %(id)s AND d.tenant_id = %(tenant_id)s
RETURNING (SELECT title FROM old) AS was_title, (SELECT issued_date FROM old) AS was_date;

-- ===================================================================== WebDAV (issue 31)
-- The read-only mount's virtual tree: a tenant's documents (not those in the trash) by
-- arrival year and month (UTC), and by tag. Every query names the tenant.
-- name: dav_years
SELECT DISTINCT extract(year FROM d.created_at AT TIME ZONE 'UTC')::int AS y
FROM documents d JOIN tenants t ON t.id = d.tenant_id
WHERE t.name = %(tenant)s AND d.trashed_at IS NULL
ORDER BY 1;

-- name: dav_months
SELECT DISTINCT extract(month FROM d.created_at AT TIME ZONE 'UTC')::int AS m
FROM documents d JOIN tenants t ON t.id = d.tenant_id
WHERE t.name = %(tenant)s AND d.trashed_at IS NULL
  AND extract(year FROM d.created_at AT TIME ZONE 'UTC') = %(year)s
ORDER BY 1;

-- name: dav_month
SELECT d.id, t.name AS tenant, d.original_filename, d.size_bytes, d.mime_type,
       d.created_at, d.sha256
FROM documents d JOIN tenants t ON t.id = d.tenant_id
WHERE t.name = %(tenant)s AND d.trashed_at IS NULL
  AND d.created_at >= make_timestamptz(%(year)s, %(month)s, 1, 0, 0, 0, 'UTC')
  AND d.created_at < make_timestamptz(%(year)s, %(month)s, 1, 0, 0, 0, 'UTC')
                     + interval '1 month'
ORDER BY d.id;

-- name: dav_month_version
-- What tells whether a month's folder changed since it was listed: documents arrive
-- (count, highest id) and go to the trash and back (count, sum of ids); nothing else
-- about a listed document changes its name in the folder.
SELECT count(*) AS n, COALESCE(max(d.id), 0) AS top, COALESCE(sum(d.id), 0) AS total
FROM documents d JOIN tenants t ON t.id = d.tenant_id
WHERE t.name = %(tenant)s AND d.trashed_at IS NULL
  AND d.created_at >= make_timestamptz(%(year)s, %(month)s, 1, 0, 0, 0, 'UTC')
  AND d.created_at < make_timestamptz(%(year)s, %(month)s, 1, 0, 0, 0, 'UTC')
                     + interval '1 month';

-- name: dav_tags
SELECT g.name FROM tags g JOIN tenants t ON t.id = g.tenant_id
WHERE t.name = %(tenant)s
  AND EXISTS (SELECT 1 FROM document_tags dt WHERE dt.tag_id = g.id)
ORDER BY g.name;

-- name: dav_tagged
SELECT d.id, t.name AS tenant, d.original_filename, d.size_bytes, d.mime_type,
       d.created_at, d.sha256
FROM documents d JOIN tenants t ON t.id = d.tenant_id
JOIN document_tags dt ON dt.document_id = d.id
JOIN tags g ON g.id = dt.tag_id AND g.tenant_id = d.tenant_id
WHERE t.name = %(tenant)s AND g.name = %(tag)s AND d.trashed_at IS NULL
ORDER BY d.id;

-- name: web_content_files
-- What analysis drew of the tenant's document (paths relative to paths.derived): the page-1
-- thumbnail, the searchable PDF and its page count (NULL before analysis); and the
-- original's place and type (a PDF never analysed is previewed from the original).
SELECT d.archive_path, d.mime_type, c.thumbnail, c.searchable_pdf, c.page_count
FROM documents d LEFT JOIN document_content c ON c.document_id = d.id
WHERE d.id = %(id)s AND d.tenant_id = %(tenant_id)s;

-- name: person_from_directory
-- A person the directory vouched for: made (no password) or marked as the directory's.
INSERT INTO people (login, directory) VALUES (%(login)s, 'ldap')
ON CONFLICT (login) DO UPDATE SET directory = 'ldap'
RETURNING login;
