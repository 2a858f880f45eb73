-- People: who may log in, and their memberships (ingestd/people).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

-- name: person_get
SELECT login, password_hash, admin, created_at, password_set_at, directory,
       GREATEST(sessions_from, password_set_at) AS sessions_from
FROM people WHERE lower(login) = lower(%(login)s);

-- name: person_sign_out
-- Every session of the person that began before now ends (the console's logout).
UPDATE people SET sessions_from = to_timestamp(%(at)s) WHERE login = %(login)s;

-- name: person_insert
INSERT INTO people (login, password_hash, admin, password_set_at)
VALUES (%(login)s, %(password_hash)s, %(admin)s,
        CASE WHEN %(password_hash)s::text IS NULL THEN NULL ELSE now() END)
ON CONFLICT DO NOTHING
RETURNING login;

-- name: person_set_password
UPDATE people SET password_hash = %(password_hash)s, password_set_at = now()
WHERE login = %(login)s
RETURNING login;

-- name: person_set_admin
UPDATE people SET admin = %(admin)s WHERE login = %(login)s
RETURNING login;

-- name: person_now
-- The person (any case) with their memberships, in one statement: what the console reads
-- on every request. memberships: [{tenant, tenant_id, capability_set}] by tenant name.
SELECT p.login, p.password_hash, p.admin, p.directory,
       GREATEST(p.sessions_from, p.password_set_at) AS sessions_from,
       COALESCE((SELECT jsonb_agg(jsonb_build_object(
                    'tenant', t.name, 'tenant_id', t.id, 'capability_set', m.capability_set)
                  ORDER BY t.name)
                 FROM tenant_members m JOIN tenants t ON t.id = m.tenant_id
                 WHERE m.member = p.login), '[]'::jsonb) AS memberships
FROM people p WHERE lower(p.login) = lower(%(login)s);

-- name: member_set
-- Add the membership, or change its set; `previous` is the set it had (NULL: new), as
-- the statement's snapshot saw it (no FOR UPDATE: evaluated for RETURNING, after the
-- update, a locking read skips the row this statement changed).
WITH old AS MATERIALIZED (
    SELECT capability_set FROM tenant_members
    WHERE tenant_id = %(tenant_id)s AND member = %(login)s
)
INSERT INTO tenant_members (tenant_id, member, capability_set)
VALUES (%(tenant_id)s, %(login)s, %(capability_set)s)
ON CONFLICT (tenant_id, member) DO UPDATE SET capability_set = EXCLUDED.capability_set
RETURNING (SELECT capability_set FROM old) AS previous;

-- name: member_remove
DELETE FROM tenant_members WHERE tenant_id = %(tenant_id)s AND member = %(login)s
RETURNING capability_set;

-- name: person_remove
-- The person and every membership; each membership removed is returned with its tenant.
WITH m AS (
    DELETE FROM tenant_members WHERE member = %(login)s RETURNING tenant_id, capability_set
), p AS (
    DELETE FROM people WHERE login = %(login)s RETURNING login
)
SELECT t.name AS tenant, m.capability_set FROM m JOIN tenants t ON t.id = m.tenant_id
ORDER BY t.name;

-- name: person_remove_if_idle
-- A person who is no tenant's member and no admin is nobody's login: removed (not one of
-- the directory's: the directory says at the next login what they may do, if anything).
DELETE FROM people p
WHERE login = %(login)s AND NOT admin AND directory = 'local'
  AND NOT EXISTS (SELECT 1 FROM tenant_members m WHERE m.member = p.login)
RETURNING login;

-- name: people_list
SELECT p.login, p.admin, p.password_hash IS NOT NULL AS has_password, p.password_set_at,
       t.name AS tenant, m.capability_set, m.added_at
FROM people p
LEFT JOIN tenant_members m ON m.member = p.login
LEFT JOIN tenants t ON t.id = m.tenant_id
WHERE %(tenant)s::text IS NULL OR t.name = %(tenant)s
ORDER BY lower(p.login), t.name;

-- name: person_from_directory
-- A person the directory vouched for: made (no password) or marked as the directory's.
INSERT INTO people (login, directory) VALUES (%(login)s, 'ldap')
ON CONFLICT (login) DO UPDATE SET directory = 'ldap'
RETURNING login;
