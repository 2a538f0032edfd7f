-- The query space `memory_v1`: read-only SQL views over the authority tables, a restricted
-- role that can read nothing else, and the saved-query registry.
--
-- Every view is filtered INSIDE PostgreSQL by the caller's space and principals, read from
-- two transaction-local settings the queryspace service sets before it runs a statement
-- (`testament.qs_space`, `testament.qs_principals`: '*' = every document of the space,
-- otherwise a text[] literal). Unset settings match nothing. The rule is the one of the
-- assured operations: a document is visible when it is not deleted and its ACL is empty or
-- shares a principal with the caller. Hidden material is absent; references to hidden
-- objects are NULL. The views run with their owner's rights, so the role needs SELECT on
-- the views only and can never name a base table.

CREATE SCHEMA memory_v1;
CREATE SCHEMA memory_v1_internal;
REVOKE ALL ON SCHEMA memory_v1_internal FROM PUBLIC;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'testament_query_space') THEN
        CREATE ROLE testament_query_space NOLOGIN NOSUPERUSER NOINHERIT NOCREATEDB NOCREATEROLE NOBYPASSRLS;
    END IF;
    -- The service's own login role must be able to SET ROLE to it (a superuser always can).
    BEGIN
        EXECUTE format('GRANT testament_query_space TO %I', current_user);
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
END
$$;
GRANT USAGE ON SCHEMA memory_v1 TO testament_query_space;

-- ---------------------------------------------------------------------------------------
-- caller context and helpers (not reachable by the role: no USAGE on the schema)
-- ---------------------------------------------------------------------------------------

-- IMMUTABLE on purpose: the planner folds the caller's space and principals into each plan,
-- so it estimates the caller's rows (as STABLE calls it assumed 0.5 % of any table and chose
-- full scans in nested loops: 370 ms instead of 1 ms for examples.explain at 40k claims).
-- That is sound only because the values are fixed for a transaction and every statement is
-- planned afresh inside it (the sandbox sets plan_cache_mode = force_custom_plan locally).
CREATE FUNCTION memory_v1_internal.ctx_space() RETURNS uuid LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT nullif(current_setting('testament.qs_space', true), '')::uuid
$$;
-- NULL = every document of the space; otherwise the caller's principals.
CREATE FUNCTION memory_v1_internal.ctx_principals() RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE coalesce(current_setting('testament.qs_principals', true), '')
               WHEN '*' THEN NULL WHEN '' THEN '{}'::text[]
               ELSE current_setting('testament.qs_principals', true)::text[] END
$$;

-- Canonical half-open bounds of a window stated with inclusive ends (claims), in UTC.
CREATE FUNCTION memory_v1_internal.canon_start(p_from timestamptz, p_until timestamptz, p_precision text)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE p_precision
        WHEN 'unknown' THEN NULL
        WHEN 'instant' THEN p_from
        WHEN 'open' THEN p_from
        WHEN 'day' THEN date_trunc('day', p_from, 'UTC')
        WHEN 'month' THEN date_trunc('month', p_from, 'UTC')
        WHEN 'quarter' THEN date_trunc('quarter', p_from, 'UTC')
        WHEN 'year' THEN date_trunc('year', p_from, 'UTC')
    END
$$;
CREATE FUNCTION memory_v1_internal.canon_end(p_from timestamptz, p_until timestamptz, p_precision text)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE p_precision
        WHEN 'unknown' THEN NULL
        WHEN 'open' THEN NULL
        WHEN 'instant' THEN coalesce(p_until, p_from) + interval '1 microsecond'
        WHEN 'day' THEN date_trunc('day', coalesce(p_until, p_from), 'UTC') + interval '1 day'
        WHEN 'month' THEN date_trunc('month', coalesce(p_until, p_from), 'UTC') + interval '1 month'
        WHEN 'quarter' THEN date_trunc('quarter', coalesce(p_until, p_from), 'UTC') + interval '3 months'
        WHEN 'year' THEN date_trunc('year', coalesce(p_until, p_from), 'UTC') + interval '1 year'
    END
