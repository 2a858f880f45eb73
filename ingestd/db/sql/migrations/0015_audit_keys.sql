-- 0015 audit keys and rosters (issue 29): a seal of the appliance's chain (0) also commits
-- to every tenant chain's head at that moment, so a tenant's trail cannot vanish or be cut
-- short unseen; the list itself is kept beside the seal (its SHA-256 is in the signed
-- body). NULL for the seals of tenant chains and for seals made before this version.
ALTER TABLE audit_seals ADD COLUMN IF NOT EXISTS roster TEXT;
