-- Retention and legal holds (ingestd/archive, the CLI).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

-- name: retention_documents
-- Each document of a tenant (or the one given) with its retention period, the last day
-- it must be kept, and whether a legal hold (its own or the tenant's) is on it.
WITH docs AS (
    SELECT d.id, d.created_at, retention_years(d.id, %(rules)s, %(default_years)s) AS years,
           EXISTS (SELECT 1 FROM legal_holds h
                   WHERE h.tenant_id = d.tenant_id AND h.released_at IS NULL
                     AND (h.document_id IS NULL OR h.document_id = d.id)) AS held
    FROM documents d
    WHERE d.tenant_id = %(tenant_id)s
      AND (%(document_id)s::bigint IS NULL OR d.id = %(document_id)s::bigint)
)
SELECT id, created_at, years, held, retention_until(created_at, years) AS retain_until
FROM docs ORDER BY id;

-- name: retention_summary
-- What stands in the way of removing a tenant's documents: how many are within
-- retention (and the earliest expiry among them) and how many are under a legal hold.
WITH docs AS (
    SELECT retention_until(d.created_at, retention_years(d.id, %(rules)s, %(default_years)s))
               AS retain_until,
           EXISTS (SELECT 1 FROM legal_holds h
                   WHERE h.tenant_id = d.tenant_id AND h.released_at IS NULL
                     AND (h.document_id IS NULL OR h.document_id = d.id)) AS held
    FROM documents d WHERE d.tenant_id = %(tenant_id)s
)
SELECT count(*) FILTER (WHERE retain_until >= %(today)s) AS retained,
       min(retain_until) FILTER (WHERE retain_until >= %(today)s) AS earliest_expiry,
       count(*) FILTER (WHERE held) AS held,
       (SELECT count(*) FROM legal_holds h
        WHERE h.tenant_id = %(tenant_id)s AND h.released_at IS NULL
          AND h.document_id IS NULL) AS tenant_holds
FROM docs;

-- name: retention_policy_of
SELECT fingerprint FROM retention_policies WHERE tenant_id = %(tenant_id)s;

-- name: retention_policy_record
INSERT INTO retention_policies (tenant_id, fingerprint, policy)
VALUES (%(tenant_id)s, %(fingerprint)s, %(policy)s)
ON CONFLICT (tenant_id) DO UPDATE
SET fingerprint = EXCLUDED.fingerprint, policy = EXCLUDED.policy, recorded_at = now();

-- name: hold_set
INSERT INTO legal_holds (tenant_id, document_id, reason)
VALUES (%(tenant_id)s, %(document_id)s, %(reason)s)
ON CONFLICT (tenant_id, coalesce(document_id, 0)) WHERE released_at IS NULL DO NOTHING
RETURNING id, set_at;

-- name: hold_release
UPDATE legal_holds SET released_at = now()
WHERE tenant_id = %(tenant_id)s AND released_at IS NULL
  AND document_id IS NOT DISTINCT FROM %(document_id)s::bigint
RETURNING id, reason;

-- name: hold_list
SELECT h.id, t.name AS tenant, h.document_id, h.reason, h.set_at
FROM legal_holds h JOIN tenants t ON t.id = h.tenant_id
WHERE h.released_at IS NULL AND (%(tenant_id)s::bigint IS NULL OR h.tenant_id = %(tenant_id)s)
ORDER BY t.name, h.document_id NULLS FIRST;
