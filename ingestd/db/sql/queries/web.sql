-- The web console and the WebDAV mount (ingestd/web).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

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
