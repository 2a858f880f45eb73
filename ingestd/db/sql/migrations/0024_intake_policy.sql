-- 0024 the date policy frozen at intake (issue 32): what the analysis needs to decide a
-- document's issued date is recorded with the document, as intake knew it, instead of
-- being looked up again by parsing its `source` ("watch:<folder>", "sftp:<account>") and
-- its file name in the worker:
--   date_policy  the source's `date_source` when the file arrived (`filename-first` or
--                `text-first`); a batch's parts inherit their parent's;
--   name_date    the date the file name gave (parse_filename at intake), NULL if none;
--                a batch's parts have none (their names are made by the split).
-- A config change after intake no longer changes how a document already archived is
-- dated, as a batch's split policy (frozen into its job) never did.
--
-- Documents recorded before this migration get date_policy NULL; the first start of the
-- new version fills both from the config, once (ingestd/intake/policy_backfill.py; the
-- partial index keeps that look free afterwards). Until then the analysis treats NULL as
-- `filename-first`, the default.
ALTER TABLE documents
    ADD COLUMN IF NOT EXISTS date_policy TEXT
        CONSTRAINT documents_date_policy_check
        CHECK (date_policy IN ('filename-first', 'text-first')),
    ADD COLUMN IF NOT EXISTS name_date DATE;

CREATE INDEX IF NOT EXISTS idx_documents_policy_unset ON documents (id)
    WHERE date_policy IS NULL;

-- intake_record with the two new parameters (a new signature: the old one is dropped).
DROP FUNCTION IF EXISTS intake_record(
    BIGINT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, DATE, TEXT, TEXT,
    JSONB, BOOLEAN, TEXT[], JSONB, JSONB);

CREATE FUNCTION intake_record(
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
    p_date_policy  TEXT,     -- its source's date_source, as it was at intake
    p_name_date    DATE,     -- the date its file name gave (NULL: none)
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
                           title, issued_date, date_policy, name_date,
                           processing_status, trace_id)
    VALUES (p_tenant_id, p_sha256, p_size, p_mime, p_extension,
            p_filename, p_source, p_subdir, p_archive_path,
            p_title, p_issued, p_date_policy, p_name_date, 'queued', p_trace)
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
