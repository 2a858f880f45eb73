-- Intake: what a file's ingest writes (ingestd/intake, and split children in the worker).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

-- name: tenant_lock_for_intake
-- FOR SHARE: a concurrent suspend/delete waits for this intake transaction to end,
-- so no document can slip into a tenant that is being wiped.
SELECT id, name, status FROM tenants WHERE name = %(name)s FOR SHARE;

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
-- The second and last, sent with its COMMIT: every row of the intake (migrations 0012,
-- 0024).
SELECT document, job, duplicate_of FROM intake_record(
    p_tenant_id => %(tenant_id)s, p_tenant => %(tenant)s, p_sha256 => %(sha256)s,
    p_size => %(size_bytes)s, p_mime => %(mime_type)s, p_extension => %(extension)s,
    p_filename => %(original_filename)s, p_source => %(source)s,
    p_subdir => %(source_subdir)s, p_archive_path => %(archive_path)s,
    p_title => %(title)s, p_issued => %(issued_date)s,
    p_date_policy => %(date_policy)s, p_name_date => %(name_date)s, p_trace => %(trace_id)s,
    p_job_kind => %(job_kind)s, p_job_payload => %(job_payload)s,
    p_derive_title => %(derive_title)s, p_tags => %(tags)s::text[],
    p_archived => %(archived)s, p_duplicate => %(duplicate)s);

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

-- name: documents_policy_unset
-- Documents recorded before migration 0024, a batch at a time (policy_backfill.py).
SELECT id, source, original_filename, created_at FROM documents
WHERE date_policy IS NULL AND id > %(after)s
ORDER BY id LIMIT %(limit)s;

-- name: document_policy_set
UPDATE documents SET date_policy = %(date_policy)s, name_date = %(name_date)s
WHERE id = %(id)s AND date_policy IS NULL;
