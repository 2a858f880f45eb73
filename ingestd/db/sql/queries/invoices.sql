-- E-invoices (issue 33): the accounting export and one invoice's fields and report.

-- name: invoices_list
-- A tenant's invoices by issue date (those without one last), optionally from/to a date
-- (until: before that day); with the document's title and status.
SELECT i.document_id, t.name AS tenant, i.source, i.syntax, i.profile, i.number,
       i.type_code, i.kind, i.issue_date, i.due_date, i.currency, i.seller_name,
       i.seller_vat_id, i.buyer_name, i.buyer_reference, i.net_total, i.tax_total,
       i.gross_total, i.payable, i.line_count, i.legal_status, i.format_errors,
       i.rule_errors, i.pdf_check, i.duplicate_of, d.title, d.original_filename,
       d.processing_status AS document_status, i.fields -> 'iban' AS iban,
       i.fields -> 'taxes' AS taxes, i.fields ->> 'payment_terms' AS payment_terms
FROM invoices i
JOIN documents d ON d.id = i.document_id
JOIN tenants t ON t.id = i.tenant_id
WHERE t.name = %(tenant)s AND d.trashed_at IS NULL
  AND (%(since)s::date IS NULL OR i.issue_date >= %(since)s::date)
  AND (%(until)s::date IS NULL OR i.issue_date < %(until)s::date)
ORDER BY i.issue_date NULLS LAST, i.document_id
LIMIT %(limit)s;

-- name: invoice_show
SELECT i.*, t.name AS tenant, d.title, d.original_filename, d.processing_status AS document_status
FROM invoices i
JOIN documents d ON d.id = i.document_id
JOIN tenants t ON t.id = i.tenant_id
WHERE t.name = %(tenant)s AND i.document_id = %(document_id)s;
