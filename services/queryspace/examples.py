"""The 18 shipped ``examples.*`` saved queries (namespace owned by the platform).

Each is active from the start with origin and assurance ``shipped_example`` and an empty
parameter schema: its parameters are the positional ``$n``, described in ``parameters``.
IDs are UUID strings; instants are ISO 8601 with a zone.
"""

from __future__ import annotations

from typing import Any

EXAMPLES: list[dict[str, Any]] = [
    {"name": "claims_verbatim", "max_rows": 20, "parameters": ["$1 text: what to look for"],
     "description": "Semantic nomination joined to live testimony: what sources said, verbatim.",
     "sql": """SELECT s.rank, s.score, c.claim_id, c.claim_text, c.source_span, c.source_handle, c.asserted_at
  FROM semantic_claims($1, 20) s
  JOIN claims_live c ON c.claim_id = s.claim_id
 ORDER BY s.rank
 LIMIT 20"""},
    {"name": "claims_about", "max_rows": 50, "parameters": ["$1 entity id"],
     "description": "Current claims mentioning an entity, newest testimony first.",
     "sql": """SELECT DISTINCT c.claim_id, c.claim_text, c.asserted_at, c.source_handle, c.doc_id
  FROM mentions_live m
  JOIN claims_live c ON c.claim_id = m.claim_id
 WHERE m.resolved_entity_id = $1::uuid
 ORDER BY c.asserted_at DESC NULLS LAST, c.claim_id
 LIMIT 50"""},
    {"name": "claims_as_of", "max_rows": 50, "parameters": ["$1 start instant", "$2 end instant (inclusive)"],
     "description": "Current claims whose canonical half-open window overlaps the inclusive interval [$1, $2]; "
                    "claims of unknown precision have no bounds and are never matched by them.",
     "sql": """SELECT c.claim_id, c.claim_text, c.claim_valid_precision, c.canon_start, c.canon_end, c.source_handle
  FROM claims_canonical c
 WHERE c.is_current_testimony
   AND c.claim_valid_precision <> 'unknown'
   AND (c.canon_start IS NULL OR c.canon_start <= $2::timestamptz)
   AND (c.canon_end IS NULL OR c.canon_end > $1::timestamptz)
 ORDER BY c.canon_start NULLS FIRST, c.claim_id
 LIMIT 50"""},
    {"name": "claims_hybrid_rrf", "max_rows": 20, "parameters": ["$1 text"],
     "description": "Claims from the semantic and lexical channels fused by reciprocal rank (k = 60).",
     "sql": """WITH s AS (SELECT claim_id, rank FROM semantic_claims($1, 20)),
     l AS (SELECT claim_id, rank FROM lexical_claims($1, 20)),
     fused AS (SELECT claim_id, sum(1.0::float8 / (60 + rank)) AS rrf, count(*) AS channels
                 FROM (SELECT claim_id, rank FROM s UNION ALL SELECT claim_id, rank FROM l) u
                GROUP BY claim_id)
SELECT f.claim_id, f.rrf, f.channels, c.claim_text, c.source_handle
  FROM fused f JOIN claims_live c ON c.claim_id = f.claim_id
 ORDER BY f.rrf DESC, f.claim_id
 LIMIT 20"""},
    {"name": "chunks_hybrid_rrf", "max_rows": 20, "parameters": ["$1 text"],
     "description": "Chunks from the semantic and lexical channels fused by reciprocal rank (k = 60).",
     "sql": """WITH s AS (SELECT chunk_id, rank, source_text FROM semantic_chunks($1, 20)),
     l AS (SELECT chunk_id, rank, source_text FROM lexical_chunks($1, 20)),
     fused AS (SELECT chunk_id, sum(1.0::float8 / (60 + rank)) AS rrf, min(source_text) AS source_text
                 FROM (SELECT * FROM s UNION ALL SELECT * FROM l) u
                GROUP BY chunk_id)
SELECT f.chunk_id, f.rrf, k.doc_id, k.location_header, f.source_text
  FROM fused f JOIN chunks_live k ON k.chunk_id = f.chunk_id
 ORDER BY f.rrf DESC, f.chunk_id
 LIMIT 20"""},
    {"name": "chunk_neighbors", "max_rows": None, "parameters": ["$1 chunk id"],
     "description": "The chunks within two positions of one chunk, in its current section.",
     "sql": """SELECT n.chunk_id, n.ordinal, n.ordinal - a.ordinal AS relative_position, n.char_start, n.char_end,
       n.location_header
  FROM chunks_live a
  JOIN chunks_live n ON n.version_id = a.version_id
                    AND (n.section_id = a.section_id OR (n.section_id IS NULL AND a.section_id IS NULL))
                    AND n.ordinal BETWEEN a.ordinal - 2 AND a.ordinal + 2
 WHERE a.chunk_id = $1::uuid
 ORDER BY n.ordinal"""},
    {"name": "documents_about", "max_rows": 50, "parameters": ["$1 entity id"],
     "description": "Live documents mentioning an entity, most mentions first.",
     "sql": """SELECT d.doc_id, d.title, d.source_kind, d.source_ref, m.mention_count, m.last_mentioned_at
  FROM entity_document_mentions m
  JOIN documents_live d ON d.doc_id = m.doc_id
 WHERE m.entity_id = $1::uuid
 ORDER BY m.mention_count DESC, d.doc_id
 LIMIT 50"""},
    {"name": "pages_about", "max_rows": 50, "parameters": ["$1 entity id"],
     "description": "Compiled pages citing an entity through live page evidence (Testament compiles no pages, so "
                    "this is empty).",
     "sql": """SELECT p.artifact_id, p.git_path, p.page_summary, count(*) AS evidence_links
  FROM pages_live p
  JOIN page_evidence_visible e ON e.artifact_id = p.artifact_id
  JOIN mentions_live m ON e.target_kind = 'claim' AND m.claim_id = e.target_id
 WHERE m.resolved_entity_id = $1::uuid
 GROUP BY p.artifact_id, p.git_path, p.page_summary
 ORDER BY evidence_links DESC, p.artifact_id
 LIMIT 50"""},
    {"name": "relation_current", "max_rows": 50, "parameters": ["$1 entity id"],
     "description": "The entity's current relations, either end, best supported first.",
     "sql": """SELECT f.fact_id, f.predicate, f.subject_entity_id, f.object_entity_id, f.fact_label, f.valid_from,
       f.valid_until, f.evidence_count, f.contradict_count
  FROM facts_current f
 WHERE f.fact_kind = 'relation' AND (f.subject_entity_id = $1::uuid OR f.object_entity_id = $1::uuid)
 ORDER BY f.evidence_count DESC, f.fact_id
 LIMIT 50"""},
    {"name": "observation_current", "max_rows": 50, "parameters": ["$1 entity id"],
     "description": "The entity's current observations, best supported first.",
     "sql": """SELECT f.fact_id, f.statement, f.fact_label, f.valid_from, f.valid_until, f.evidence_count
  FROM facts_current f
 WHERE f.fact_kind = 'observation' AND f.subject_entity_id = $1::uuid
 ORDER BY f.evidence_count DESC, f.fact_id
 LIMIT 50"""},
    {"name": "identity_as_of", "max_rows": 100, "parameters": ["$1 entity id", "$2 instant"],
     "description": "The entity's identity transcript (resolutions, merges) up to an instant, oldest first.",
     "sql": """SELECT i.object_kind, i.event_id, i.entity_id, i.related_entity_id, i.mention_id, i.outcome, i.method,
       i.confidence, i.decided_by, i.decided_at, i.is_superseded
  FROM identity_events_visible i
 WHERE (i.entity_id = $1::uuid OR i.related_entity_id = $1::uuid) AND i.decided_at <= $2::timestamptz
 ORDER BY i.decided_at, i.event_id
 LIMIT 100"""},
    {"name": "entity_timeline", "max_rows": 200, "parameters": ["$1 entity id"],
     "description": "The entity's visible facts per UTC day of world time (belief time when the world start is "
                    "unknown).",
     "sql": """SELECT date_trunc('day', coalesce(f.valid_from, f.ingested_at)) AS day, count(*) AS facts,
       array_agg(f.fact_label ORDER BY f.ingested_at, f.fact_id) AS labels
  FROM facts_visible_history f
 WHERE f.subject_entity_id = $1::uuid OR f.object_entity_id = $1::uuid
 GROUP BY 1
 ORDER BY 1
 LIMIT 200"""},
    {"name": "explain", "max_rows": 100, "parameters": ["$1 fact id"],
     "description": "Why a fact is held: its history row, its live evidence claims and their lineages.",
     "sql": """SELECT 'fact' AS part, h.fact_id AS id, h.fact_label AS detail, h.ingested_at AS at, NULL::uuid AS doc_id
  FROM facts_visible_history h WHERE h.fact_id = $1::uuid
UNION ALL
SELECT 'evidence:' || e.stance, e.claim_id, c.claim_text, e.linked_at, e.doc_id
  FROM fact_claim_evidence_live e JOIN claims_live c ON c.claim_id = e.claim_id
 WHERE e.fact_id = $1::uuid
UNION ALL
SELECT 'lineage:' || l.stance, l.representative_claim_id, l.source_handle, l.asserted_to, l.doc_id
  FROM evidence_lineage l WHERE l.fact_id = $1::uuid
 ORDER BY 1, 4, 2
 LIMIT 100"""},
    {"name": "multi_hop_context", "max_rows": 100,
     "parameters": ["$1 deployment id", "$2 from entity id", "$3 to entity id", "$4 text"],
     "description": "Claims supporting the relations along the shortest routes between two entities that match a "
                    "lexical search.",
     "sql": """WITH route AS (SELECT relation_ids FROM graph_path($1::uuid, $2::uuid, $3::uuid)),
     hits AS (SELECT claim_id, rank FROM lexical_claims($4, 100))
SELECT DISTINCT e.fact_id AS relation_id, c.claim_id, c.claim_text, h.rank
  FROM route r
  JOIN fact_claim_evidence_live e ON e.fact_id = ANY (r.relation_ids)
  JOIN claims_live c ON c.claim_id = e.claim_id
  JOIN hits h ON h.claim_id = c.claim_id
 ORDER BY h.rank, c.claim_id
 LIMIT 100"""},
    {"name": "changed_since", "max_rows": 100, "parameters": ["$1 instant"],
     "description": "What was learned after an instant, oldest first.",
     "sql": """SELECT c.object_kind, c.object_id, c.occurred_at, c.label
  FROM changes_visible c
 WHERE c.occurred_at > $1::timestamptz
 ORDER BY c.occurred_at, c.object_kind, c.object_id
 LIMIT 100"""},
    {"name": "graph_neighborhood", "max_rows": None, "parameters": ["$1 deployment id", "$2 entity id"],
     "description": "Entities within two hops, one row per path (graph budgets apply).",
     "sql": """SELECT * FROM graph_neighborhood($1::uuid, $2::uuid, 2)"""},
    {"name": "graph_path", "max_rows": None,
     "parameters": ["$1 deployment id", "$2 from entity id", "$3 to entity id"],
     "description": "Equal-length shortest entity routes of at most four hops, each whole.",
     "sql": """SELECT * FROM graph_path($1::uuid, $2::uuid, $3::uuid, 4)"""},
    {"name": "graph_citation_path", "max_rows": None,
     "parameters": ["$1 deployment id", "$2 from document id", "$3 to document id"],
     "description": "Citation routes between two documents of at most six hops.",
     "sql": """SELECT * FROM graph_citation_path($1::uuid, $2::uuid, $3::uuid, 6)"""},
]
