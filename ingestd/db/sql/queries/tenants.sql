-- Tenants: the CLI's tenant commands and the tenant lifecycle jobs (provision-tenant,
-- delete-tenant).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

-- name: tenant_by_name
SELECT id, name, status, created_at FROM tenants WHERE name = %(name)s;

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

-- name: tenant_statuses
-- Every tenant's status, for the SFTP server's login check (refreshed every few seconds).
SELECT name, status FROM tenants;
