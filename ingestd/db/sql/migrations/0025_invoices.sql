-- 0025 e-invoices (issue 33): what an EN 16931 invoice says, read from its XML (an
-- XRechnung or any UBL/CII invoice archived as received, or the XML embedded in a
-- Factur-X/ZUGFeRD PDF), one row per document, written by analyze-document in the
-- transaction that marks its job done. The archived original is the XML or the PDF
-- itself, unchanged; this row is derived data and is made again by a re-analysis.
--   source        'xml' (the document is the XML) or 'embedded' (a hybrid PDF's);
--   fields        every field read (worker/analysis/einvoice/model.py, Invoice.as_fields):
--                 what webhooks and the accounting export carry;
--   legal_status  'e-invoice', or 'other invoice' when the XML has format errors (the
--                 finance ministry's guidance of 15 October 2025);
--   report        the validation findings (format and business-rule errors, warnings);
--   pdf_check     a hybrid PDF's visible total against the XML's: NULL (not a hybrid),
--                 'ok', or what differs (shown, never hidden);
--   duplicate_of  an older invoice of the tenant with the same seller and number: a
--                 possible duplicate, flagged, never refused (it may be a correction).
CREATE TABLE IF NOT EXISTS invoices (
    document_id    BIGINT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
    tenant_id      BIGINT NOT NULL REFERENCES tenants(id),
    source         TEXT NOT NULL CHECK (source IN ('xml', 'embedded')),
    syntax         TEXT NOT NULL CHECK (syntax IN ('ubl', 'cii')),
    profile        TEXT,
    number         TEXT,
    type_code      TEXT,
    kind           TEXT NOT NULL CHECK (kind IN ('invoice', 'credit_note')),
    issue_date     DATE,
    due_date       DATE,
    currency       TEXT,
    seller_name    TEXT,
    seller_vat_id  TEXT,
    buyer_name     TEXT,
    buyer_reference TEXT,
    net_total      NUMERIC,
    tax_total      NUMERIC,
    gross_total    NUMERIC,
    payable        NUMERIC,
    line_count     INTEGER NOT NULL DEFAULT 0,
    fields         JSONB NOT NULL,
    legal_status   TEXT NOT NULL CHECK (legal_status IN ('e-invoice', 'other invoice')),
    format_errors  INTEGER NOT NULL DEFAULT 0,
    rule_errors    INTEGER NOT NULL DEFAULT 0,
    report         JSONB NOT NULL,
    pdf_check      TEXT,
    duplicate_of   BIGINT REFERENCES documents(id) ON DELETE SET NULL,
    analyzed_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS idx_invoices_seller_number ON invoices (tenant_id, seller_vat_id, number);
CREATE INDEX IF NOT EXISTS idx_invoices_issue_date ON invoices (tenant_id, issue_date);
