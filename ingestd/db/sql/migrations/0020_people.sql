-- 0020 people (issue 31): who may log in to the web console and the WebDAV mount.
--
-- A person is appliance-wide (one login, one password); what they may do in a tenant is
-- their membership's capability set (tenant_members, 0006), and `admin` is the
-- appliance-wide operator role, no tenant's documents included. Members named at
-- `tenant create` (the seed's provision-tenant member list) become people without a
-- password until `ingestd user passwd` gives them one: a NULL hash never logs in.
-- Logins are matched without regard to case (one index on lower(login)).
CREATE TABLE IF NOT EXISTS people (
    login           TEXT PRIMARY KEY
        CHECK (length(login) BETWEEN 1 AND 200 AND login !~ '[[:cntrl:]]'),
    password_hash   TEXT CHECK (password_hash IS NULL OR password_hash ~ '^\$2[aby]\$'),
    admin           BOOLEAN NOT NULL DEFAULT false,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    password_set_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX IF NOT EXISTS people_login_lower ON people (lower(login));

-- Every member already named becomes a person (no password yet), then every membership
-- must name one: a member is someone who can be given a password.
INSERT INTO people (login)
SELECT DISTINCT ON (lower(member)) member FROM tenant_members ORDER BY lower(member), member
ON CONFLICT DO NOTHING;
-- A member written twice in other case ("Anna", "anna") is the one person: the spelling
-- kept above; within one tenant one membership of the person stays (the spelling that
-- sorts first, with its set).
DELETE FROM tenant_members m
WHERE EXISTS (SELECT 1 FROM tenant_members o
              WHERE o.tenant_id = m.tenant_id AND lower(o.member) = lower(m.member)
                AND o.member < m.member);
UPDATE tenant_members m SET member = p.login FROM people p
WHERE lower(m.member) = lower(p.login) AND m.member <> p.login;
ALTER TABLE tenant_members DROP CONSTRAINT IF EXISTS tenant_members_person;
ALTER TABLE tenant_members ADD CONSTRAINT tenant_members_person
    FOREIGN KEY (member) REFERENCES people (login) ON UPDATE CASCADE;

-- The system sets hold the actions of ingestd/people/capabilities.py (its table as of
-- this release; provisioning writes the code's table from now on).
UPDATE capability_sets SET capabilities = CASE name
    WHEN 'readonly' THEN ARRAY['download', 'search', 'view']
    WHEN 'user' THEN ARRAY['download', 'edit', 'search', 'upload', 'view']
    WHEN 'owner' THEN ARRAY['arrivals', 'attention', 'download', 'edit', 'members',
                            'retention', 'search', 'upload', 'view']
    WHEN 'webdav' THEN ARRAY['mount']
    ELSE capabilities END
WHERE system;
