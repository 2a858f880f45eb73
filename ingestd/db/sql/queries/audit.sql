-- The audit trail and archive verification (ingestd/archive).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

-- name: verify_documents
SELECT d.id, t.name AS tenant, d.sha256, d.size_bytes, d.archive_path
FROM documents d JOIN tenants t ON t.id = d.tenant_id ORDER BY d.id;

-- name: verify_lineage
-- Lineage problems: a split batch without parts, parts that overlap or run backwards.
SELECT d.id, 'split batch without children' AS detail
FROM documents d
WHERE d.processing_status = 'split'
  AND NOT EXISTS (SELECT 1 FROM document_parts p WHERE p.parent_id = d.id)
UNION ALL
SELECT p.parent_id, format('part %s (pages %s-%s) overlaps part %s (pages %s-%s)',
                           p.position, p.first_page, p.last_page,
                           q.position, q.first_page, q.last_page)
FROM document_parts p JOIN document_parts q
  ON q.parent_id = p.parent_id AND q.position = p.position + 1
WHERE q.first_page <= p.last_page
ORDER BY 1;

-- name: audit_append
-- One entry at the end of a chain (the function in migration 0010 builds and hashes it).
SELECT seq, hash FROM audit_append(%(chain)s, %(tenant)s, %(kind)s, %(document_id)s,
                                   %(detail)s);

-- name: audit_chain_of_tenant
-- A tenant's chain by name (its id); NULL when no such tenant exists.
SELECT id AS chain FROM tenants WHERE name = %(tenant)s;

-- name: audit_chains
-- Every chain with its head, the tenant's name (NULL once it is deleted) and its newest
-- seal.
SELECT h.chain, h.seq, h.hash, t.name AS tenant
FROM audit_heads h LEFT JOIN tenants t ON t.id = h.chain
ORDER BY h.chain;

-- name: audit_entries_all
-- Every entry of every chain in order (verify streams these).
SELECT chain, seq, kind, tenant, document_id, body, prev_hash, hash
FROM audit_events ORDER BY chain, seq;

-- name: audit_entries_between
-- A chain's entries made in [from, to) (export).
SELECT seq, body, prev_hash, hash FROM audit_events
WHERE chain = %(chain)s AND at >= %(from)s AND at < %(to)s ORDER BY seq;

-- name: audit_seals_of
SELECT id, chain, seq, head, body, signature, public_key, tsa_reply, made_at
FROM audit_seals WHERE chain = %(chain)s ORDER BY id;

-- name: audit_seals_all
-- Every seal without its roster (a roster per hourly seal adds up; verify reads the
-- newest one only: audit_newest_appliance_seal).
SELECT id, chain, seq, head, body, signature, public_key, tsa_reply, made_at
FROM audit_seals ORDER BY chain, id;

-- name: audit_newest_appliance_seal
-- The newest seal of the appliance's chain that carries a roster, with it.
SELECT id, chain, seq, head, body, signature, public_key, tsa_reply, made_at, roster
FROM audit_seals WHERE chain = 0 AND roster IS NOT NULL ORDER BY seq DESC, id DESC LIMIT 1;

-- name: audit_roster_heads
-- Every tenant chain's head, for the roster a seal of the appliance's chain signs.
SELECT chain, seq, hash FROM audit_heads WHERE chain <> 0 AND seq > 0 ORDER BY chain;

-- name: audit_seal_keys
-- The keys seals were made with (adopting a key made before its entry in chain 0).
SELECT DISTINCT public_key FROM audit_seals;

-- name: audit_key_entries
-- The appliance's sealing keys as its own chain records them, oldest first.
SELECT seq, kind, body FROM audit_events
WHERE chain = 0 AND kind IN ('key.created', 'key.rotated') ORDER BY seq;

-- name: seal_lock
-- One seal run at a time, and no verify snapshot in the middle of one (a run seals the
-- tenant chains, then the appliance's chain that lists them): sealing holds it, verify
-- takes it shared before its snapshot.
SELECT pg_advisory_lock(%(k)s);

-- name: seal_lock_shared
SELECT pg_advisory_lock_shared(%(k)s);

-- name: seal_unlock
SELECT pg_advisory_unlock(%(k)s);

-- name: seal_unlock_shared
SELECT pg_advisory_unlock_shared(%(k)s);

-- name: audit_head_for_seal
-- A chain's head, locked so that nothing is appended between reading it and sealing it;
-- with the kind of its last entry (a chain whose last entry is its seal needs no new one).
SELECT h.chain, h.seq, h.hash, e.kind AS last_kind, t.name AS tenant
FROM audit_heads h
LEFT JOIN audit_events e ON e.chain = h.chain AND e.seq = h.seq
LEFT JOIN tenants t ON t.id = h.chain
WHERE h.chain = %(chain)s
FOR UPDATE OF h;

-- name: audit_seal_insert
INSERT INTO audit_seals (chain, seq, head, body, signature, public_key, tsa_reply, roster)
VALUES (%(chain)s, %(seq)s, %(head)s, %(body)s, %(signature)s, %(public_key)s, %(tsa_reply)s,
        %(roster)s)
RETURNING id;

-- name: audit_documents
-- The document rows verify checks against the chains.
SELECT id, tenant_id, sha256, archive_path FROM documents;

-- name: snapshot_read_only
-- First in a transaction: every statement after it sees the same snapshot.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: audit_head_of
SELECT seq, hash FROM audit_heads WHERE chain = %(chain)s;
