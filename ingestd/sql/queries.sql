-- Named queries. Each block starts with "-- name: <name>" and runs with
-- psycopg's %(param)s placeholders. Python code refers to queries by name only.

-- name: tenant_by_name
SELECT id, name, status, created_at FROM tenants WHERE name = %(name)s;

-- name: tenant_lock_for_intake
-- FOR SHARE: a concurrent suspend/delete waits for this intake transaction to end,
-- so no document can slip into a tenant that is being wiped.
SELECT id, status FROM tenants WHERE name = %(name)s FOR SHARE;

-- name: tenant_insert
INSERT INTO tenants (name, status) VALUES (%(name)s, %(status)s)
ON CONFLICT (name) DO NOTHING
RETURNING id, name, status, created_at;

-- name: tenant_list
SELECT t.id, t.name, t.status, t.created_at,
       (SELECT count(*) FROM documents d WHERE d.tenant_id = t.id) AS documents
FROM tenants t ORDER BY t.name;

-- name: tenant_set_status
UPDATE tenants SET status = %(status)s, updated_at = now()
WHERE name = %(name)s AND status = ANY(%(from_statuses)s)
RETURNING id, name, status;

-- name: document_by_sha256
SELECT id, archive_path FROM documents WHERE tenant_id = %(tenant_id)s AND sha256 = %(sha256)s;

-- name: document_insert
-- ON CONFLICT: two intakes of the same bytes race; the loser sees no row and reports
-- a duplicate instead of failing.
INSERT INTO documents (tenant_id, sha256, size_bytes, mime_type, extension,
                       original_filename, source, source_subdir, archive_path,
                       title, issued_date, processing_status)
VALUES (%(tenant_id)s, %(sha256)s, %(size_bytes)s, %(mime_type)s, %(extension)s,
        %(original_filename)s, %(source)s, %(source_subdir)s, %(archive_path)s,
        %(title)s, %(issued_date)s, 'queued')
ON CONFLICT ON CONSTRAINT documents_tenant_sha256_key DO NOTHING
RETURNING id;

-- name: job_insert
INSERT INTO processing_jobs (tenant_id, document_id, kind, payload, derive_title)
VALUES (%(tenant_id)s, %(document_id)s, %(kind)s, %(payload)s, %(derive_title)s)
RETURNING id;

-- name: status_documents
SELECT t.name AS tenant, d.processing_status AS status, count(*) AS n
FROM documents d JOIN tenants t ON t.id = d.tenant_id
GROUP BY t.name, d.processing_status ORDER BY 1, 2;

-- name: status_jobs
SELECT t.name AS tenant, j.kind, j.status, count(*) AS n
FROM processing_jobs j JOIN tenants t ON t.id = j.tenant_id
GROUP BY t.name, j.kind, j.status ORDER BY 1, 2, 3;

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
    WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.id = j.document_id))
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
SELECT d.id, t.name AS tenant, d.title, d.issued_date, d.original_filename, d.source,
       d.processing_status, d.size_bytes, d.created_at,
       coalesce((SELECT array_agg(g.name ORDER BY g.name) FROM document_tags dt
                 JOIN tags g ON g.id = dt.tag_id WHERE dt.document_id = d.id), '{}') AS tags
FROM documents d JOIN tenants t ON t.id = d.tenant_id
WHERE (%(tenant)s::text IS NULL OR t.name = %(tenant)s)
ORDER BY d.id DESC
LIMIT %(limit)s;
