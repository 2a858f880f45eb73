-- 0023 facts about job kinds in one table (issue 32): per kind, whether it is short,
-- whether its jobs move their document's processing_status, and the operator event of
-- its failure. Declared once, in Python (ingestd.queue.kinds); ingestd.db.schema.migrate
-- writes them here at every migrate (query job_kinds_sync), so the SQL that needs them
-- reads them instead of repeating a list. Kinds from plugins have no row: they track
-- their document and fail with the default event, as before.
CREATE TABLE IF NOT EXISTS job_kinds (
    kind            TEXT PRIMARY KEY,
    short           BOOLEAN NOT NULL,
    tracks_document BOOLEAN NOT NULL,
    failed_event    TEXT  -- NULL: no operator event
);

-- Was IMMUTABLE with the list in its body; now one primary-key probe of a table of a
-- handful of rows. PL/pgSQL, not SQL: a SQL function with a subquery is not inlined and
-- is planned afresh in every statement that calls it (the claim calls it: +0.2 ms a claim,
-- bench/queue.py --only latency); PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION ingestd_tracks_document(p_kind TEXT) RETURNS BOOLEAN
    LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT k.tracks_document FROM job_kinds k WHERE k.kind = p_kind), true);
END $$;
