-- Pipeline part 1: representations, sections, chunks, claims (with occurrences), the
-- extraction audit ledger, the cost ledger, embeddings stamped with their model, and
-- BM25 postings. Search indexes are derived data: they nominate, these tables confirm.

-- Why a version failed, in two forms: a code from a fixed vocabulary and its fixed
-- sentence (safe to show anyone); the raw error stays on the work unit for operators.
ALTER TABLE document_versions
    ADD COLUMN failure_reason text CHECK (failure_reason IN (
        'input_too_large', 'provider_rejected', 'provider_unavailable', 'extraction_failed',
        'chunk_set_changed', 'unknown'));

-- When the current attempt of a unit started (per-stage timings for operators and benchmarks).
ALTER TABLE work_units ADD COLUMN started_at timestamptz;

-- The uploaded file name: its suffix guides conversion.
ALTER TABLE document_versions ADD COLUMN filename text;

-- The embedding model of a space, fixed at its first embed: vectors of two models are
-- never mixed in one index.
CREATE TABLE space_embedding_models (
    space_id    uuid PRIMARY KEY REFERENCES spaces ON DELETE CASCADE,
    model       text NOT NULL,
    dimension   integer NOT NULL CHECK (dimension BETWEEN 1 AND 4096),
    fixed_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The converted Markdown of a version (stored in the object store); every span points into it.
CREATE TABLE representations (
    representation_id  uuid PRIMARY KEY,
    space_id           uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    version_id         uuid NOT NULL UNIQUE REFERENCES document_versions,
    object_key         text NOT NULL,
    markdown_sha256    text NOT NULL,
    char_count         integer NOT NULL CHECK (char_count >= 0),
    converter          text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE sections (
    section_id         uuid PRIMARY KEY,
    space_id           uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    version_id         uuid NOT NULL REFERENCES document_versions,
    representation_id  uuid NOT NULL REFERENCES representations,
    parent_section_id  uuid REFERENCES sections,
    node_path          text NOT NULL,
    heading_level      smallint,
    title              text,
    normalized_title   text NOT NULL DEFAULT '',
    role               text NOT NULL,
    ordinal            integer NOT NULL,
    block_start        integer NOT NULL,
    block_end          integer NOT NULL,
    char_start         integer NOT NULL,
    char_end           integer NOT NULL,
    UNIQUE (representation_id, node_path)
);

CREATE TABLE chunks (
    chunk_id           uuid PRIMARY KEY,
    space_id           uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    doc_id             uuid NOT NULL REFERENCES documents,
    version_id         uuid NOT NULL REFERENCES document_versions,
    representation_id  uuid NOT NULL REFERENCES representations,
    section_id         uuid REFERENCES sections,
    ordinal            integer NOT NULL,
    block_start        integer NOT NULL,
    block_end          integer NOT NULL,
    char_start         integer NOT NULL CHECK (char_start >= 0),
    char_end           integer NOT NULL CHECK (char_end > char_start),
    token_count        integer NOT NULL,
    chunk_text         text NOT NULL,
    content_hash       text NOT NULL,
    location_header    text,
    reused_from        uuid REFERENCES chunks,
    embedding          vector,
    embedding_dim      integer,
    embedding_model    text,
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (version_id, ordinal),
    CHECK ((embedding IS NULL) = (embedding_model IS NULL))
);
CREATE INDEX chunks_version ON chunks (version_id, ordinal);
CREATE INDEX chunks_doc ON chunks (doc_id);

-- Claims are immutable testimony. Offsets index the Markdown of the version a claim was
-- first extracted from; spans are half-open. A later version whose passage is unchanged
-- reuses the claim through a new occurrence instead of a copy.
CREATE TABLE claims (
    claim_id               uuid PRIMARY KEY,
    space_id               uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    doc_id                 uuid NOT NULL REFERENCES documents,
    version_id             uuid NOT NULL REFERENCES document_versions,
    representation_id      uuid NOT NULL REFERENCES representations,
    chunk_id               uuid NOT NULL REFERENCES chunks,
    ordinal                integer NOT NULL,
    claim_text             text NOT NULL,
    source_span            text NOT NULL,
    char_start             integer NOT NULL CHECK (char_start >= 0),
    char_end               integer NOT NULL CHECK (char_end > char_start),
    evidence_spans         jsonb NOT NULL DEFAULT '[]',
    added_context          jsonb NOT NULL DEFAULT '[]',
    temporal_class         text CHECK (temporal_class IN ('static', 'dynamic', 'atemporal')),
    is_attributed          boolean NOT NULL DEFAULT false,
    attributed_to          text,
    kept_flagged           boolean NOT NULL DEFAULT false,
    audit_status           text NOT NULL DEFAULT 'unaudited',
    extractor_version      text NOT NULL,
    asserted_at            timestamptz,
    claim_valid_from       timestamptz,
    claim_valid_until      timestamptz,  -- as stated: inclusive
    claim_valid_precision  text NOT NULL DEFAULT 'unknown' CHECK (claim_valid_precision IN
        ('unknown', 'instant', 'day', 'month', 'quarter', 'year', 'open')),
    claim_valid_kind       text CHECK (claim_valid_kind IN
        ('event_time', 'effective_period', 'proposition_validity', 'measurement_period')),
    ingested_at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    is_current_testimony   boolean NOT NULL DEFAULT true,
    embedding              vector,
    embedding_dim          integer,
    embedding_model        text,
    UNIQUE (chunk_id, extractor_version, ordinal)
);
CREATE INDEX claims_version ON claims (version_id);
CREATE INDEX claims_doc ON claims (doc_id);
CREATE INDEX claims_current ON claims (space_id) WHERE is_current_testimony;

CREATE TABLE claim_occurrences (
    claim_id        uuid NOT NULL REFERENCES claims,
    chunk_id        uuid NOT NULL REFERENCES chunks,
    version_id      uuid NOT NULL REFERENCES document_versions,
    space_id        uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    derivation_kind text NOT NULL CHECK (derivation_kind IN ('extracted', 'reused')),
    attached_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (claim_id, chunk_id)
);
CREATE INDEX claim_occurrences_version ON claim_occurrences (version_id);

-- What the extractor proposed for a chunk, before the grounding gate (one row per unit).
CREATE TABLE claim_drafts (
    chunk_id    uuid PRIMARY KEY REFERENCES chunks,
    space_id    uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    version_id  uuid NOT NULL REFERENCES document_versions,
    provider    text NOT NULL,
    drafts      jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The append-only audit ledger of extraction decisions.
CREATE TABLE extraction_decisions (
    decision_id  uuid PRIMARY KEY,
    space_id     uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    version_id   uuid NOT NULL REFERENCES document_versions,
    chunk_id     uuid NOT NULL REFERENCES chunks,
    kind         text NOT NULL CHECK (kind IN ('selection_drop', 'selection_keep_flagged', 'decontext_edit',
                                               'claimify_omitted', 'grounding_rejected')),
    reason       text NOT NULL,
    char_start   integer NOT NULL,
    char_end     integer NOT NULL,
    detail       text,
    provider     text NOT NULL,
    decided_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX extraction_decisions_version ON extraction_decisions (version_id);
CREATE FUNCTION refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END;
$$;
CREATE TRIGGER extraction_decisions_append_only BEFORE UPDATE OR DELETE ON extraction_decisions
    FOR EACH ROW EXECUTE FUNCTION refuse_change();

-- The cost ledger: one row per provider call (never the text).
CREATE TABLE provider_calls (
    call_id      uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    space_id     uuid REFERENCES spaces ON DELETE CASCADE,
    work_id      uuid REFERENCES work_units ON DELETE SET NULL,
    stage        text,
    attempt      integer,
    provider     text NOT NULL,
    model        text,
    tokens_in    integer,
    tokens_out   integer,
    latency_ms   double precision,
    outcome      text NOT NULL,
    occurred_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX provider_calls_time ON provider_calls (occurred_at, call_id);

-- BM25: per-target term frequencies and lengths. Corpus statistics (N, average length,
-- document frequency) are computed at query time from these rows, so they are exact and
-- never drift.
CREATE TABLE bm25_docs (
    space_id     uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    target_kind  text NOT NULL CHECK (target_kind IN ('chunk', 'claim', 'fact', 'entity')),
    target_id    uuid NOT NULL,
    doc_id       uuid,
    length       integer NOT NULL CHECK (length >= 0),
    PRIMARY KEY (target_kind, target_id)
);
CREATE INDEX bm25_docs_space ON bm25_docs (space_id, target_kind);
CREATE TABLE bm25_postings (
    space_id     uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    target_kind  text NOT NULL,
    term         text NOT NULL,
    target_id    uuid NOT NULL,
    tf           integer NOT NULL CHECK (tf > 0),
    PRIMARY KEY (space_id, target_kind, term, target_id)
);
CREATE INDEX bm25_postings_target ON bm25_postings (target_kind, target_id);

-- Vector indexes (HNSW, cosine) for the common dimensions; a space's vectors all share
-- one dimension, and queries filter on it so the matching partial index serves them.
CREATE INDEX chunks_hnsw_384 ON chunks USING hnsw ((embedding::vector(384)) vector_cosine_ops)
    WHERE embedding_dim = 384;
CREATE INDEX chunks_hnsw_768 ON chunks USING hnsw ((embedding::vector(768)) vector_cosine_ops)
    WHERE embedding_dim = 768;
CREATE INDEX chunks_hnsw_1536 ON chunks USING hnsw ((embedding::vector(1536)) vector_cosine_ops)
    WHERE embedding_dim = 1536;
CREATE INDEX claims_hnsw_384 ON claims USING hnsw ((embedding::vector(384)) vector_cosine_ops)
    WHERE embedding_dim = 384;
CREATE INDEX claims_hnsw_768 ON claims USING hnsw ((embedding::vector(768)) vector_cosine_ops)
    WHERE embedding_dim = 768;
CREATE INDEX claims_hnsw_1536 ON claims USING hnsw ((embedding::vector(1536)) vector_cosine_ops)
    WHERE embedding_dim = 1536;

-- Why a claim started or stopped being current testimony (re-extraction, a living
-- version that dropped the passage, deletion). Append-only.
CREATE TABLE testimony_currency_events (
    event_id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    space_id           uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    claim_id           uuid NOT NULL REFERENCES claims,
    doc_id             uuid NOT NULL REFERENCES documents,
    reconciliation_id  uuid NOT NULL,
    became_current     boolean NOT NULL,
    reason             text NOT NULL CHECK (reason IN ('reextracted', 'version_superseded', 'version_deleted',
                                                       'review_restored')),
    from_version_id    uuid REFERENCES document_versions,
    occurred_at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX testimony_currency_events_claim ON testimony_currency_events (claim_id);
CREATE TRIGGER testimony_currency_events_append_only BEFORE UPDATE OR DELETE ON testimony_currency_events
    FOR EACH ROW EXECUTE FUNCTION refuse_change();
