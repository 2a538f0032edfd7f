-- Pipeline part 2: entities (untyped, with aliases and a profile), mentions with their
-- resolution verdicts, normalised assertions, facts (relations and observations) with
-- world-time and belief-time windows, evidence links with a stance, the decision
-- transcript, merge proposals, and cross-references between documents.

CREATE TABLE entities (
    entity_id          uuid PRIMARY KEY,
    space_id           uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    canonical_name     text NOT NULL,
    normalized_name    text NOT NULL,
    profile_summary    text,
    profile_embedding  vector,
    profile_dim        integer,
    profile_model      text,
    merged_into        uuid REFERENCES entities,  -- an applied merge is a redirect, undone by replaying its snapshot
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX entities_space ON entities (space_id) WHERE merged_into IS NULL;
CREATE INDEX entities_name_trgm ON entities USING gin (normalized_name gin_trgm_ops);
CREATE INDEX entities_profile_hnsw_384 ON entities
    USING hnsw ((profile_embedding::vector(384)) vector_cosine_ops) WHERE profile_dim = 384;

CREATE TABLE entity_aliases (
    alias_id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    space_id          uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    entity_id         uuid NOT NULL REFERENCES entities,
    alias_text        text NOT NULL,
    normalized_alias  text NOT NULL,
    phonetic          text[] NOT NULL DEFAULT '{}',
    provenance        text NOT NULL DEFAULT 'source' CHECK (provenance IN ('source', 'llm_canonical')),
    confidence        real,
    first_seen        timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen         timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (entity_id, normalized_alias)
);
CREATE INDEX entity_aliases_exact ON entity_aliases (space_id, normalized_alias);
CREATE INDEX entity_aliases_trgm ON entity_aliases USING gin (normalized_alias gin_trgm_ops);
CREATE INDEX entity_aliases_phonetic ON entity_aliases USING gin (phonetic);

-- A name in a claim, and the verdict that resolved it (step, scores, resolver version).
CREATE TABLE mentions (
    mention_id                uuid PRIMARY KEY,
    space_id                  uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    doc_id                    uuid NOT NULL REFERENCES documents,
    version_id                uuid NOT NULL REFERENCES document_versions,
    claim_id                  uuid NOT NULL REFERENCES claims,
    surface_form              text NOT NULL,
    normalized_lemma          text NOT NULL,
    resolved_entity_id        uuid REFERENCES entities,
    resolution_method         text CHECK (resolution_method IN ('T0', 'T1', 'T2', 'T3', 'T4_small', 'new',
                                                                'document')),
    resolution_confidence     real,
    resolution_is_new_entity  boolean,
    resolved_at               timestamptz,
    scores                    jsonb,
    resolver_version          text,
    created_at                timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX mentions_entity ON mentions (resolved_entity_id);
CREATE INDEX mentions_doc ON mentions (doc_id);
CREATE INDEX mentions_version ON mentions (version_id);

CREATE TABLE merge_proposals (
    proposal_id   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    space_id      uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    survivor_id   uuid NOT NULL REFERENCES entities,
    absorbed_id   uuid NOT NULL REFERENCES entities,
    score         real NOT NULL,
    status        text NOT NULL DEFAULT 'proposed' CHECK (status IN ('proposed', 'applied', 'reverted', 'rejected')),
    snapshot      jsonb,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    applied_at    timestamptz,
    reverted_at   timestamptz,
    UNIQUE (survivor_id, absorbed_id)
);

-- A fact is a relation (subject, predicate, object) or an observation (subject, statement).
-- World time: valid_from inclusive, valid_until exclusive (canonical half-open), with a
-- precision. Belief time: ingested_at, invalidated_at. They never share a field.
CREATE TABLE facts (
    fact_id              uuid PRIMARY KEY,
    space_id             uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    kind                 text NOT NULL CHECK (kind IN ('relation', 'observation')),
    subject_entity_id    uuid NOT NULL REFERENCES entities,
    predicate            text,
    object_entity_id     uuid REFERENCES entities,
    statement            text,
    label                text NOT NULL,
    valid_from           timestamptz,
    valid_until          timestamptz,
    valid_precision      text NOT NULL DEFAULT 'unknown' CHECK (valid_precision IN
        ('unknown', 'instant', 'day', 'month', 'quarter', 'year', 'open')),
    ingested_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    invalidated_at       timestamptz,
    superseded_by        uuid REFERENCES facts,
    contradiction_group  uuid,
    confidence           real,
    support_state        text NOT NULL DEFAULT 'current' CHECK (support_state IN ('current', 'withdrawn')),
    evidence_count       integer NOT NULL DEFAULT 0,
    contradict_count     integer NOT NULL DEFAULT 0,
    event_key            text,
    embedding            vector,
    embedding_dim        integer,
    embedding_model      text,
    CHECK ((kind = 'relation') = (predicate IS NOT NULL AND object_entity_id IS NOT NULL)),
    CHECK ((kind = 'observation') = (statement IS NOT NULL)),
    CHECK (valid_until IS NULL OR valid_from IS NULL OR valid_until >= valid_from)
);
CREATE INDEX facts_subject ON facts (space_id, subject_entity_id) WHERE invalidated_at IS NULL;
CREATE INDEX facts_object ON facts (space_id, object_entity_id) WHERE invalidated_at IS NULL;
CREATE INDEX facts_predicate ON facts (space_id, predicate);
-- Reads "as believed at" an earlier instant also walk relations retracted since then.
CREATE INDEX facts_subject_retracted ON facts (space_id, subject_entity_id, invalidated_at)
    WHERE kind = 'relation' AND invalidated_at IS NOT NULL;
CREATE INDEX facts_object_retracted ON facts (space_id, object_entity_id, invalidated_at)
    WHERE kind = 'relation' AND invalidated_at IS NOT NULL;
CREATE INDEX facts_group ON facts (contradiction_group) WHERE contradiction_group IS NOT NULL;
CREATE INDEX facts_hnsw_384 ON facts USING hnsw ((embedding::vector(384)) vector_cosine_ops)
    WHERE embedding_dim = 384;
CREATE INDEX facts_hnsw_768 ON facts USING hnsw ((embedding::vector(768)) vector_cosine_ops)
    WHERE embedding_dim = 768;
CREATE INDEX facts_hnsw_1536 ON facts USING hnsw ((embedding::vector(1536)) vector_cosine_ops)
    WHERE embedding_dim = 1536;

-- The bridge between what sources said and what is held: a claim supports or contradicts a fact.
CREATE TABLE fact_evidence (
    fact_id    uuid NOT NULL REFERENCES facts,
    claim_id   uuid NOT NULL REFERENCES claims,
    stance     text NOT NULL CHECK (stance IN ('supports', 'contradicts')),
    space_id   uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    doc_id     uuid NOT NULL REFERENCES documents,
    linked_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (fact_id, claim_id)
);
CREATE INDEX fact_evidence_claim ON fact_evidence (claim_id);
CREATE INDEX fact_evidence_doc ON fact_evidence (doc_id);

-- Normalised assertions of a claim, staged between normalisation and adjudication.
CREATE TABLE assertions (
    assertion_id        uuid PRIMARY KEY,
    space_id            uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    version_id          uuid NOT NULL REFERENCES document_versions,
    claim_id            uuid NOT NULL REFERENCES claims,
    ordinal             integer NOT NULL,
    kind                text NOT NULL CHECK (kind IN ('relation', 'observation')),
    subject_mention_id  uuid NOT NULL REFERENCES mentions,
    predicate           text,
    object_mention_id   uuid REFERENCES mentions,
    statement           text,
    valid_from          timestamptz,
    valid_until         timestamptz,
    valid_precision     text NOT NULL DEFAULT 'unknown',
    valid_kind          text,
    change_kind         text NOT NULL DEFAULT 'none' CHECK (change_kind IN ('none', 'succession', 'correction',
                                                                             'negation')),
    features            jsonb NOT NULL DEFAULT '{}',
    fact_id             uuid REFERENCES facts,
    adjudicated_at      timestamptz,
    UNIQUE (claim_id, ordinal)
);
CREATE INDEX assertions_version ON assertions (version_id);

-- Why each fact changed: outcome, method, confidence, the related fact, and the window
-- before and after in `features`. Append-only.
CREATE TABLE fact_decisions (
    decision_id   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    space_id      uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    fact_id       uuid NOT NULL REFERENCES facts,
    subject_kind  text NOT NULL CHECK (subject_kind IN ('relation', 'observation', 'entity', 'k_page')),
    outcome       text NOT NULL,
    method        text NOT NULL,
    confidence    real,
    related_id    uuid,
    claim_id      uuid REFERENCES claims,
    decided_by    text NOT NULL DEFAULT 'auto' CHECK (decided_by IN ('auto', 'human')),
    decided_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    features      jsonb
);
CREATE INDEX fact_decisions_fact ON fact_decisions (fact_id, decided_at);
CREATE TRIGGER fact_decisions_append_only BEFORE UPDATE OR DELETE ON fact_decisions
    FOR EACH ROW EXECUTE FUNCTION refuse_change();

-- Links between documents (citations, replies, attachments), for citation paths.
CREATE TABLE document_crossrefs (
    crossref_id  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    space_id     uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    from_doc_id  uuid NOT NULL REFERENCES documents,
    to_doc_id    uuid NOT NULL REFERENCES documents,
    kind         text NOT NULL CHECK (kind IN ('cites', 'links_to', 'attaches', 'replies_to')),
    context      text CHECK (char_length(context) <= 500),
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX document_crossrefs_from ON document_crossrefs (space_id, from_doc_id);

-- Evidence count = distinct documents whose current testimony supports a fact (per stance).
-- Recomputes the counts of the given facts and, when asked, retracts those left with no
-- current support (belief ends: invalidated_at; the world window is untouched). Returns
-- the facts it retracted. Shared by deletion (ingest) and reconciliation (pipeline).
CREATE FUNCTION refresh_fact_support(p_fact_ids uuid[], p_retract boolean)
RETURNS TABLE (fact_id uuid, kind text)
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE facts f
       SET evidence_count = s.supports, contradict_count = s.contradicts
      FROM (SELECT x.fact_id,
                   count(DISTINCT e.doc_id) FILTER (WHERE e.stance = 'supports' AND c.is_current_testimony
                                                     AND d.deleted_at IS NULL) AS supports,
                   count(DISTINCT e.doc_id) FILTER (WHERE e.stance = 'contradicts' AND c.is_current_testimony
                                                     AND d.deleted_at IS NULL) AS contradicts
              FROM facts x
              LEFT JOIN fact_evidence e ON e.fact_id = x.fact_id
              LEFT JOIN claims c ON c.claim_id = e.claim_id
              LEFT JOIN documents d ON d.doc_id = e.doc_id
             WHERE x.fact_id = ANY(p_fact_ids)
             GROUP BY x.fact_id) s
     WHERE f.fact_id = s.fact_id;
    IF p_retract THEN
        RETURN QUERY
        UPDATE facts f SET invalidated_at = clock_timestamp()
         WHERE f.fact_id = ANY(p_fact_ids) AND f.invalidated_at IS NULL AND f.evidence_count = 0
        RETURNING f.fact_id, f.kind;
    END IF;
END;
$$;

-- What normalisation made of each claim: how many assertions, or why none.
CREATE TABLE normalization_outcomes (
    claim_id    uuid NOT NULL REFERENCES claims,
    version_id  uuid NOT NULL REFERENCES document_versions,
    space_id    uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    assertions  integer NOT NULL,
    reason      text,
    decided_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (claim_id, version_id)
);
