-- Status, metrics, backup and restore (ingestd/ops, the pool's writes).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

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

-- name: restore_tables_in_use
-- Tables a database already holds: restore refuses such a database without --force.
SELECT count(*) AS n FROM pg_catalog.pg_tables
WHERE schemaname NOT IN ('pg_catalog', 'information_schema');

-- name: backup_archive_paths
-- The archive files the (restored) database knows.
SELECT archive_path FROM documents;

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
