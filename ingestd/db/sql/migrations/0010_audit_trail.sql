-- 0010 audit trail (issue 18): every archive event, appended in the event's transaction,
-- each entry carrying the hash of the one before it.
--
-- One chain per tenant (chain = the tenant's id; 0 is the appliance's own chain: verify
-- runs, refusals for unknown tenants, the opening of every tenant chain). Per tenant,
-- because intake of different tenants must not queue behind one head row, and because a
-- tenant's export is then a whole chain its auditor verifies without anyone else's
-- records. No foreign keys: the trail outlives the documents and tenants it records.

CREATE TABLE IF NOT EXISTS audit_events (
    chain       BIGINT NOT NULL CHECK (chain >= 0),
    seq         BIGINT NOT NULL CHECK (seq >= 1),
    at          TIMESTAMPTZ NOT NULL,
    kind        TEXT NOT NULL,
    tenant      TEXT,
    document_id BIGINT,
    -- The entry as hashed, byte for byte: hash = sha256(prev_hash || body), hex. The
    -- columns beside it are for queries; verify checks they say what the body says.
    body        TEXT NOT NULL,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL,
    PRIMARY KEY (chain, seq)
);
CREATE INDEX IF NOT EXISTS idx_audit_events_document ON audit_events (chain, document_id)
    WHERE document_id IS NOT NULL;

-- The newest entry of every chain. Appending locks this row (so a chain's entries are
-- numbered without gaps in commit order); verify checks it against the last entry.
CREATE TABLE IF NOT EXISTS audit_heads (
    chain BIGINT PRIMARY KEY CHECK (chain >= 0),
    seq   BIGINT NOT NULL,
    hash  TEXT NOT NULL
);

-- A signed statement of a chain's head (Ed25519; an RFC 3161 token when a TSA is set).
CREATE TABLE IF NOT EXISTS audit_seals (
    id         BIGSERIAL PRIMARY KEY,
    chain      BIGINT NOT NULL,
    seq        BIGINT NOT NULL,
    head       TEXT NOT NULL,
    body       TEXT NOT NULL,          -- what was signed and timestamped, byte for byte
    signature  TEXT NOT NULL,          -- hex
    public_key TEXT NOT NULL,          -- hex, raw Ed25519
    tsa_reply  TEXT,                   -- base64 DER TimeStampResp over sha256(body)
    made_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_audit_seals_chain ON audit_seals (chain, seq);

-- Append one entry; returns its position and hash. The body is built here, from the
-- arguments and the clock, so that every writer produces the same shape.
CREATE OR REPLACE FUNCTION audit_append(
    p_chain BIGINT, p_tenant TEXT, p_kind TEXT, p_document BIGINT, p_detail JSONB
) RETURNS TABLE (seq BIGINT, hash TEXT) LANGUAGE plpgsql AS $$
DECLARE
    head_seq  BIGINT;
    head_hash TEXT;
    body      TEXT;
    t         TIMESTAMPTZ := clock_timestamp();
BEGIN
    SELECT h.seq, h.hash INTO head_seq, head_hash
    FROM audit_heads h WHERE h.chain = p_chain FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO audit_heads AS h (chain, seq, hash) VALUES (p_chain, 0, repeat('0', 64))
        ON CONFLICT (chain) DO NOTHING;
        IF FOUND AND p_chain <> 0 THEN
            -- A chain that starts is named in the appliance's chain: removing a tenant's
            -- whole trail leaves that entry behind for verify to see.
            PERFORM audit_append(0, p_tenant, 'chain.opened', NULL,
                                 jsonb_build_object('chain', p_chain));
        END IF;
        SELECT h.seq, h.hash INTO head_seq, head_hash
        FROM audit_heads h WHERE h.chain = p_chain FOR UPDATE;
    END IF;
    seq := head_seq + 1;
    body := jsonb_build_object(
        'chain', p_chain,
        'seq', seq,
        'at', to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'kind', p_kind,
        'tenant', p_tenant,
        'document', p_document,
        'detail', coalesce(p_detail, '{}'::jsonb)
    )::text;
    hash := encode(sha256(convert_to(head_hash || body, 'UTF8')), 'hex');
    INSERT INTO audit_events (chain, seq, at, kind, tenant, document_id, body, prev_hash, hash)
    VALUES (p_chain, seq, t, p_kind, p_tenant, p_document, body, head_hash, hash);
    UPDATE audit_heads h SET seq = audit_append.seq, hash = audit_append.hash
    WHERE h.chain = p_chain;
    RETURN NEXT;
END
$$;

-- Append-only, for every role: the trigger holds against the owner and a superuser
-- (short of disabling it, which verify and the seals then reveal); the privileges are
-- taken from everyone, the owner included.
CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
-- Statement triggers: they fire even when no row matches (a probe is refused too).
CREATE OR REPLACE TRIGGER audit_events_append_only
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_events_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_seals_append_only
    BEFORE UPDATE OR DELETE ON audit_seals
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_seals_no_truncate
    BEFORE TRUNCATE ON audit_seals
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_events, audit_seals FROM PUBLIC;
REVOKE UPDATE, DELETE, TRUNCATE ON audit_events, audit_seals FROM CURRENT_USER;
