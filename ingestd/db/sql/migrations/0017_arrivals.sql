-- 0017 arrivals (issue 30): every file that reaches a source is a row, whatever became of
-- it - archived, a duplicate of document N, refused (with the reason), quarantined (with
-- where it is now) or waiting (and why) - so "what happened to my file" is answered from
-- the database, not from a journal that rotates.
--
-- One row per file, keyed by its trace id (the SFTP spool id, the hot folder's pending
-- id, the CLI's own): a file retried, or a row written again from the on-disk event
-- buffer after an outage, updates its row instead of adding one. Kept by tenant NAME: a
-- refusal may concern a tenant that does not exist (an account of a deleted tenant);
-- delete-tenant removes them by name (query arrivals_wipe), housekeeping after
-- [arrivals] keep_days (arrivals_prune).
CREATE TABLE IF NOT EXISTS arrivals (
    id            BIGSERIAL PRIMARY KEY,
    trace_id      TEXT NOT NULL UNIQUE,
    tenant        TEXT NOT NULL,
    source        TEXT NOT NULL,             -- sftp, watch, cli, ... (the kind)
    origin        TEXT NOT NULL DEFAULT '',  -- the SFTP account or the hot folder
    subdir        TEXT NOT NULL DEFAULT '',  -- below the inbox or hot folder
    original_name TEXT NOT NULL,             -- as received (escaped where not UTF-8)
    size_bytes    BIGINT,
    sha256        TEXT,
    arrived_at    TIMESTAMPTZ NOT NULL,
    decided_at    TIMESTAMPTZ NOT NULL,
    outcome       TEXT NOT NULL
        CHECK (outcome IN ('archived', 'duplicate', 'refused', 'quarantined', 'waiting')),
    document_id   BIGINT,                    -- archived: its document; duplicate: the first
    reason        TEXT NOT NULL DEFAULT '',  -- a short code: bad_type, tenant_suspended ...
    detail        TEXT NOT NULL DEFAULT '',  -- the sentence
    location      TEXT                       -- quarantined: where the file is now
);
CREATE INDEX IF NOT EXISTS arrivals_tenant_arrived ON arrivals (tenant, arrived_at);
CREATE INDEX IF NOT EXISTS arrivals_arrived ON arrivals (arrived_at);
CREATE INDEX IF NOT EXISTS arrivals_document ON arrivals (document_id);

-- Record (or update) one file's arrival. A decision replaces the row's outcome; "waiting"
-- never replaces a decision (a buffered waiting row flushed after the file was archived
-- must not undo it). The arrival time is the earliest ever given, size and SHA-256 the
-- last known. A hot-folder file's trace id lives in the daemon's memory only: after a
-- restart the same waiting file comes with a new one, so its row under the old id (same
-- folder, sub-folder and name, still waiting) is taken over, with its arrival time.
CREATE OR REPLACE FUNCTION arrival_upsert(
    p_trace      TEXT,
    p_tenant     TEXT,
    p_source     TEXT,
    p_origin     TEXT,
    p_subdir     TEXT,
    p_name       TEXT,
    p_size       BIGINT,
    p_sha256     TEXT,
    p_arrived    TIMESTAMPTZ,
    p_decided    TIMESTAMPTZ,
    p_outcome    TEXT,
    p_document   BIGINT,
    p_reason     TEXT,
    p_detail     TEXT,
    p_location   TEXT
) RETURNS BIGINT
LANGUAGE sql AS $$
    WITH stale AS (
        DELETE FROM arrivals s
        WHERE p_source = 'watch' AND s.outcome = 'waiting' AND s.trace_id <> p_trace
          AND s.tenant = p_tenant AND s.source = p_source AND s.origin = coalesce(p_origin, '')
          AND s.subdir = coalesce(p_subdir, '') AND s.original_name = p_name
        RETURNING s.arrived_at
    )
    INSERT INTO arrivals AS a (trace_id, tenant, source, origin, subdir, original_name,
                               size_bytes, sha256, arrived_at, decided_at, outcome,
                               document_id, reason, detail, location)
    VALUES (p_trace, p_tenant, p_source, coalesce(p_origin, ''), coalesce(p_subdir, ''),
            p_name, p_size, p_sha256,
            least(coalesce(p_arrived, p_decided), (SELECT min(arrived_at) FROM stale)),
            p_decided, p_outcome,
            p_document, coalesce(p_reason, ''), coalesce(p_detail, ''), p_location)
    ON CONFLICT (trace_id) DO UPDATE SET
        arrived_at = least(a.arrived_at, EXCLUDED.arrived_at),
        size_bytes = coalesce(EXCLUDED.size_bytes, a.size_bytes),
        sha256 = coalesce(EXCLUDED.sha256, a.sha256),
        decided_at = CASE WHEN p_outcome = 'waiting' AND a.outcome <> 'waiting'
                          THEN a.decided_at ELSE EXCLUDED.decided_at END,
        outcome = CASE WHEN p_outcome = 'waiting' THEN a.outcome ELSE EXCLUDED.outcome END,
        document_id = CASE WHEN p_outcome = 'waiting' AND a.outcome <> 'waiting'
                           THEN a.document_id ELSE EXCLUDED.document_id END,
        reason = CASE WHEN p_outcome = 'waiting' AND a.outcome <> 'waiting'
                      THEN a.reason ELSE EXCLUDED.reason END,
        detail = CASE WHEN p_outcome = 'waiting' AND a.outcome <> 'waiting'
                      THEN a.detail ELSE EXCLUDED.detail END,
        location = CASE WHEN p_outcome = 'waiting' AND a.outcome <> 'waiting'
                        THEN a.location ELSE EXCLUDED.location END
    RETURNING a.id;
$$;
