-- Arrivals and traces: what became of every file (ingestd/arrivals, housekeeping).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

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
