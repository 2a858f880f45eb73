-- The current schema of ingestd, all of it: every table, index, function and trigger the
-- migrations (migrations/0001..NNNN) leave behind, grouped by what it serves.
--
-- A reference to read, not what installs a database: `ingestd migrate` runs the
-- migrations, and tests/integration/test_schema_file.py checks that this file builds the
-- very catalogue they build (pg_dump of both, compared). A new migration therefore comes
-- with its change here; where the two disagree the test says where.
--
-- The migrations table (schema_migrations) is the migrations runner's own
-- (ingestd/db/schema.py) and is not listed. Facts kept in Python and only passed in are
-- said where they are used (short kinds: ingestd/jobkinds.py, every claim passes them);
-- the rows of job_kinds are written from ingestd/jobkinds.py at every migrate.

-- pg_trgm ships with PostgreSQL and is a trusted extension: the database's owner may
-- create it. Trigram indexes find query words inside compound words and file names.
CREATE EXTENSION IF NOT EXISTS pg_trgm;


-- =====================================================================================
-- Helpers (no tables)
-- =====================================================================================

-- A vector's lexemes as one space-separated text. array_to_string is only STABLE (it is
-- polymorphic); on text[] it is immutable, which a generated column needs.
CREATE FUNCTION lexeme_text(v tsvector) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN array_to_string(tsvector_to_array(v), ' ');

