-- Search's name tier (queries.sql `search`, issue 30) looks for the query inside every
-- document's original file name (ILIKE '%Scan\_0815%'). Without an index each search
-- read all of the tenant's documents; a trigram index answers it from the few rows whose
-- names hold the query's trigrams. pg_trgm is installed by 0013. Built once at upgrade,
-- in the migration's transaction (writes to documents wait for it: seconds per million
-- documents).
CREATE INDEX IF NOT EXISTS documents_original_filename_trgm
    ON documents USING gin (original_filename gin_trgm_ops);