$$;

CREATE VIEW memory_v1_internal.visible_docs AS
SELECT d.*, coalesce(d.source_ref, d.title, d.doc_id::text) AS source_handle
  FROM documents d
 WHERE d.space_id = memory_v1_internal.ctx_space() AND d.deleted_at IS NULL
   AND (memory_v1_internal.ctx_principals() IS NULL OR d.acl = '{}'
        OR d.acl && memory_v1_internal.ctx_principals());

-- The serving version of each visible document: the newest non-deleted ready version.
CREATE VIEW memory_v1_internal.content_versions AS
SELECT v.*
  FROM memory_v1_internal.visible_docs d
  JOIN LATERAL (SELECT * FROM document_versions v
                 WHERE v.doc_id = d.doc_id AND v.deleted_at IS NULL AND v.status = 'ready'
                 ORDER BY v.version_no DESC LIMIT 1) v ON true;

CREATE VIEW memory_v1_internal.visible_claims AS
SELECT c.*, d.source_kind, d.source_handle
  FROM claims c JOIN memory_v1_internal.visible_docs d ON d.doc_id = c.doc_id;

-- Current testimony of visible documents behind each fact (lineage = the claim's document).
CREATE VIEW memory_v1_internal.live_evidence AS
SELECT e.fact_id, e.claim_id, e.stance, e.linked_at, c.doc_id, c.source_kind, c.source_handle, c.asserted_at,
       c.claim_valid_from, c.claim_valid_until, c.claim_valid_precision, c.claim_valid_kind
  FROM fact_evidence e
  JOIN memory_v1_internal.visible_claims c ON c.claim_id = e.claim_id AND c.doc_id = e.doc_id
 WHERE c.is_current_testimony;

-- Facts the caller can trace to any visible document (the rule of hydrate/transcript).
-- Evidence count = distinct live lineages per (fact, stance), for this caller; scalar
-- subqueries, so a statement that never reads a count never computes it.
CREATE VIEW memory_v1_internal.visible_facts AS
SELECT f.*,
       (SELECT count(DISTINCT e.doc_id) FROM memory_v1_internal.live_evidence e
         WHERE e.fact_id = f.fact_id AND e.stance = 'supports')::bigint AS live_evidence_count,
       (SELECT count(DISTINCT e.doc_id) FROM memory_v1_internal.live_evidence e
         WHERE e.fact_id = f.fact_id AND e.stance = 'contradicts')::bigint AS live_contradict_count
  FROM facts f
 WHERE f.space_id = memory_v1_internal.ctx_space()
   AND EXISTS (SELECT 1 FROM fact_evidence e JOIN memory_v1_internal.visible_claims c ON c.claim_id = e.claim_id
                WHERE e.fact_id = f.fact_id);

-- Mentions in current testimony of visible documents, with the surviving entity of a merge.
-- Three branches (resolved to a survivor, resolved to an absorbed entity, unresolved) so a
-- filter on survivor_id reaches an index in each.
CREATE INDEX entities_merged_into ON entities (merged_into) WHERE merged_into IS NOT NULL;
CREATE VIEW memory_v1_internal.live_mentions AS
SELECT m.*, c.chunk_id, c.representation_id, m.resolved_entity_id AS survivor_id
  FROM mentions m
  JOIN memory_v1_internal.visible_claims c ON c.claim_id = m.claim_id AND c.is_current_testimony
  JOIN entities r ON r.entity_id = m.resolved_entity_id AND r.merged_into IS NULL
UNION ALL
SELECT m.*, c.chunk_id, c.representation_id, r.merged_into
  FROM mentions m
  JOIN memory_v1_internal.visible_claims c ON c.claim_id = m.claim_id AND c.is_current_testimony
  JOIN entities r ON r.entity_id = m.resolved_entity_id AND r.merged_into IS NOT NULL
UNION ALL
SELECT m.*, c.chunk_id, c.representation_id, NULL::uuid
  FROM mentions m
  JOIN memory_v1_internal.visible_claims c ON c.claim_id = m.claim_id AND c.is_current_testimony
 WHERE m.resolved_entity_id IS NULL;

-- ---------------------------------------------------------------------------------------
-- the 25 views
-- ---------------------------------------------------------------------------------------

CREATE VIEW memory_v1.documents_live AS
SELECT d.space_id AS deployment_id, d.doc_id, d.source_kind, d.source_ref, NULL::text AS source_uri, d.title,
       d.versioning_mode, 'external'::text AS origin, d.first_seen_at,
       (SELECT max(x.ingested_at) FROM document_versions x WHERE x.doc_id = d.doc_id) AS last_observed_at,
       cv.version_id AS current_version_id, cv.version_no AS current_version_no, cv.status AS current_version_status,
       rp.representation_id AS current_representation_id,
       coalesce(cv.status = 'ready' AND rp.representation_id IS NOT NULL, false) AS has_current_ready_content,
       cv.source_modified_at, NULL::timestamptz AS published_at, NULL::text AS language
  FROM memory_v1_internal.visible_docs d
  LEFT JOIN LATERAL (SELECT * FROM document_versions v WHERE v.doc_id = d.doc_id AND v.deleted_at IS NULL
                      ORDER BY v.version_no DESC LIMIT 1) cv ON true
  LEFT JOIN representations rp ON rp.version_id = cv.version_id;

CREATE VIEW memory_v1.document_versions_visible AS
SELECT v.space_id AS deployment_id, v.version_id, v.doc_id, v.version_no, v.content_hash, v.source_version_ref,
       CASE WHEN v.deleted_at IS NOT NULL THEN 'deleted' ELSE v.status END AS status,
       rp.representation_id AS current_representation_id, v.ingested_at, v.source_modified_at,
       NULL::timestamptz AS published_at, NULL::text AS language,
       (SELECT min(n.ingested_at) FROM document_versions n
         WHERE n.doc_id = v.doc_id AND n.version_no > v.version_no AND n.deleted_at IS NULL) AS superseded_at,
       (v.deleted_at IS NULL AND NOT EXISTS (SELECT 1 FROM document_versions n WHERE n.doc_id = v.doc_id
                                              AND n.version_no > v.version_no AND n.deleted_at IS NULL))
           AS is_current_version
  FROM document_versions v
  JOIN memory_v1_internal.visible_docs d ON d.doc_id = v.doc_id
  LEFT JOIN representations rp ON rp.version_id = v.version_id;

CREATE VIEW memory_v1.document_crossrefs_live AS
SELECT x.space_id AS deployment_id, x.crossref_id, x.from_doc_id, x.to_doc_id, x.kind, x.context, x.created_at
  FROM document_crossrefs x
  JOIN memory_v1_internal.visible_docs a ON a.doc_id = x.from_doc_id
  JOIN memory_v1_internal.visible_docs b ON b.doc_id = x.to_doc_id;

CREATE VIEW memory_v1.sections_live AS
SELECT s.space_id AS deployment_id, s.section_id, v.doc_id, s.version_id, s.representation_id,
       s.representation_id AS structure_generation_id,
       s.parent_section_id, s.node_path, s.heading_level, s.title, s.normalized_title, s.role, s.ordinal,
       s.block_start, s.block_end, s.char_start, s.char_end, NULL::integer AS page_start, NULL::integer AS page_end,
       NULL::text AS summary
  FROM sections s JOIN memory_v1_internal.content_versions v ON v.version_id = s.version_id;

CREATE VIEW memory_v1.chunks_live AS
SELECT c.space_id AS deployment_id, c.chunk_id, c.doc_id, c.version_id, c.representation_id, c.section_id,
       c.ordinal, c.block_start, c.block_end, c.char_start, c.char_end, c.token_count,
       c.content_hash AS chunk_content_hash, c.content_hash AS extraction_input_hash,
       CASE WHEN c.embedding_model IS NOT NULL THEN c.content_hash END AS embedding_text_hash,
       NULL::jsonb AS location_facts, c.location_header,
       CASE WHEN c.embedding_model IS NOT NULL THEN 'v1' END AS embedding_input_policy_version,
       CASE WHEN c.embedding_model IS NOT NULL THEN 'v1' END AS policy_generation,
       c.embedding_model AS embedder_generation, NULL::text AS chunker_version, NULL::text AS prefixer_version,
       c.created_at
  FROM chunks c JOIN memory_v1_internal.content_versions v ON v.version_id = c.version_id;

CREATE VIEW memory_v1.claims_visible_history AS
SELECT c.space_id AS deployment_id, c.claim_id, c.doc_id, c.version_id, c.representation_id, c.chunk_id,
       c.claim_text, c.source_span, c.char_start, c.char_end, c.added_context, c.temporal_class, c.is_attributed,
       c.audit_status, c.kept_flagged, c.extractor_version, c.asserted_at, c.claim_valid_from, c.claim_valid_until,
       c.claim_valid_precision, c.claim_valid_kind, c.ingested_at, c.source_kind, c.source_handle,
       c.is_current_testimony
  FROM memory_v1_internal.visible_claims c;

CREATE VIEW memory_v1.claims_live AS
SELECT deployment_id, claim_id, doc_id, version_id, representation_id, chunk_id, claim_text, source_span,
       char_start, char_end, added_context, temporal_class, is_attributed, audit_status, kept_flagged,
       extractor_version, asserted_at, claim_valid_from, claim_valid_until, claim_valid_precision, claim_valid_kind,
       ingested_at, source_kind, source_handle
  FROM memory_v1.claims_visible_history WHERE is_current_testimony;

CREATE VIEW memory_v1.claims_canonical AS
SELECT h.*,
       memory_v1_internal.canon_start(h.claim_valid_from, h.claim_valid_until, h.claim_valid_precision)
           AS canon_start,
       memory_v1_internal.canon_end(h.claim_valid_from, h.claim_valid_until, h.claim_valid_precision) AS canon_end
  FROM memory_v1.claims_visible_history h;

CREATE VIEW memory_v1.claim_occurrences_live AS
SELECT o.space_id AS deployment_id, o.claim_id, o.chunk_id, o.derivation_kind, ch.doc_id, ch.version_id,
       ch.representation_id, ch.section_id, NULL::text AS evidence_mode, NULL::jsonb AS source_locators,
       o.attached_at, c.evidence_spans
  FROM claim_occurrences o
  JOIN memory_v1_internal.visible_claims c ON c.claim_id = o.claim_id AND c.is_current_testimony
  JOIN chunks ch ON ch.chunk_id = o.chunk_id
  JOIN memory_v1_internal.content_versions v ON v.version_id = ch.version_id;

CREATE VIEW memory_v1.entities_current AS
SELECT x.space_id AS deployment_id, x.entity_id, NULL::text AS entity_type, x.canonical_name, x.normalized_name,
       NULL::real AS type_confidence, x.profile_summary, n.live_mention_count, n.live_document_count,
       0::bigint AS graph_degree, x.created_at, x.updated_at
  FROM entities x
  CROSS JOIN LATERAL (SELECT count(*)::bigint AS live_mention_count,
                             count(DISTINCT m.doc_id)::bigint AS live_document_count
                        FROM memory_v1_internal.live_mentions m WHERE m.survivor_id = x.entity_id) n
 WHERE x.merged_into IS NULL AND x.space_id = memory_v1_internal.ctx_space() AND n.live_mention_count > 0;

CREATE VIEW memory_v1.mentions_live AS
SELECT m.space_id AS deployment_id, m.mention_id, m.doc_id, m.version_id, m.representation_id, m.chunk_id,
       s.section_id, m.claim_id, m.surface_form, m.normalized_lemma, NULL::text AS canonical_name_form,
       NULL::text AS emitted_type, NULL::real AS type_confidence, NULL::text AS language,
       NULL::integer AS char_start, NULL::integer AS char_end, m.created_at,
       e.entity_id AS resolved_entity_id,
       CASE WHEN e.entity_id IS NOT NULL THEN
           CASE m.resolution_method WHEN 'T0' THEN 'T0' WHEN 'T4_small' THEN 'T4_small'
                WHEN 'T1' THEN 'T3' WHEN 'T2' THEN 'T3' WHEN 'T3' THEN 'T3' ELSE 'T0' END END AS resolution_method,
       CASE WHEN e.entity_id IS NOT NULL THEN m.resolution_confidence END AS resolution_confidence,
       CASE WHEN e.entity_id IS NOT NULL THEN coalesce(m.resolution_is_new_entity, false) END
           AS resolution_is_new_entity,
       CASE WHEN e.entity_id IS NOT NULL THEN coalesce(m.resolved_at, m.created_at) END AS resolved_at
  FROM memory_v1_internal.live_mentions m
  -- the mention is live, so a surviving entity it resolves to is current
  LEFT JOIN entities e ON e.entity_id = m.survivor_id AND e.merged_into IS NULL
  LEFT JOIN chunks ch ON ch.chunk_id = m.chunk_id
  LEFT JOIN memory_v1.sections_live s ON s.section_id = ch.section_id;

CREATE VIEW memory_v1.entity_aliases_current AS
SELECT a.space_id AS deployment_id, a.alias_id, a.entity_id AS source_entity_id, e.entity_id, a.alias_text,
       a.normalized_alias AS normalized_lemma, a.provenance, a.confidence, a.first_seen, a.last_seen
  FROM entity_aliases a
  JOIN entities src ON src.entity_id = a.entity_id
  JOIN memory_v1.entities_current e ON e.entity_id = coalesce(src.merged_into, src.entity_id);

CREATE VIEW memory_v1.entity_document_mentions AS
SELECT deployment_id, resolved_entity_id AS entity_id, doc_id, count(*)::bigint AS mention_count,
       min(created_at) AS first_mentioned_at, max(created_at) AS last_mentioned_at
  FROM memory_v1.mentions_live WHERE resolved_entity_id IS NOT NULL
 GROUP BY deployment_id, resolved_entity_id, doc_id;

CREATE VIEW memory_v1.facts_visible_history AS
SELECT f.space_id AS deployment_id, f.kind AS fact_kind, f.fact_id, f.subject_entity_id, f.predicate,
       f.object_entity_id, f.statement, f.label AS fact_label, f.valid_from, f.valid_until, f.ingested_at,
       f.invalidated_at, f.contradiction_group, f.confidence, f.live_evidence_count AS evidence_count_current,
       f.live_contradict_count AS contradict_count_current, f.support_state AS support_state_current,
       f.valid_precision
  FROM memory_v1_internal.visible_facts f;

-- Current = still believed, supported by visible testimony, and holding now in world time
-- (unknown bounds open; a superseded fact with no known end has ended): the assured rule.
CREATE VIEW memory_v1.facts_current AS
SELECT f.space_id AS deployment_id, f.kind AS fact_kind, f.fact_id, f.subject_entity_id, f.predicate,
       f.object_entity_id, f.statement, f.label AS fact_label, f.valid_from, f.valid_until, f.ingested_at,
       f.contradiction_group, f.confidence, f.live_evidence_count AS evidence_count,
       f.live_contradict_count AS contradict_count, f.support_state, now() AS evaluated_at, f.valid_precision
  FROM memory_v1_internal.visible_facts f
 WHERE f.invalidated_at IS NULL
   AND (f.valid_from IS NULL OR f.valid_from <= now())
   AND (f.valid_until IS NULL OR f.valid_until > now())
   AND NOT (f.superseded_by IS NOT NULL AND f.valid_until IS NULL)
   AND EXISTS (SELECT 1 FROM fact_evidence e JOIN memory_v1_internal.visible_claims c ON c.claim_id = e.claim_id
                WHERE e.fact_id = f.fact_id AND e.stance = 'supports'
                  AND (c.is_current_testimony OR f.support_state = 'withdrawn'));

CREATE VIEW memory_v1.contradiction_members_current AS
SELECT deployment_id, contradiction_group, fact_kind, fact_id, fact_label, valid_from, valid_until, ingested_at,
       evidence_count, contradict_count, support_state, evaluated_at
  FROM memory_v1.facts_current WHERE contradiction_group IS NOT NULL;

CREATE VIEW memory_v1.graph_edges_current AS
SELECT f.deployment_id, f.fact_id AS relation_id, f.subject_entity_id, f.object_entity_id, f.predicate, f.fact_label,
       f.valid_from, f.valid_until, f.ingested_at, f.contradiction_group, f.confidence, f.evidence_count,
       f.contradict_count, f.support_state, f.evaluated_at
  FROM memory_v1.facts_current f
 WHERE f.fact_kind = 'relation'
   AND EXISTS (SELECT 1 FROM memory_v1.entities_current s WHERE s.entity_id = f.subject_entity_id)
   AND EXISTS (SELECT 1 FROM memory_v1.entities_current o WHERE o.entity_id = f.object_entity_id);

CREATE VIEW memory_v1.graph_edges_visible_history AS
SELECT f.deployment_id, f.fact_id AS relation_id, f.subject_entity_id, f.object_entity_id, f.predicate,
       f.fact_label, f.valid_from, f.valid_until, f.ingested_at, f.invalidated_at, f.contradiction_group,
       f.confidence, f.evidence_count_current, f.contradict_count_current, f.support_state_current
  FROM memory_v1.facts_visible_history f
 WHERE f.fact_kind = 'relation'
   AND EXISTS (SELECT 1 FROM memory_v1.entities_current s WHERE s.entity_id = f.subject_entity_id)
   AND EXISTS (SELECT 1 FROM memory_v1.entities_current o WHERE o.entity_id = f.object_entity_id);

CREATE VIEW memory_v1.fact_claim_evidence_live AS
SELECT f.space_id AS deployment_id, f.kind AS fact_kind, e.fact_id, e.claim_id, e.stance, e.doc_id, e.source_kind,
       e.source_handle, e.asserted_at, e.claim_valid_from, e.claim_valid_until, e.claim_valid_precision,
       e.claim_valid_kind, e.linked_at
  FROM memory_v1_internal.live_evidence e
  JOIN memory_v1_internal.visible_facts f ON f.fact_id = e.fact_id;

CREATE VIEW memory_v1.evidence_lineage AS
SELECT deployment_id, fact_kind, fact_id, doc_id, stance, min(source_kind) AS source_kind,
       min(source_handle) AS source_handle, count(*)::bigint AS claim_count,
       (array_agg(claim_id ORDER BY asserted_at DESC NULLS LAST, claim_id))[1] AS representative_claim_id,
       min(asserted_at) AS asserted_from, max(asserted_at) AS asserted_to
  FROM memory_v1.fact_claim_evidence_live
 GROUP BY deployment_id, fact_kind, fact_id, doc_id, stance;

CREATE VIEW memory_v1.pages_live AS
SELECT NULL::uuid AS deployment_id, NULL::uuid AS artifact_id, NULL::text AS layer, NULL::text AS page_kind,
       NULL::text AS git_path, NULL::text AS kind, NULL::uuid AS parent_artifact_id, NULL::text AS page_summary,
       NULL::text AS status, NULL::timestamptz AS last_compiled_at, NULL::boolean AS is_stale,
       NULL::bigint AS open_review_flags, NULL::boolean AS redaction_required
 WHERE false;

CREATE VIEW memory_v1.page_evidence_visible AS
SELECT NULL::uuid AS deployment_id, NULL::uuid AS artifact_id, NULL::text AS role, NULL::text AS target_kind,
       NULL::uuid AS target_id, NULL::text[] AS claim_chunk_content_hashes, NULL::bigint AS link_count
 WHERE false;

CREATE VIEW memory_v1.changes_visible AS
SELECT f.deployment_id, f.fact_kind || '_ingest' AS object_kind, md5('ingest:' || f.fact_id::text)::uuid AS event_id,
       f.fact_id AS object_id, f.ingested_at AS occurred_at, f.fact_label AS label
  FROM memory_v1.facts_visible_history f
UNION ALL
SELECT f.deployment_id, f.fact_kind || CASE WHEN x.superseded_by IS NULL THEN '_invalidation' ELSE '_supersession' END,
       md5('invalidation:' || f.fact_id::text)::uuid, f.fact_id, f.invalidated_at, f.fact_label
  FROM memory_v1.facts_visible_history f JOIN facts x ON x.fact_id = f.fact_id
 WHERE f.invalidated_at IS NOT NULL
UNION ALL
SELECT c.deployment_id, 'claim_ingest', md5('claim:' || c.claim_id::text)::uuid, c.claim_id, c.ingested_at,
       c.claim_text
  FROM memory_v1.claims_visible_history c;

CREATE VIEW memory_v1.identity_events_visible AS
SELECT m.deployment_id, 'resolution_decision'::text AS object_kind, m.mention_id AS event_id,
       m.resolved_entity_id AS entity_id, NULL::uuid AS related_entity_id, m.mention_id,
       CASE WHEN m.resolution_is_new_entity THEN 'new_entity' ELSE 'linked' END AS outcome,
       m.resolution_method AS method, m.resolution_confidence AS confidence, 'auto'::text AS decided_by,
       m.resolved_at AS decided_at, false AS is_superseded
  FROM memory_v1.mentions_live m WHERE m.resolved_entity_id IS NOT NULL
UNION ALL
SELECT p.space_id, 'merge_event', p.proposal_id, p.survivor_id, p.absorbed_id, NULL::uuid, 'merge', 'merge_event',
       p.score, 'auto', p.applied_at, p.status = 'reverted'
  FROM merge_proposals p JOIN memory_v1.entities_current e ON e.entity_id = p.survivor_id
 WHERE p.status IN ('applied', 'reverted') AND p.applied_at IS NOT NULL
UNION ALL
SELECT p.space_id, 'merge_event', md5('unmerge:' || p.proposal_id::text)::uuid, p.survivor_id, p.absorbed_id,
       NULL::uuid, 'unmerge', 'merge_event', p.score, 'auto', p.reverted_at, false
  FROM merge_proposals p JOIN memory_v1.entities_current e ON e.entity_id = p.survivor_id
 WHERE p.status = 'reverted' AND p.reverted_at IS NOT NULL;

CREATE VIEW memory_v1.testimony_currency_events_visible AS
SELECT t.space_id AS deployment_id, t.event_id, t.claim_id, t.doc_id, t.reconciliation_id, t.became_current,
       t.reason, NULL::text AS from_extractor_version, fv.version_id AS from_version_id, t.occurred_at
  FROM testimony_currency_events t
  JOIN memory_v1.claims_visible_history c ON c.claim_id = t.claim_id
  LEFT JOIN memory_v1.document_versions_visible fv ON fv.version_id = t.from_version_id;

-- ---------------------------------------------------------------------------------------
-- plain-SQL public functions (the others are evaluated by the service, see queryspace)
-- ---------------------------------------------------------------------------------------

CREATE FUNCTION memory_v1.canonical_bounds(valid_from timestamptz, valid_until timestamptz, valid_precision text)
RETURNS TABLE (canon_start timestamptz, canon_end timestamptz)
-- Definer rights only to reach the internal helpers (the role has no USAGE on that schema);
-- the function is pure and reads nothing.
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT memory_v1_internal.canon_start(valid_from, valid_until, valid_precision),
           memory_v1_internal.canon_end(valid_from, valid_until, valid_precision)
$$;

-- Facts as held in world time at valid_at, as believed at believed_at (belief time: ingested
-- at or before, not invalidated by then), visible to the caller now.
CREATE FUNCTION memory_v1.facts_as_of(valid_at timestamptz, believed_at timestamptz, max_rows integer DEFAULT 200)
RETURNS TABLE (deployment_id uuid, fact_kind text, fact_id uuid, subject_entity_id uuid, predicate text,
               object_entity_id uuid, statement text, fact_label text, valid_from timestamptz,
               valid_until timestamptz, ingested_at timestamptz, invalidated_at timestamptz,
               contradiction_group uuid, confidence real, evidence_count_current bigint,
               contradict_count_current bigint, support_state_current text, applied_valid_at timestamptz,
               applied_believed_at timestamptz, identity_regime text, valid_precision text, temporal_match text)
LANGUAGE sql STABLE AS $$
    SELECT h.deployment_id, h.fact_kind, h.fact_id, h.subject_entity_id, h.predicate, h.object_entity_id,
           h.statement, h.fact_label, h.valid_from, h.valid_until, h.ingested_at, h.invalidated_at,
           h.contradiction_group, h.confidence, h.evidence_count_current, h.contradict_count_current,
           h.support_state_current, facts_as_of.valid_at, facts_as_of.believed_at, 'current'::text, h.valid_precision,
           CASE WHEN h.valid_from IS NOT NULL AND (h.valid_until IS NOT NULL OR h.valid_precision = 'open')
                THEN 'confirmed' ELSE 'possible' END
      FROM memory_v1.facts_visible_history h
     WHERE h.ingested_at <= facts_as_of.believed_at
       AND (h.invalidated_at IS NULL OR h.invalidated_at > facts_as_of.believed_at)
       AND (h.valid_from IS NULL OR h.valid_from <= facts_as_of.valid_at)
       AND (h.valid_until IS NULL OR h.valid_until > facts_as_of.valid_at)
     ORDER BY h.ingested_at, h.fact_id
     LIMIT least(greatest(coalesce(facts_as_of.max_rows, 200), 1), 1000)
$$;

GRANT SELECT ON ALL TABLES IN SCHEMA memory_v1 TO testament_query_space;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA memory_v1 TO testament_query_space;

-- ---------------------------------------------------------------------------------------
-- saved queries
-- ---------------------------------------------------------------------------------------

-- One row per version. A version's SQL never changes; statuses move by review acts.
-- Shipped examples belong to the `examples` namespace of every space.
CREATE TABLE saved_queries (
    query_id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    space_id            uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    namespace           text NOT NULL CHECK (namespace ~ '^[a-z][a-z0-9_]*$'),
    name                text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_]*$'),
    version             integer NOT NULL CHECK (version >= 1),
    status              text NOT NULL CHECK (status IN ('draft', 'pending_revalidation', 'active', 'deprecated',
                                                        'disabled', 'broken')),
    description         text,
    origin              text NOT NULL CHECK (origin IN ('human', 'agent', 'import', 'shipped_example')),
    assurance           text CHECK (assurance IN ('customer_authored', 'customer_reviewed', 'shipped_example')),
    sql                 text NOT NULL,
    query_hash          text NOT NULL,
    validated_surface_manifest_hash text NOT NULL DEFAULT '',
    parameter_schema    jsonb NOT NULL DEFAULT '{}',
    declared_result_schema jsonb NOT NULL DEFAULT '{}',
    declared_interpretation jsonb NOT NULL DEFAULT '{}',
    default_max_rows    integer CHECK (default_max_rows >= 0),
    default_statement_timeout_ms integer CHECK (default_statement_timeout_ms >= 1),
    default_max_bytes   bigint CHECK (default_max_bytes >= 1),
    validation_report   jsonb NOT NULL DEFAULT '{}',
    author_principal    text,
    approver_principal  text,
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    activated_at        timestamptz,
    UNIQUE (space_id, namespace, name, version),
    CHECK (approver_principal IS NULL OR approver_principal IS DISTINCT FROM author_principal
           OR origin = 'shipped_example')
);
-- At most one active version per query.
CREATE UNIQUE INDEX saved_queries_one_active ON saved_queries (space_id, namespace, name) WHERE status = 'active';
CREATE TRIGGER saved_queries_sql_immutable BEFORE UPDATE OF sql, query_hash, version, namespace, name
    ON saved_queries FOR EACH ROW EXECUTE FUNCTION refuse_change();
