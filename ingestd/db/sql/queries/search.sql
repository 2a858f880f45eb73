-- Full-text search (ingestd/search).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

-- name: search_timeout_set
-- The statement timeout of one search (ingestd/search/query.py), for the rest of this
-- transaction; returns the one it replaces, which the search sets back when done.
SELECT current_setting('statement_timeout') AS was,
       set_config('statement_timeout', %(timeout)s, true) AS now;

-- name: search_terms
-- What query `search` looks for (ingestd/cli/search.py runs both): the web-search query
-- (words ANDed, "a phrase", or, -word) in the tenant's configuration (tenant_search,
-- 'german' by default: a word finds its inflections) and in 'simple' (a name or number
-- finds itself); of its lexemes those looked for inside longer words, and the LIKE
-- patterns a compound match needs one of (migration 0013). Passed on as values, so the
-- planner of `search` sees them and picks the trigram index by their selectivity.
WITH cfg AS (
    SELECT coalesce((SELECT config FROM tenant_search WHERE tenant_id = %(tenant_id)s),
                    'german') AS config
), q AS (
    SELECT cfg.config, websearch_to_tsquery(cfg.config, %(query)s)
           || websearch_to_tsquery('simple', %(query)s) AS query
    FROM cfg
)
SELECT q.config::text AS config, q.query::text AS tsquery,
       search_infixes(q.query::text) AS infixes, search_anchors(q.query) AS anchors
FROM q;

-- name: search
-- Tenant-scoped search in three tiers: name hits, then exact ones, then compound ones.
-- exact: the full-text query (search_terms) matches the document's vector; ts_rank_cd.
-- compound (unless compounds is false): a query word of 3+ characters, not only digits,
-- occurs inside a longer word - 'rechnung' in "Abschlagsrechnung", the stem 'kundig' in
-- "Kündigungsfrist" - found by the trigram index on search_words. The document's vector
-- with the query words found inside its words added must match the same query: `or` and
-- -word keep their meaning (a negated word excludes a document that has it inside a
-- word too), a phrase's words must still be whole words in a row (only those have
-- positions). Searched only while the exact tier leaves room below the limit (else no
-- compound hit would be shown). Snippets mark the words the query was found in.
-- name (issue 30): the query as typed occurs in the original file name (%(name_pattern)s,
-- a case-insensitive LIKE pattern, NULL for a query under 3 characters; found through
-- the trigram index of migration 0019): `Scan_0815` finds the scan
-- whose title became its sender's name, analysed or not. Ranked above the others (a file
-- name is what the user remembers); a document is listed once, in its best tier.
WITH q AS (
    SELECT %(config)s::regconfig AS config, %(tsquery)s::tsquery AS query
), named AS MATERIALIZED (
    SELECT d.id AS document_id, 1::real AS rank
    FROM documents d
    WHERE %(name_pattern)s::text IS NOT NULL AND d.tenant_id = %(tenant_id)s
      AND d.original_filename ILIKE %(name_pattern)s::text
    ORDER BY d.id DESC
    LIMIT %(limit)s
), exact AS MATERIALIZED (
    SELECT c.document_id, ts_rank_cd(c.search, %(tsquery)s::tsquery) AS rank
    FROM document_content c
    WHERE c.tenant_id = %(tenant_id)s AND c.search @@ %(tsquery)s::tsquery
), compound AS (
    SELECT c.document_id, ts_rank(c.search || x.found, %(tsquery)s::tsquery) AS rank
    FROM document_content c
    CROSS JOIN LATERAL (
        SELECT array_to_tsvector(array_agg(l)) AS found
        FROM unnest(%(infixes)s::text[]) AS l
        WHERE strpos(c.search_words, l) > 0) x
    WHERE %(compounds)s AND (SELECT count(*) FROM exact) < %(limit)s
      AND c.tenant_id = %(tenant_id)s
      AND c.search_words LIKE ANY (%(anchors)s::text[])
      AND NOT c.search @@ %(tsquery)s::tsquery
      AND c.search || x.found @@ %(tsquery)s::tsquery
), best AS (
    SELECT DISTINCT ON (document_id) document_id, tier, rank
    FROM (SELECT document_id, 0 AS tier, rank FROM named
          UNION ALL
          SELECT document_id, 1, rank FROM exact
          UNION ALL
          SELECT document_id, 2, rank FROM compound) h
    ORDER BY document_id, tier, rank DESC
), top AS (
    SELECT document_id, tier, rank FROM best
    ORDER BY tier, rank DESC, document_id DESC
    LIMIT %(limit)s
)
SELECT d.id, d.title, d.issued_date, d.original_filename, c.page_count,
       CASE t.tier WHEN 0 THEN 'name' WHEN 1 THEN 'exact' ELSE 'compound' END AS match,
       t.rank,
       CASE WHEN c.document_id IS NOT NULL THEN ts_headline(
           CASE t.tier WHEN 2 THEN 'simple'::regconfig ELSE q.config END,
           left(c.content, 100000),
           CASE t.tier WHEN 2 THEN coalesce(q.query || (
               SELECT string_agg('''' || replace(replace(w, '\', '\\'), '''', '''''') || '''',
                                 ' | ')::tsquery
               FROM unnest(tsvector_to_array(c.search)) AS w
               WHERE EXISTS (SELECT FROM unnest(%(infixes)s::text[]) AS l
                             WHERE strpos(w, l) > 0)), q.query) ELSE q.query END,
           'MaxFragments=2, MaxWords=18, MinWords=6, StartSel=«, StopSel=»') END AS snippet
FROM top t
JOIN documents d ON d.id = t.document_id
LEFT JOIN document_content c ON c.document_id = t.document_id
CROSS JOIN q
ORDER BY t.tier, t.rank DESC, d.id DESC;
