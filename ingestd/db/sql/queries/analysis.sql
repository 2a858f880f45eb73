-- What analyze-document and split-batch write (worker/jobs).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

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

-- name: workflow_webhook_delivered
UPDATE document_workflow_runs SET webhook_delivered_at = now()
WHERE document_id = %(document_id)s AND workflow = %(workflow)s AND tenant_id = %(tenant_id)s;

-- name: split_parent
-- The batch a split-batch job cuts, with what its children inherit.
SELECT d.id, d.tenant_id, d.sha256, d.size_bytes, d.archive_path, d.original_filename,
       d.title, d.mime_type, d.source, d.source_subdir, d.trace_id, d.created_at,
       d.date_policy,
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
                       title, processing_status, trace_id, asn, date_policy)
VALUES (%(tenant_id)s, %(sha256)s, %(size_bytes)s, 'application/pdf', 'pdf',
        %(original_filename)s, %(source)s, %(source_subdir)s, %(archive_path)s,
        %(title)s, 'queued', %(trace_id)s, %(asn)s, %(date_policy)s)
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

-- An e-invoice's row (issue 33), written with the analysis; the same seller (VAT id, or
-- name without one) and number as an older invoice of the tenant is a possible
-- duplicate: flagged with the oldest such document, never refused.
-- name: invoice_upsert
INSERT INTO invoices AS i (document_id, tenant_id, source, syntax, profile, number,
    type_code, kind, issue_date, due_date, currency, seller_name, seller_vat_id, buyer_name,
    buyer_reference, net_total, tax_total, gross_total, payable, line_count, fields,
    legal_status, format_errors, rule_errors, report, pdf_check, duplicate_of, analyzed_at)
SELECT d.id, d.tenant_id, %(source)s, %(syntax)s, %(profile)s, %(number)s, %(type_code)s,
       %(kind)s, %(issue_date)s, %(due_date)s, %(currency)s, %(seller_name)s,
       %(seller_vat_id)s, %(buyer_name)s, %(buyer_reference)s, %(net_total)s, %(tax_total)s,
       %(gross_total)s, %(payable)s, %(line_count)s, %(fields)s, %(legal_status)s,
       %(format_errors)s, %(rule_errors)s, %(report)s, %(pdf_check)s,
       (SELECT min(o.document_id) FROM invoices o
        WHERE o.tenant_id = d.tenant_id AND o.document_id < d.id
          AND %(number)s::text IS NOT NULL AND o.number = %(number)s::text
          AND (o.seller_vat_id = %(seller_vat_id)s::text
               OR (o.seller_vat_id IS NULL AND %(seller_vat_id)s::text IS NULL
                   AND o.seller_name = %(seller_name)s::text))),
       now()
FROM documents d
WHERE d.id = %(document_id)s AND d.tenant_id = %(tenant_id)s
ON CONFLICT (document_id) DO UPDATE SET
    source = EXCLUDED.source, syntax = EXCLUDED.syntax, profile = EXCLUDED.profile,
    number = EXCLUDED.number, type_code = EXCLUDED.type_code, kind = EXCLUDED.kind,
    issue_date = EXCLUDED.issue_date, due_date = EXCLUDED.due_date,
    currency = EXCLUDED.currency, seller_name = EXCLUDED.seller_name,
    seller_vat_id = EXCLUDED.seller_vat_id, buyer_name = EXCLUDED.buyer_name,
    buyer_reference = EXCLUDED.buyer_reference, net_total = EXCLUDED.net_total,
    tax_total = EXCLUDED.tax_total, gross_total = EXCLUDED.gross_total,
    payable = EXCLUDED.payable, line_count = EXCLUDED.line_count, fields = EXCLUDED.fields,
    legal_status = EXCLUDED.legal_status, format_errors = EXCLUDED.format_errors,
    rule_errors = EXCLUDED.rule_errors, report = EXCLUDED.report,
    pdf_check = EXCLUDED.pdf_check, duplicate_of = EXCLUDED.duplicate_of,
    analyzed_at = EXCLUDED.analyzed_at;

-- name: invoice_delete
DELETE FROM invoices WHERE document_id = %(document_id)s AND tenant_id = %(tenant_id)s;