-- The lexemes of a tsquery (its text form) that are looked for inside longer words: 3
-- characters or more and not only digits. Each once.
CREATE FUNCTION search_infixes(query text) RETURNS text[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN ARRAY(
        SELECT DISTINCT l
        FROM regexp_matches(query, '''((?:''''|\\.|[^''\\])*)''', 'g') AS m,
             replace(regexp_replace(m[1], '\\(.)', '\1', 'g'), '''''', '''') AS l
        WHERE length(l) >= 3 AND l !~ '^[0-9]+$'
        ORDER BY l);

-- LIKE patterns ('%rechnung%') of the infixes a document must contain one of to match
-- the query with them: querytree() leaves out the negated lexemes.
CREATE FUNCTION search_anchors(query tsquery) RETURNS text[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN ARRAY(
        SELECT '%' || replace(replace(replace(l, '\', '\\'), '%', '\%'), '_', '\_') || '%'
        FROM unnest(search_infixes(querytree(query))) AS l);

-- Kept to the end of the calendar year `years` after the year of ingest (UTC).
CREATE FUNCTION retention_until(p_created timestamp with time zone, p_years integer) RETURNS date
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN p_years > 0 THEN
        make_date(extract(year FROM p_created AT TIME ZONE 'UTC')::int + p_years, 12, 31)
    END
$$;

-- When a failed job is tried again: exponential backoff with jitter.
CREATE FUNCTION ingestd_retry_at(
    p_retry_count integer, p_base double precision, p_jitter double precision
) RETURNS timestamp with time zone
    LANGUAGE sql
    AS $$
    SELECT now() + make_interval(secs => p_base * power(2, p_retry_count)
                                         * (1 + p_jitter * (2 * random() - 1)))
$$;


-- =====================================================================================
-- Tenants and the people who may work in them
-- =====================================================================================

-- A tenant is created 'creating' (provision-tenant makes it 'active'); '_system' is the
-- appliance's own tenant (its notifications run in its lane).
CREATE TABLE tenants (
    id bigserial,
    name text NOT NULL,
    status text NOT NULL DEFAULT 'creating',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenants_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$' OR name = '_system'),
    CONSTRAINT tenants_status_check
        CHECK (status IN ('creating', 'active', 'suspended', 'deleting')),
    CONSTRAINT tenants_name_key UNIQUE (name),
    CONSTRAINT tenants_pkey PRIMARY KEY (id)
);

-- Who may log in to the web console and the WebDAV mount (appliance-wide). A NULL
-- password hash never logs in; `directory` says where the login is checked; a session
-- counts only if it began after sessions_from and password_set_at.
CREATE TABLE people (
    login text NOT NULL,
    password_hash text,
    admin boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    password_set_at timestamptz,
    directory text NOT NULL DEFAULT 'local',
    sessions_from timestamptz,
    CONSTRAINT people_directory_check CHECK (directory IN ('local', 'ldap')),
    CONSTRAINT people_login_check CHECK (length(login) BETWEEN 1 AND 200 AND login !~ '[[:cntrl:]]'),
    CONSTRAINT people_password_hash_check CHECK (password_hash IS NULL OR password_hash ~ '^\$2[aby]\$'),
    CONSTRAINT people_pkey PRIMARY KEY (login)
);
CREATE UNIQUE INDEX people_login_lower ON people (lower(login));

-- The capability sets of a tenant (the system ones every tenant gets, and its own).
CREATE TABLE capability_sets (
    tenant_id bigint NOT NULL,
    name text NOT NULL,
    capabilities text[] NOT NULL,
    system boolean NOT NULL DEFAULT false,
    CONSTRAINT capability_sets_name_check CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    CONSTRAINT capability_sets_pkey PRIMARY KEY (tenant_id, name),
    CONSTRAINT capability_sets_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
);

-- A person's membership of a tenant, with its capability set.
CREATE TABLE tenant_members (
    tenant_id bigint NOT NULL,
    member text NOT NULL,
    capability_set text NOT NULL,
    added_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenant_members_member_check CHECK (length(member) BETWEEN 1 AND 200),
    CONSTRAINT tenant_members_pkey PRIMARY KEY (tenant_id, member),
    CONSTRAINT tenant_members_person FOREIGN KEY (member)
        REFERENCES people(login) ON UPDATE CASCADE,
    CONSTRAINT tenant_members_tenant_id_capability_set_fkey FOREIGN KEY (tenant_id, capability_set)
        REFERENCES capability_sets(tenant_id, name),
    CONSTRAINT tenant_members_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
);

-- The text search configuration of a tenant's documents.
CREATE TABLE tenant_search (
    tenant_id bigint NOT NULL,
    config regconfig NOT NULL DEFAULT 'german'::regconfig,
    CONSTRAINT tenant_search_pkey PRIMARY KEY (tenant_id),
    CONSTRAINT tenant_search_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
);

-- Every delete-tenant nonce ever accepted, with the job that used it: a replay (the same
-- nonce in another job) is refused, a retry of the same job is not. No foreign keys.
CREATE TABLE tenant_delete_nonces (
    nonce text NOT NULL,
    job_id bigint NOT NULL,
    tenant_id bigint NOT NULL,
    tenant_name text NOT NULL,
    action text NOT NULL,
    used_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    CONSTRAINT tenant_delete_nonces_nonce_check CHECK (length(nonce) BETWEEN 16 AND 128),
    CONSTRAINT tenant_delete_nonces_pkey PRIMARY KEY (nonce)
);

-- The retention policy last applied for each tenant (its rules from the config).
CREATE TABLE retention_policies (
    tenant_id bigint NOT NULL,
    fingerprint text NOT NULL,
    policy jsonb NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT retention_policies_pkey PRIMARY KEY (tenant_id),
    CONSTRAINT retention_policies_tenant_id_fkey FOREIGN KEY (tenant_id)
        REFERENCES tenants(id) ON DELETE CASCADE
);


-- =====================================================================================
-- Documents and what analysis derives from them
-- =====================================================================================

-- Taxonomy: per-tenant correspondents and document types (rules live in config).
CREATE TABLE correspondents (
    id bigserial,
    tenant_id bigint NOT NULL,
    name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT correspondents_name_check CHECK (length(name) BETWEEN 1 AND 128),
    CONSTRAINT correspondents_pkey PRIMARY KEY (id),
    CONSTRAINT correspondents_tenant_name_key UNIQUE (tenant_id, name),
    CONSTRAINT correspondents_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
);

CREATE TABLE document_types (
    id bigserial,
    tenant_id bigint NOT NULL,
    name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT document_types_name_check CHECK (length(name) BETWEEN 1 AND 128),
    CONSTRAINT document_types_pkey PRIMARY KEY (id),
    CONSTRAINT document_types_tenant_name_key UNIQUE (tenant_id, name),
    CONSTRAINT document_types_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
);

-- An archived original. processing_status follows the document's processing jobs
-- (ingestd_tracks_document); default 'done' for rows from before the queue. fillfactor
-- leaves room on each page so status, title and date updates stay HOT.
CREATE TABLE documents (
    id bigserial,
    tenant_id bigint NOT NULL,
    sha256 text NOT NULL,
    size_bytes bigint NOT NULL,
    mime_type text NOT NULL,
    extension text NOT NULL,
    original_filename text NOT NULL,
    source text NOT NULL,
    source_subdir text NOT NULL DEFAULT '',
    archive_path text NOT NULL,
    title text NOT NULL,
    issued_date date,
    created_at timestamptz NOT NULL DEFAULT now(),
    processing_status text NOT NULL DEFAULT 'done',
    correspondent_id bigint,
    document_type_id bigint,
    trashed_at timestamptz,
    attention_reason text,
    trace_id text,
    asn bigint,
    -- Frozen at intake (0024): the source's date_source then (NULL: recorded before
    -- 0024, until the backfill) and the date the file name gave.
    date_policy text,
    name_date date,
    CONSTRAINT documents_asn_check CHECK (asn >= 0),
    CONSTRAINT documents_date_policy_check
        CHECK (date_policy IN ('filename-first', 'text-first')),
    CONSTRAINT documents_processing_status_check
        CHECK (processing_status IN ('queued', 'processing', 'done', 'failed', 'attention', 'split')),
    CONSTRAINT documents_sha256_check CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    CONSTRAINT documents_size_bytes_check CHECK (size_bytes > 0),
    CONSTRAINT documents_pkey PRIMARY KEY (id),
    CONSTRAINT documents_tenant_sha256_key UNIQUE (tenant_id, sha256),
    CONSTRAINT documents_correspondent_id_fkey FOREIGN KEY (correspondent_id)
        REFERENCES correspondents(id) ON DELETE SET NULL,
    CONSTRAINT documents_document_type_id_fkey FOREIGN KEY (document_type_id)
        REFERENCES document_types(id) ON DELETE SET NULL,
    CONSTRAINT documents_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
)
WITH (fillfactor='85');
CREATE INDEX documents_original_filename_trgm ON documents USING gin (original_filename gin_trgm_ops);
CREATE UNIQUE INDEX documents_tenant_asn_key ON documents (tenant_id, asn) WHERE (asn IS NOT NULL);
CREATE INDEX idx_documents_attention ON documents (tenant_id, id)
    WHERE (processing_status = 'attention');
CREATE INDEX idx_documents_tenant_created ON documents (tenant_id, created_at);
CREATE INDEX idx_documents_policy_unset ON documents (id) WHERE (date_policy IS NULL);

-- Per-tenant tag names and their assignment to documents; `origin` says who assigned it.
CREATE TABLE tags (
    id bigserial,
    tenant_id bigint NOT NULL,
    name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tags_name_check CHECK (length(name) BETWEEN 1 AND 100),
    CONSTRAINT tags_pkey PRIMARY KEY (id),
    CONSTRAINT tags_tenant_name_key UNIQUE (tenant_id, name),
    CONSTRAINT tags_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
);

CREATE TABLE document_tags (
    document_id bigint NOT NULL,
    tag_id bigint NOT NULL,
    tenant_id bigint NOT NULL,
    origin text NOT NULL DEFAULT 'intake',
    CONSTRAINT document_tags_origin_check
        CHECK (origin IN ('intake', 'taxonomy', 'workflow', 'user', 'barcode')),
    CONSTRAINT document_tags_pkey PRIMARY KEY (document_id, tag_id),
    CONSTRAINT document_tags_document_id_fkey FOREIGN KEY (document_id)
        REFERENCES documents(id) ON DELETE CASCADE,
    CONSTRAINT document_tags_tag_id_fkey FOREIGN KEY (tag_id) REFERENCES tags(id) ON DELETE CASCADE,
    CONSTRAINT document_tags_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
);
CREATE INDEX idx_document_tags_tag ON document_tags (tag_id);

-- The text of a document page by page, its derivatives and its search vector (derived
-- data, rebuilt from the archive by a forced re-analysis). search_words: the vector's
-- lexemes as text, with a trigram index, for words inside compound words.
CREATE TABLE document_content (
    document_id bigint NOT NULL,
    tenant_id bigint NOT NULL,
    page_count integer NOT NULL,
    pages text[] NOT NULL,
    content text NOT NULL,
    languages text NOT NULL,
    searchable_pdf text,
    thumbnail text,
    engine text NOT NULL,
    search tsvector NOT NULL,
    analyzed_at timestamptz NOT NULL DEFAULT now(),
    placeholder_title text,
    derived_title text,
    derived_issued_date date,
    search_words text GENERATED ALWAYS AS (lexeme_text(search)) STORED,
    CONSTRAINT document_content_page_count_check CHECK (page_count >= 0),
    CONSTRAINT document_content_pkey PRIMARY KEY (document_id),
    CONSTRAINT document_content_document_id_fkey FOREIGN KEY (document_id)
        REFERENCES documents(id) ON DELETE CASCADE,
    CONSTRAINT document_content_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
);
CREATE INDEX idx_document_content_search ON document_content USING gin (search);

-- What an e-invoice says (issue 33), read from its XML or a hybrid PDF's embedded XML;
-- derived data (the original is the document), made again by a re-analysis.
CREATE TABLE invoices (
    document_id    BIGINT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
    tenant_id      BIGINT NOT NULL REFERENCES tenants(id),
    source         TEXT NOT NULL CHECK (source IN ('xml', 'embedded')),
    syntax         TEXT NOT NULL CHECK (syntax IN ('ubl', 'cii')),
    profile        TEXT,
    number         TEXT,
    type_code      TEXT,
    kind           TEXT NOT NULL CHECK (kind IN ('invoice', 'credit_note')),
    issue_date     DATE,
    due_date       DATE,
    currency       TEXT,
    seller_name    TEXT,
    seller_vat_id  TEXT,
    buyer_name     TEXT,
    buyer_reference TEXT,
    net_total      NUMERIC,
    tax_total      NUMERIC,
    gross_total    NUMERIC,
    payable        NUMERIC,
    line_count     INTEGER NOT NULL DEFAULT 0,
    fields         JSONB NOT NULL,
    legal_status   TEXT NOT NULL CHECK (legal_status IN ('e-invoice', 'other invoice')),
    format_errors  INTEGER NOT NULL DEFAULT 0,
    rule_errors    INTEGER NOT NULL DEFAULT 0,
    report         JSONB NOT NULL,
    pdf_check      TEXT,
    duplicate_of   BIGINT REFERENCES documents(id) ON DELETE SET NULL,
    analyzed_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX idx_invoices_seller_number ON invoices (tenant_id, seller_vat_id, number);
CREATE INDEX idx_invoices_issue_date ON invoices (tenant_id, issue_date);
CREATE INDEX idx_document_content_tenant ON document_content (tenant_id);
CREATE INDEX idx_document_content_words ON document_content USING gin (search_words gin_trgm_ops);

-- Batch split lineage: a parent scan and the documents split from it, with page ranges.
CREATE TABLE document_parts (
    parent_id bigint NOT NULL,
    "position" integer NOT NULL,
    first_page integer NOT NULL,
    last_page integer NOT NULL,
    child_id bigint NOT NULL,
    tenant_id bigint NOT NULL,
    CONSTRAINT document_parts_check CHECK (last_page >= first_page),
    CONSTRAINT document_parts_check1 CHECK (child_id <> parent_id),
    CONSTRAINT document_parts_first_page_check CHECK (first_page >= 1),
    CONSTRAINT document_parts_position_check CHECK ("position" >= 1),
    CONSTRAINT document_parts_pkey PRIMARY KEY (parent_id, "position"),
    CONSTRAINT document_parts_child_id_fkey FOREIGN KEY (child_id)
        REFERENCES documents(id) ON DELETE CASCADE,
    CONSTRAINT document_parts_parent_id_fkey FOREIGN KEY (parent_id)
        REFERENCES documents(id) ON DELETE CASCADE,
    CONSTRAINT document_parts_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
);
CREATE INDEX idx_document_parts_child ON document_parts (child_id);

-- On-upload workflows run once per document; a delivered webhook is recorded at once.
CREATE TABLE document_workflow_runs (
    document_id bigint NOT NULL,
    workflow text NOT NULL,
    tenant_id bigint NOT NULL,
    ran_at timestamptz NOT NULL DEFAULT now(),
    webhook_delivered_at timestamptz,
    CONSTRAINT document_workflow_runs_pkey PRIMARY KEY (document_id, workflow),
    CONSTRAINT document_workflow_runs_document_id_fkey FOREIGN KEY (document_id)
        REFERENCES documents(id) ON DELETE CASCADE,
    CONSTRAINT document_workflow_runs_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants(id)
);

-- Legal holds on a document, or on a whole tenant (document_id NULL); released holds stay.
CREATE TABLE legal_holds (
    id bigserial,
    tenant_id bigint NOT NULL,
    document_id bigint,
    reason text NOT NULL,
    set_at timestamptz NOT NULL DEFAULT now(),
    released_at timestamptz,
    CONSTRAINT legal_holds_reason_check CHECK (length(reason) BETWEEN 1 AND 500),
    CONSTRAINT legal_holds_pkey PRIMARY KEY (id),
    CONSTRAINT legal_holds_document_id_fkey FOREIGN KEY (document_id)
        REFERENCES documents(id) ON DELETE CASCADE,
    CONSTRAINT legal_holds_tenant_id_fkey FOREIGN KEY (tenant_id)
        REFERENCES tenants(id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX legal_holds_active_key ON legal_holds (tenant_id, COALESCE(document_id, (0)::bigint))
    WHERE (released_at IS NULL);

-- A document's retention period in years: the longest of the tenant's rules (JSON
-- [{kind, name, years}]) that match it by tag, document type or correspondent, else the
-- tenant's default.
CREATE FUNCTION retention_years(p_document bigint, p_rules jsonb, p_default integer) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(max((r->>'years')::int), p_default)
    FROM jsonb_array_elements(p_rules) r, documents d
    WHERE d.id = p_document
      AND ((r->>'kind' = 'tag' AND EXISTS (
               SELECT 1 FROM document_tags dt JOIN tags t ON t.id = dt.tag_id
               WHERE dt.document_id = d.id AND lower(t.name) = lower(r->>'name')))
        OR (r->>'kind' = 'document_type' AND EXISTS (
               SELECT 1 FROM document_types y
               WHERE y.id = d.document_type_id AND lower(y.name) = lower(r->>'name')))
        OR (r->>'kind' = 'correspondent' AND EXISTS (
               SELECT 1 FROM correspondents c
               WHERE c.id = d.correspondent_id AND lower(c.name) = lower(r->>'name'))))
$$;


-- =====================================================================================
-- The job queue
-- =====================================================================================

-- One row per job. document_id is required except for the tenant and notification kinds
-- (processing_jobs_document_required). `attempt` is the token of the current claim: a
-- heartbeat or an outcome applies only with it. needs_attention: the job ended because
-- its document needs an operator (not a failure).
CREATE TABLE processing_jobs (
    id bigserial,
    tenant_id bigint NOT NULL,
    document_id bigint,
    status text NOT NULL DEFAULT 'queued',
    retry_count integer NOT NULL DEFAULT 0,
    derive_title boolean NOT NULL DEFAULT false,
    error_message text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    kind text NOT NULL DEFAULT 'analyze-document',
    payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    lease_expires_at timestamptz,
    worker_id text,
    finished_at timestamptz,
    attempt uuid,
    pool text,
    needs_attention boolean NOT NULL DEFAULT false,
    CONSTRAINT processing_jobs_document_required CHECK (document_id IS NOT NULL
                                                 OR kind IN ('provision-tenant', 'delete-tenant', 'notify')),
    CONSTRAINT processing_jobs_status_check
        CHECK (status IN ('queued', 'processing', 'done', 'failed')),
    CONSTRAINT processing_jobs_pkey PRIMARY KEY (id),
    CONSTRAINT processing_jobs_document_id_fkey FOREIGN KEY (document_id)
        REFERENCES documents(id) ON DELETE CASCADE,
    CONSTRAINT processing_jobs_tenant_fk FOREIGN KEY (tenant_id) REFERENCES tenants(id)
)
WITH (fillfactor='80',
      autovacuum_vacuum_scale_factor='0.02',
      autovacuum_vacuum_threshold='1000',
      autovacuum_vacuum_insert_scale_factor='0.05',
      autovacuum_analyze_scale_factor='0.02',
      autovacuum_vacuum_cost_delay='1');
CREATE INDEX idx_processing_jobs_dispatch ON processing_jobs (tenant_id, status, next_attempt_at, created_at);
CREATE INDEX idx_processing_jobs_document ON processing_jobs (document_id);
CREATE INDEX idx_processing_jobs_finished ON processing_jobs (finished_at)
    WHERE status IN ('done', 'failed');
CREATE INDEX idx_processing_jobs_ready_kind ON processing_jobs (kind, tenant_id, next_attempt_at, id)
    WHERE (status = 'queued');
CREATE INDEX idx_processing_jobs_running ON processing_jobs (lease_expires_at, tenant_id)
    WHERE (status = 'processing');
CREATE INDEX idx_processing_jobs_status ON processing_jobs (status);

-- Per tenant: its weight in the shares and its cap on running jobs (NULL: none).
CREATE TABLE queue_tenants (
    tenant_id bigint NOT NULL,
    weight integer NOT NULL DEFAULT 1,
    max_running integer,
    CONSTRAINT queue_tenants_max_running_check CHECK (max_running IS NULL OR max_running BETWEEN 1 AND 10000),
    CONSTRAINT queue_tenants_weight_check CHECK (weight BETWEEN 1 AND 100),
    CONSTRAINT queue_tenants_pkey PRIMARY KEY (tenant_id),
    CONSTRAINT queue_tenants_tenant_id_fkey FOREIGN KEY (tenant_id)
        REFERENCES tenants(id) ON DELETE CASCADE
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0.0', autovacuum_vacuum_threshold='500');

-- Stride scheduling: every tenant's virtual pass per share (a pool, or its short lane).
CREATE TABLE queue_shares (
    share text NOT NULL,
    tenant_id bigint NOT NULL,
    pass double precision NOT NULL,
    served_at timestamptz NOT NULL,
    CONSTRAINT queue_shares_pkey PRIMARY KEY (share, tenant_id),
    CONSTRAINT queue_shares_tenant_id_fkey FOREIGN KEY (tenant_id)
        REFERENCES tenants(id) ON DELETE CASCADE
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0.0', autovacuum_vacuum_threshold='500');

-- Per share, the pass the last claim started from (an idle tenant is lifted to it).
CREATE TABLE queue_clocks (
    share text NOT NULL,
    vtime double precision NOT NULL,
    CONSTRAINT queue_clocks_pkey PRIMARY KEY (share)
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0.0', autovacuum_vacuum_threshold='500');

-- Facts about the job kinds, declared in Python (ingestd.jobkinds) and written here at
-- every migrate (query job_kinds_sync): whether a kind is short, whether its jobs move
-- their document's processing_status, and the operator event of its failure (NULL:
-- none). Kinds from plugins have no row (they track their document, default event).
CREATE TABLE job_kinds (
    kind text NOT NULL,
    short boolean NOT NULL,
    tracks_document boolean NOT NULL,
    failed_event text,
    CONSTRAINT job_kinds_pkey PRIMARY KEY (kind)
);

-- Which jobs a document's processing_status follows (job_kinds.tracks_document): its
-- processing, not the delivery of one of its webhooks nor its purge. The claim and every
-- outcome query ask this.
-- PL/pgSQL keeps its plan; a SQL function with a subquery would be planned per statement.
CREATE FUNCTION ingestd_tracks_document(p_kind text) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN coalesce((SELECT k.tracks_document FROM job_kinds k WHERE k.kind = p_kind), true);
END $$;

-- The oldest ready job of one tenant among p_kinds, marked processing; NULL fields if
-- none. At its cap only short kinds (p_short_kinds) are looked for.
CREATE FUNCTION ingestd_claim_from(
    p_tenant bigint, p_kinds text[], p_cap integer, p_worker text, p_lease interval,
    p_pool text, p_short_kinds text[]
) RETURNS processing_jobs
    LANGUAGE plpgsql
    AS $$
DECLARE
    job processing_jobs;
    kinds TEXT[] := p_kinds;
BEGIN
    -- Counted under the claim lock, after the previous claim committed: exact, on every
    -- host (idx_processing_jobs_dispatch: the tenant's running jobs, a handful).
    IF p_cap IS NOT NULL AND (
        SELECT count(*) FROM processing_jobs
        WHERE tenant_id = p_tenant AND status = 'processing'
          AND kind <> ALL(p_short_kinds)) >= p_cap THEN
        kinds := ARRAY(SELECT k FROM unnest(kinds) AS k WHERE k = ANY(p_short_kinds));
        IF cardinality(kinds) = 0 THEN
            RETURN job;
        END IF;
    END IF;
    -- One probe per kind (each an ordered index range), the oldest of them wins: a probe
    -- over all kinds at once would sort the tenant's whole backlog. The pick, its update
    -- and its document's are one statement: each statement costs the claim, which holds
    -- the turn, its own executor start and snapshot. No pick (only jobs waiting for their
    -- retry time, or locked by an admin): no row, NULL fields.
    WITH pick AS (
        SELECT r.id
        FROM unnest(kinds) AS k(kind)
        CROSS JOIN LATERAL (
            SELECT p.id, p.next_attempt_at FROM processing_jobs p
            WHERE p.kind = k.kind AND p.tenant_id = p_tenant AND p.status = 'queued'
              AND p.next_attempt_at <= clock_timestamp()
            ORDER BY p.kind, p.tenant_id, p.next_attempt_at, p.id
            LIMIT 1
            FOR NO KEY UPDATE SKIP LOCKED) AS r
        ORDER BY r.next_attempt_at, r.id
        LIMIT 1
    ), claimed AS (
        -- clock_timestamp(): now() is when the claim's transaction began, before its turn.
        UPDATE processing_jobs
        SET status = 'processing', started_at = clock_timestamp(),
            updated_at = clock_timestamp(), lease_expires_at = clock_timestamp() + p_lease,
            worker_id = p_worker, attempt = gen_random_uuid(), finished_at = NULL,
            pool = p_pool
        WHERE id = (SELECT pick.id FROM pick)
        RETURNING *
    ), doc AS (
        UPDATE documents SET processing_status = 'processing'
        WHERE id = (SELECT c.document_id FROM claimed c
                    WHERE ingestd_tracks_document(c.kind))
    )
    SELECT * INTO job FROM claimed;
    RETURN job;
END $$;

-- The claim within a scope: p_tenants (NULL: every tenant not in p_exclude), p_kinds
-- (NULL: every kind); p_pool is recorded on the job, p_share keys the serving order;
-- p_short_kinds (ingestd.jobkinds.SHORT_KINDS) are the kinds a tenant's cap neither
-- counts nor holds back. force_generic_plan: the generic plan is the right one (every
-- lookup is an index probe) and a custom plan per call doubled the claim's time.
CREATE FUNCTION ingestd_claim(
    p_worker text, p_lease interval, p_tenant_cap integer, p_pool text, p_share text,
    p_tenants text[], p_exclude text[], p_kinds text[], p_short_kinds text[]
) RETURNS SETOF processing_jobs
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    kinds TEXT[] := p_kinds;
    short_kinds TEXT[] := coalesce(p_short_kinds, '{}');
    only_ids BIGINT[];  -- p_tenants and p_exclude as ids: no join to tenants per candidate
    skip_ids BIGINT[];
    clock FLOAT8;
    have_clock BOOLEAN;
    cand RECORD;
    job processing_jobs;
BEGIN
    -- Outside the turn (below), what needs no turn: the scope's tenant ids and the kinds
    -- with queued jobs. A kind queued after this read waits for the next claim; one gone
    -- since simply has no candidates.
    IF p_tenants IS NOT NULL THEN
        only_ids := ARRAY(SELECT t.id FROM tenants t WHERE t.name = ANY(p_tenants));
    END IF;
    IF p_exclude IS NOT NULL THEN
        skip_ids := ARRAY(SELECT t.id FROM tenants t WHERE t.name = ANY(p_exclude));
    END IF;
    IF kinds IS NULL THEN
        -- Every kind with queued jobs: a loose index scan, one probe per distinct kind.
        WITH RECURSIVE k AS (
            (SELECT p.kind FROM processing_jobs p
             WHERE p.status = 'queued' ORDER BY p.kind LIMIT 1)
            UNION ALL
            SELECT (SELECT p.kind FROM processing_jobs p
                    WHERE p.status = 'queued' AND p.kind > k.kind ORDER BY p.kind LIMIT 1)
            FROM k WHERE k.kind IS NOT NULL
        )
        SELECT coalesce(array_agg(k.kind), '{}') INTO kinds FROM k WHERE k.kind IS NOT NULL;
    END IF;
    -- Claims take turns (a transaction-scoped advisory lock): each reads the serving order
    -- and the running counts as the previous claim committed them, so no tenant is served
    -- twice in a round and no cap is overrun, however many workers on however many hosts
    -- claim at once. The critical section is the rest of this function plus a commit that
    -- does not wait for the WAL flush: a claim lost in a database crash only means the
    -- job is claimed again, and jobs derive data idempotently.
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(7423001);  -- 'ingestd claim'
    SELECT c.vtime INTO clock FROM queue_clocks c WHERE c.share = p_share;
    have_clock := FOUND;
    clock := coalesce(clock, 0);
    FOR cand IN
        WITH RECURSIVE w AS (
            -- Per kind, each distinct tenant with queued jobs of it (a loose index scan).
            SELECT k.kind,
                   (SELECT p.tenant_id FROM processing_jobs p
                    WHERE p.status = 'queued' AND p.kind = k.kind
                    ORDER BY p.kind, p.tenant_id LIMIT 1) AS tenant_id
            FROM unnest(kinds) AS k(kind)
            UNION ALL
            SELECT w.kind,
                   (SELECT p.tenant_id FROM processing_jobs p
                    WHERE p.status = 'queued' AND p.kind = w.kind AND p.tenant_id > w.tenant_id
                    ORDER BY p.kind, p.tenant_id LIMIT 1)
            FROM w WHERE w.tenant_id IS NOT NULL
        ), waiting AS (
            SELECT w.tenant_id, array_agg(w.kind) AS kinds
            FROM w WHERE w.tenant_id IS NOT NULL GROUP BY w.tenant_id
        )
        SELECT wt.tenant_id, wt.kinds,
               coalesce(q.weight, 1) AS weight,
               -- least() ignores NULLs: no cap unless the tenant or the worker sets one.
               least(q.max_running, p_tenant_cap) AS cap,
               greatest(coalesce(s.pass, clock), clock) AS start,
               coalesce(s.served_at, '-infinity') AS served_at
        FROM waiting wt
        LEFT JOIN queue_tenants q ON q.tenant_id = wt.tenant_id
        LEFT JOIN queue_shares s ON s.share = p_share AND s.tenant_id = wt.tenant_id
        WHERE (only_ids IS NULL OR wt.tenant_id = ANY(only_ids))
          AND (skip_ids IS NULL OR wt.tenant_id <> ALL(skip_ids))
        ORDER BY start, served_at, wt.tenant_id
    LOOP
        job := ingestd_claim_from(cand.tenant_id, cand.kinds, cand.cap, p_worker, p_lease,
                                  p_pool, short_kinds);
        CONTINUE WHEN job.id IS NULL;  -- capped, or only jobs waiting for their retry time
        INSERT INTO queue_shares (share, tenant_id, pass, served_at)
        VALUES (p_share, cand.tenant_id, cand.start + 1.0 / cand.weight, clock_timestamp())
        ON CONFLICT (share, tenant_id)
        DO UPDATE SET pass = EXCLUDED.pass, served_at = EXCLUDED.served_at;
        -- The clock moves once a round (at weight 1), not on every claim: a write saved.
        IF cand.start > clock OR NOT have_clock THEN
            INSERT INTO queue_clocks (share, vtime) VALUES (p_share, cand.start)
            ON CONFLICT (share) DO UPDATE SET vtime = EXCLUDED.vtime;
        END IF;
        RETURN NEXT job;
        RETURN;
    END LOOP;
    RETURN;
END $$;

-- The older signatures, for callers from before pools and short kinds.
CREATE FUNCTION ingestd_claim(
    p_worker text, p_lease interval, p_tenant_cap integer, p_pool text, p_share text,
    p_tenants text[], p_exclude text[], p_kinds text[]
) RETURNS SETOF processing_jobs
    LANGUAGE sql
    AS $$
    SELECT * FROM ingestd_claim(p_worker, p_lease, p_tenant_cap, p_pool, p_share,
                                p_tenants, p_exclude, p_kinds, '{}')
$$;

CREATE FUNCTION ingestd_claim(
    p_worker text, p_lease interval, p_tenant_cap integer
) RETURNS SETOF processing_jobs
    LANGUAGE sql
    AS $$
    SELECT * FROM ingestd_claim(p_worker, p_lease, p_tenant_cap, 'default', 'default',
                                NULL, NULL, NULL, '{}')
$$;

-- Wake-up: workers LISTEN on ingestd_jobs.
CREATE FUNCTION ingestd_notify_jobs() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('ingestd_jobs', '');
    RETURN NULL;
END $$;

-- Every tenant gets its queue row.
CREATE FUNCTION ingestd_queue_tenant() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO queue_tenants (tenant_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

-- Seed 004's kinds now run inside analyze-document (ingestd.jobkinds.RETIRED_KINDS).
CREATE FUNCTION ingestd_refuse_retired_kind() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.kind IN ('generate-thumbnails', 'generate-ocr-text') THEN
        RAISE EXCEPTION 'job kind % is retired; its work runs inside analyze-document',
            NEW.kind USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER processing_jobs_kind_not_retired BEFORE INSERT ON processing_jobs
    FOR EACH ROW EXECUTE FUNCTION ingestd_refuse_retired_kind();
CREATE TRIGGER processing_jobs_notify AFTER INSERT ON processing_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION ingestd_notify_jobs();

CREATE TRIGGER tenants_queue_row AFTER INSERT ON tenants
    FOR EACH ROW EXECUTE FUNCTION ingestd_queue_tenant();


-- =====================================================================================
-- Intake and arrivals
-- =====================================================================================

-- Every file that reaches a source, whatever became of it, keyed by its trace id; kept
-- by tenant NAME (a refusal may concern a tenant that does not exist).
CREATE TABLE arrivals (
    id bigserial,
    trace_id text NOT NULL,
    tenant text NOT NULL,
    source text NOT NULL,
    origin text NOT NULL DEFAULT '',
    subdir text NOT NULL DEFAULT '',
    original_name text NOT NULL,
    size_bytes bigint,
    sha256 text,
    arrived_at timestamptz NOT NULL,
    decided_at timestamptz NOT NULL,
    outcome text NOT NULL,
    document_id bigint,
    reason text NOT NULL DEFAULT '',
    detail text NOT NULL DEFAULT '',
    location text,
    CONSTRAINT arrivals_outcome_check
        CHECK (outcome IN ('archived', 'duplicate', 'refused', 'quarantined', 'waiting')),
    CONSTRAINT arrivals_pkey PRIMARY KEY (id),
    CONSTRAINT arrivals_trace_id_key UNIQUE (trace_id)
);
CREATE INDEX arrivals_arrived ON arrivals (arrived_at);
CREATE INDEX arrivals_document ON arrivals (document_id);
CREATE INDEX arrivals_tenant_arrived ON arrivals (tenant, arrived_at);

-- Record (or update) one file's arrival. A decision replaces the row's outcome;
-- "waiting" never replaces a decision.
CREATE FUNCTION arrival_upsert(
    p_trace text, p_tenant text, p_source text, p_origin text, p_subdir text, p_name text,
    p_size bigint, p_sha256 text, p_arrived timestamp with time zone,
    p_decided timestamp with time zone, p_outcome text, p_document bigint, p_reason text,
    p_detail text, p_location text
) RETURNS bigint
    LANGUAGE sql
    AS $$
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

-- What the intake transaction writes once its file is linked (the document, its job,
-- its tags and its document.archived entry) in one call; a concurrent intake of the same
-- bytes makes this one a duplicate.
CREATE FUNCTION intake_record(
    p_tenant_id bigint, p_tenant text, p_sha256 text, p_size bigint, p_mime text,
    p_extension text, p_filename text, p_source text, p_subdir text, p_archive_path text,
    p_title text, p_issued date, p_date_policy text, p_name_date date, p_trace text,
    p_job_kind text, p_job_payload jsonb,
    p_derive_title boolean, p_tags text[], p_archived jsonb, p_duplicate jsonb
) RETURNS TABLE(document bigint, job bigint, duplicate_of bigint)
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- ON CONFLICT: an intake of the same bytes committed since intake_lock looked; this
    -- one is then a duplicate instead of failing.
    INSERT INTO documents (tenant_id, sha256, size_bytes, mime_type, extension,
                           original_filename, source, source_subdir, archive_path,
                           title, issued_date, date_policy, name_date,
                           processing_status, trace_id)
    VALUES (p_tenant_id, p_sha256, p_size, p_mime, p_extension,
            p_filename, p_source, p_subdir, p_archive_path,
            p_title, p_issued, p_date_policy, p_name_date, 'queued', p_trace)
    ON CONFLICT ON CONSTRAINT documents_tenant_sha256_key DO NOTHING
    RETURNING id INTO document;
    IF document IS NULL THEN
        -- A statement of its own: its snapshot sees the winner, which ON CONFLICT waited for.
        SELECT d.id INTO duplicate_of
        FROM documents d WHERE d.tenant_id = p_tenant_id AND d.sha256 = p_sha256;
        IF p_duplicate IS NOT NULL THEN
            PERFORM audit_append(p_tenant_id, p_tenant, 'document.duplicate', duplicate_of,
                                 p_duplicate);
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;

    INSERT INTO processing_jobs (tenant_id, document_id, kind, payload, derive_title)
    VALUES (p_tenant_id, document, p_job_kind,
            p_job_payload || jsonb_build_object('document_id', document), p_derive_title)
    RETURNING id INTO job;

    IF cardinality(p_tags) > 0 THEN
        -- Two statements, as tags_ensure and tags_link are: a tag a concurrent intake
        -- just created is invisible to the first one's snapshot, not to the second's.
        INSERT INTO tags (tenant_id, name)
        SELECT p_tenant_id, n FROM unnest(p_tags) AS n
        ON CONFLICT ON CONSTRAINT tags_tenant_name_key DO NOTHING;
        INSERT INTO document_tags (document_id, tag_id, tenant_id, origin)
        SELECT document, t.id, p_tenant_id, 'intake'
        FROM tags t WHERE t.tenant_id = p_tenant_id AND t.name = ANY(p_tags)
        ON CONFLICT DO NOTHING;
    END IF;

    PERFORM audit_append(p_tenant_id, p_tenant, 'document.archived', document,
                         p_archived || jsonb_build_object('job', job));
    RETURN NEXT;
END
$$;


-- =====================================================================================
-- Audit trail
-- =====================================================================================

-- Every archive event, each entry carrying the hash of the one before it. One chain per
-- tenant (chain = the tenant's id; 0 is the appliance's own). No foreign keys: the trail
-- outlives what it records. Append-only (triggers below).
CREATE TABLE audit_events (
    chain bigint NOT NULL,
    seq bigint NOT NULL,
    at timestamptz NOT NULL,
    kind text NOT NULL,
    tenant text,
    document_id bigint,
    body text NOT NULL,
    prev_hash text NOT NULL,
    hash text NOT NULL,
    CONSTRAINT audit_events_chain_check CHECK (chain >= 0),
    CONSTRAINT audit_events_seq_check CHECK (seq >= 1),
    CONSTRAINT audit_events_pkey PRIMARY KEY (chain, seq)
);
CREATE INDEX idx_audit_events_document ON audit_events (chain, document_id)
    WHERE (document_id IS NOT NULL);

-- The newest entry of every chain; appending locks its row.
CREATE TABLE audit_heads (
    chain bigint NOT NULL,
    seq bigint NOT NULL,
    hash text NOT NULL,
    CONSTRAINT audit_heads_chain_check CHECK (chain >= 0),
    CONSTRAINT audit_heads_pkey PRIMARY KEY (chain)
);

-- A signed statement of a chain's head; a seal of chain 0 keeps the roster of every
-- tenant chain's head (roster, NULL otherwise).
CREATE TABLE audit_seals (
    id bigserial,
    chain bigint NOT NULL,
    seq bigint NOT NULL,
    head text NOT NULL,
    body text NOT NULL,
    signature text NOT NULL,
    public_key text NOT NULL,
    tsa_reply text,
    made_at timestamptz NOT NULL DEFAULT now(),
    roster text,
    CONSTRAINT audit_seals_pkey PRIMARY KEY (id)
);
CREATE INDEX idx_audit_seals_chain ON audit_seals (chain, seq);

CREATE FUNCTION audit_append(
    p_chain bigint, p_tenant text, p_kind text, p_document bigint, p_detail jsonb
) RETURNS TABLE(seq bigint, hash text)
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION audit_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_events_append_only BEFORE DELETE OR UPDATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();

CREATE TRIGGER audit_seals_append_only BEFORE DELETE OR UPDATE ON audit_seals
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_seals_no_truncate BEFORE TRUNCATE ON audit_seals
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();


-- =====================================================================================
-- Operator events
-- =====================================================================================

-- What an operator should hear of (relayed through the outbox; relayed_at when sent).
CREATE TABLE operator_events (
    id bigserial,
    event_id uuid NOT NULL DEFAULT gen_random_uuid(),
    type text NOT NULL,
    severity text NOT NULL DEFAULT 'warning',
    tenant text,
    detail jsonb NOT NULL DEFAULT '{}'::jsonb,
    trace_id text,
    created_at timestamptz NOT NULL DEFAULT now(),
    relayed_at timestamptz,
    CONSTRAINT operator_events_severity_check CHECK (severity IN ('info', 'warning', 'error')),
    CONSTRAINT operator_events_type_check CHECK (type ~ '^[a-z_]+(\.[a-z_]+)+$'),
    CONSTRAINT operator_events_event_id_key UNIQUE (event_id),
    CONSTRAINT operator_events_pkey PRIMARY KEY (id)
);
CREATE INDEX idx_operator_events_created ON operator_events (created_at);
CREATE INDEX idx_operator_events_unrelayed ON operator_events (id) WHERE (relayed_at IS NULL);

-- Tenant lifecycle changes become operator events.
CREATE FUNCTION ingestd_tenant_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.name <> '_system' THEN
            INSERT INTO operator_events (type, severity, tenant, detail)
            VALUES ('tenant.created', 'info', NEW.name, jsonb_build_object('status', NEW.status));
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO operator_events (type, severity, tenant, detail)
        VALUES ('tenant.deleted', 'warning', OLD.name, jsonb_build_object('status', OLD.status));
    ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
        INSERT INTO operator_events (type, severity, tenant, detail)
        VALUES ('tenant.' || NEW.status,
                CASE WHEN NEW.status IN ('suspended', 'deleting') THEN 'warning' ELSE 'info' END,
                NEW.name, jsonb_build_object('from', OLD.status, 'to', NEW.status));
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tenants_lifecycle_event AFTER INSERT OR DELETE OR UPDATE OF status ON tenants
    FOR EACH ROW EXECUTE FUNCTION ingestd_tenant_event();
