-- 0012 intake in one statement (issue 19): what the intake transaction writes once its
-- file is linked - the document row, its job, its tags and its document.archived entry -
-- in one call, so that it travels with its COMMIT in one round trip (it took one per
-- statement, three to five, and one more for the COMMIT).
--
-- The caller (ingestd/intake/ingest.py) has locked the tenant row FOR SHARE and seen it
-- active in the same transaction (query intake_lock), then linked the file and fsynced
-- its directory; this function only writes. The rows are those the single statements
-- wrote before: the document (its former query document_insert), the job as job_insert
-- writes it (the body from queue.enqueue.job_body, the document's id added here, the
-- NOTIFY from the processing_jobs trigger), tags_ensure + tags_link, and audit_append
-- with the same detail (the job's id added here). JSONB keeps its keys in one canonical
-- order, so the entry's body is byte for byte what building the whole detail in Python
-- gave. Locks are taken in the order they were: the tenant row (by the caller), the
-- document's unique key, the tags (sorted by the caller), the chain head last.
CREATE OR REPLACE FUNCTION intake_record(
    p_tenant_id    BIGINT,
    p_tenant       TEXT,     -- the tenant's name as recorded in the audit entry
    p_sha256       TEXT,
    p_size         BIGINT,
    p_mime         TEXT,
    p_extension    TEXT,
    p_filename     TEXT,
    p_source       TEXT,
    p_subdir       TEXT,
    p_archive_path TEXT,
    p_title        TEXT,
    p_issued       DATE,
    p_trace        TEXT,
    p_job_kind     TEXT,
    p_job_payload  JSONB,    -- without document_id: the document has no id yet
    p_derive_title BOOLEAN,
    p_tags         TEXT[],   -- cut, de-duplicated and sorted (intake.tags.tag_names)
    p_archived     JSONB,    -- the document.archived detail without the job's id
    p_duplicate    JSONB     -- the document.duplicate detail; NULL: refused, not recorded
) RETURNS TABLE (document BIGINT, job BIGINT, duplicate_of BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    -- ON CONFLICT: an intake of the same bytes committed since intake_lock looked; this
    -- one is then a duplicate instead of failing.
    INSERT INTO documents (tenant_id, sha256, size_bytes, mime_type, extension,
                           original_filename, source, source_subdir, archive_path,
                           title, issued_date, processing_status, trace_id)
    VALUES (p_tenant_id, p_sha256, p_size, p_mime, p_extension,
            p_filename, p_source, p_subdir, p_archive_path,
            p_title, p_issued, 'queued', p_trace)
    ON CONFLICT ON CONSTRAINT documents_tenant_sha256_key DO NOTHING
    RETURNING id INTO document;
    IF document IS NULL THEN
        -- A statement of its own: its snapshot sees the winner, which ON CONFLICT waited for.
        SELECT d.id INTO duplicate_of
        FROM documents d WHERE d.tenant_id = p_tenant_id AND d.sha256 = p_sha256;
        IF p_duplicate IS NOT NULL THEN
            PERFORM audit_append(p_tenant_id, p_tenant, 'document.duplicate', duplicate_of,
                                 p_duplicate);
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;

    INSERT INTO processing_jobs (tenant_id, document_id, kind, payload, derive_title)
    VALUES (p_tenant_id, document, p_job_kind,
            p_job_payload || jsonb_build_object('document_id', document), p_derive_title)
    RETURNING id INTO job;

    IF cardinality(p_tags) > 0 THEN
        -- Two statements, as tags_ensure and tags_link are: a tag a concurrent intake
        -- just created is invisible to the first one's snapshot, not to the second's.
        INSERT INTO tags (tenant_id, name)
        SELECT p_tenant_id, n FROM unnest(p_tags) AS n
        ON CONFLICT ON CONSTRAINT tags_tenant_name_key DO NOTHING;
        INSERT INTO document_tags (document_id, tag_id, tenant_id, origin)
        SELECT document, t.id, p_tenant_id, 'intake'
        FROM tags t WHERE t.tenant_id = p_tenant_id AND t.name = ANY(p_tags)
        ON CONFLICT DO NOTHING;
    END IF;

    PERFORM audit_append(p_tenant_id, p_tenant, 'document.archived', document,
                         p_archived || jsonb_build_object('job', job));
    RETURN NEXT;
END
$$;
