-- Documents for the CLI and the console: list, show, trash and purge, attention,
-- lineage, re-analysis and the hand-out.
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

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

-- name: document_of_tenant
SELECT id FROM documents WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: document_handout
-- `documents get` (ingestd/archive/handout.py): what handing a document out needs, its
-- searchable PDF (relative to paths.derived) if analysis made one.
SELECT d.id, t.name AS tenant, d.original_filename, d.extension, d.sha256, d.size_bytes,
       d.archive_path, d.mime_type, d.processing_status, d.attention_reason, d.trace_id,
       c.searchable_pdf, c.document_id IS NOT NULL AS has_content
FROM documents d JOIN tenants t ON t.id = d.tenant_id
LEFT JOIN document_content c ON c.document_id = d.id
WHERE d.id = %(id)s AND (%(tenant)s::text IS NULL OR t.name = %(tenant)s);
