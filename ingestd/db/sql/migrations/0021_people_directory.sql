-- 0021 people from a directory (issue 31): a person who logged in through LDAP/Active
-- Directory is recorded with where their login is checked, so that `ingestd user passwd`
-- is not mistaken for the way to change it, and their memberships in the tenants the
-- directory's groups name are set from those groups at every login.
ALTER TABLE people ADD COLUMN IF NOT EXISTS directory TEXT NOT NULL DEFAULT 'local'
    CHECK (directory IN ('local', 'ldap'));
