-- 0011 retention by class and legal hold (issue 18).

-- A legal hold on one document, or on a whole tenant (document_id NULL). Released holds
-- stay (released_at set); both steps are audit entries (hold.set, hold.released).
CREATE TABLE IF NOT EXISTS legal_holds (
    id          BIGSERIAL PRIMARY KEY,
    -- A tenant with a hold in force cannot be deleted; released ones go with it (their
    -- history is in the audit trail, which stays).
    tenant_id   BIGINT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    document_id BIGINT REFERENCES documents(id) ON DELETE CASCADE,
    reason      TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    set_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    released_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX IF NOT EXISTS legal_holds_active_key
    ON legal_holds (tenant_id, coalesce(document_id, 0)) WHERE released_at IS NULL;

-- The retention policy last applied for each tenant (its rules from the config): when the
-- config changes what a tenant keeps, the next decision records retention.changed.
CREATE TABLE IF NOT EXISTS retention_policies (
    tenant_id   BIGINT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    fingerprint TEXT NOT NULL,
    policy      JSONB NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A document's retention period in years: the longest of the rules (the tenant's from
-- the config, as JSON [{kind, name, years}]) that match it by tag, document type or
-- correspondent (names compared case-insensitively), else the tenant's default.
CREATE OR REPLACE FUNCTION retention_years(p_document BIGINT, p_rules JSONB, p_default INT)
RETURNS INT LANGUAGE sql STABLE AS $$
    SELECT coalesce(max((r->>'years')::int), p_default)
    FROM jsonb_array_elements(p_rules) r, documents d
    WHERE d.id = p_document
      AND ((r->>'kind' = 'tag' AND EXISTS (
               SELECT 1 FROM document_tags dt JOIN tags t ON t.id = dt.tag_id
               WHERE dt.document_id = d.id AND lower(t.name) = lower(r->>'name')))
        OR (r->>'kind' = 'document_type' AND EXISTS (
               SELECT 1 FROM document_types y
               WHERE y.id = d.document_type_id AND lower(y.name) = lower(r->>'name')))
        OR (r->>'kind' = 'correspondent' AND EXISTS (
               SELECT 1 FROM correspondents c
               WHERE c.id = d.correspondent_id AND lower(c.name) = lower(r->>'name'))))
$$;

-- Kept to the end of the calendar year ``years`` after the year of ingest (UTC), as the
-- German rules count (a voucher of March 2026 kept 8 years: to 31 December 2034). Zero
-- years: no retention at all (NULL).
CREATE OR REPLACE FUNCTION retention_until(p_created TIMESTAMPTZ, p_years INT)
RETURNS DATE LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_years > 0 THEN
        make_date(extract(year FROM p_created AT TIME ZONE 'UTC')::int + p_years, 12, 31)
    END
$$;
