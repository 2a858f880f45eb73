-- 0013 search inside compound words (issue 20): "Rechnung" finds "Abschlagsrechnung".
--
-- The full-text vector (document_content.search) matches whole words and their stems
-- only. Its lexemes - each distinct word of title and text once, lower-cased, in the
-- 'simple' form and as the configuration's stem - are kept as one text too, with a
-- trigram index: it finds the documents in which a query word occurs inside a longer
-- word (LIKE '%rechnung%'); query `search` ranks them below the documents the full-text
-- query matches as it is.
--
-- pg_trgm ships with PostgreSQL (Debian: postgresql-15) and is a trusted extension since
-- PostgreSQL 13: the database's owner may create it (createdb -O ingestd ingestd).
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- A vector's lexemes as one space-separated text. array_to_string is only STABLE (it is
-- polymorphic, and some types print by settings); on text[] it is immutable, which a
-- generated column needs.
CREATE OR REPLACE FUNCTION lexeme_text(v TSVECTOR) RETURNS TEXT
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN array_to_string(tsvector_to_array(v), ' ');

-- The lexemes of a tsquery (its text form) that are looked for inside longer words: 3
-- characters or more (shorter ones have no trigram to look up) and not only digits (an
-- invoice number is not a compound of a shorter one). Each once.
CREATE OR REPLACE FUNCTION search_infixes(query TEXT) RETURNS TEXT[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN ARRAY(
        SELECT DISTINCT l
        FROM regexp_matches(query, '''((?:''''|\\.|[^''\\])*)''', 'g') AS m,
             replace(regexp_replace(m[1], '\\(.)', '\1', 'g'), '''''', '''') AS l
        WHERE length(l) >= 3 AND l !~ '^[0-9]+$'
        ORDER BY l);

-- LIKE patterns ('%rechnung%') of the infixes a document must contain one of to match
-- the query with them: querytree() leaves out the negated lexemes.
CREATE OR REPLACE FUNCTION search_anchors(query TSQUERY) RETURNS TEXT[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN ARRAY(
        SELECT '%' || replace(replace(replace(l, '\', '\\'), '%', '\%'), '_', '\_') || '%'
        FROM unnest(search_infixes(querytree(query))) AS l);

-- Written with every vector (a stored generated column: existing rows get theirs here,
-- the table is rewritten once).
ALTER TABLE document_content ADD COLUMN IF NOT EXISTS search_words TEXT
    GENERATED ALWAYS AS (lexeme_text(search)) STORED;
CREATE INDEX IF NOT EXISTS idx_document_content_words
    ON document_content USING gin (search_words gin_trgm_ops);
