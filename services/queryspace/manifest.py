"""The checked-in `memory_v1` manifest: views, public functions, limits and the SQL grammar.

Describe reads this, never data, so it is the same for every deployment of a release. Its
hash (:data:`MANIFEST_HASH`) covers views, columns, comments, function signatures and limits;
every result echoes it, and a change of it moves active saved queries to
``pending_revalidation``. The service refuses every statement with
``schema_version_mismatch`` when the database's views differ from it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

SCHEMA = "memory_v1"
SCHEMA_MAJOR = 1
CONTRACT = "memory_v1.manifest/2"

TYPES = {"u": "uuid", "t": "text", "i": "integer", "si": "smallint", "b": "bigint", "r": "real",
         "d": "double precision", "bo": "boolean", "j": "jsonb", "ts": "timestamp with time zone",
         "t[]": "text[]", "u[]": "uuid[]"}

# name -> "column:type ..." in view order (the types are PostgreSQL's format_type names).
_COLUMNS = {
    "changes_visible": "deployment_id:u object_kind:t event_id:u object_id:u occurred_at:ts label:t",
    "chunks_live": (
        "deployment_id:u chunk_id:u doc_id:u version_id:u representation_id:u section_id:u ordinal:i "
        "block_start:i block_end:i char_start:i char_end:i token_count:i chunk_content_hash:t "
        "extraction_input_hash:t embedding_text_hash:t location_facts:j location_header:t "
        "embedding_input_policy_version:t policy_generation:t embedder_generation:t chunker_version:t "
        "prefixer_version:t created_at:ts"),
    "claim_occurrences_live": (
        "deployment_id:u claim_id:u chunk_id:u derivation_kind:t doc_id:u version_id:u representation_id:u "
        "section_id:u evidence_mode:t source_locators:j attached_at:ts evidence_spans:j"),
    "claims_canonical": (
        "deployment_id:u claim_id:u doc_id:u version_id:u representation_id:u chunk_id:u claim_text:t "
        "source_span:t char_start:i char_end:i added_context:j temporal_class:t is_attributed:bo "
        "audit_status:t kept_flagged:bo extractor_version:t asserted_at:ts claim_valid_from:ts "
        "claim_valid_until:ts claim_valid_precision:t claim_valid_kind:t ingested_at:ts source_kind:t "
        "source_handle:t is_current_testimony:bo canon_start:ts canon_end:ts"),
    "claims_live": (
        "deployment_id:u claim_id:u doc_id:u version_id:u representation_id:u chunk_id:u claim_text:t "
        "source_span:t char_start:i char_end:i added_context:j temporal_class:t is_attributed:bo "
        "audit_status:t kept_flagged:bo extractor_version:t asserted_at:ts claim_valid_from:ts "
        "claim_valid_until:ts claim_valid_precision:t claim_valid_kind:t ingested_at:ts source_kind:t "
        "source_handle:t"),
    "claims_visible_history": (
        "deployment_id:u claim_id:u doc_id:u version_id:u representation_id:u chunk_id:u claim_text:t "
        "source_span:t char_start:i char_end:i added_context:j temporal_class:t is_attributed:bo "
        "audit_status:t kept_flagged:bo extractor_version:t asserted_at:ts claim_valid_from:ts "
        "claim_valid_until:ts claim_valid_precision:t claim_valid_kind:t ingested_at:ts source_kind:t "
        "source_handle:t is_current_testimony:bo"),
    "contradiction_members_current": (
        "deployment_id:u contradiction_group:u fact_kind:t fact_id:u fact_label:t valid_from:ts "
        "valid_until:ts ingested_at:ts evidence_count:b contradict_count:b support_state:t evaluated_at:ts"),
    "document_crossrefs_live": "deployment_id:u crossref_id:u from_doc_id:u to_doc_id:u kind:t context:t created_at:ts",
    "document_versions_visible": (
        "deployment_id:u version_id:u doc_id:u version_no:i content_hash:t source_version_ref:t status:t "
        "current_representation_id:u ingested_at:ts source_modified_at:ts published_at:ts language:t "
        "superseded_at:ts is_current_version:bo"),
    "documents_live": (
        "deployment_id:u doc_id:u source_kind:t source_ref:t source_uri:t title:t versioning_mode:t origin:t "
        "first_seen_at:ts last_observed_at:ts current_version_id:u current_version_no:i "
        "current_version_status:t current_representation_id:u has_current_ready_content:bo "
        "source_modified_at:ts published_at:ts language:t"),
    "entities_current": (
        "deployment_id:u entity_id:u entity_type:t canonical_name:t normalized_name:t type_confidence:r "
        "profile_summary:t live_mention_count:b live_document_count:b graph_degree:b created_at:ts "
        "updated_at:ts"),
    "entity_aliases_current": (
        "deployment_id:u alias_id:u source_entity_id:u entity_id:u alias_text:t normalized_lemma:t "
        "provenance:t confidence:r first_seen:ts last_seen:ts"),
    "entity_document_mentions": (
        "deployment_id:u entity_id:u doc_id:u mention_count:b first_mentioned_at:ts last_mentioned_at:ts"),
    "evidence_lineage": (
        "deployment_id:u fact_kind:t fact_id:u doc_id:u stance:t source_kind:t source_handle:t claim_count:b "
        "representative_claim_id:u asserted_from:ts asserted_to:ts"),
    "fact_claim_evidence_live": (
        "deployment_id:u fact_kind:t fact_id:u claim_id:u stance:t doc_id:u source_kind:t source_handle:t "
        "asserted_at:ts claim_valid_from:ts claim_valid_until:ts claim_valid_precision:t claim_valid_kind:t "
        "linked_at:ts"),
    "facts_current": (
        "deployment_id:u fact_kind:t fact_id:u subject_entity_id:u predicate:t object_entity_id:u statement:t "
        "fact_label:t valid_from:ts valid_until:ts ingested_at:ts contradiction_group:u confidence:r "
        "evidence_count:b contradict_count:b support_state:t evaluated_at:ts valid_precision:t"),
    "facts_visible_history": (
        "deployment_id:u fact_kind:t fact_id:u subject_entity_id:u predicate:t object_entity_id:u statement:t "
        "fact_label:t valid_from:ts valid_until:ts ingested_at:ts invalidated_at:ts contradiction_group:u "
        "confidence:r evidence_count_current:b contradict_count_current:b support_state_current:t "
        "valid_precision:t"),
    "graph_edges_current": (
        "deployment_id:u relation_id:u subject_entity_id:u object_entity_id:u predicate:t fact_label:t "
        "valid_from:ts valid_until:ts ingested_at:ts contradiction_group:u confidence:r evidence_count:b "
        "contradict_count:b support_state:t evaluated_at:ts"),
    "graph_edges_visible_history": (
        "deployment_id:u relation_id:u subject_entity_id:u object_entity_id:u predicate:t fact_label:t "
        "valid_from:ts valid_until:ts ingested_at:ts invalidated_at:ts contradiction_group:u confidence:r "
        "evidence_count_current:b contradict_count_current:b support_state_current:t"),
    "identity_events_visible": (
        "deployment_id:u object_kind:t event_id:u entity_id:u related_entity_id:u mention_id:u outcome:t "
        "method:t confidence:r decided_by:t decided_at:ts is_superseded:bo"),
    "mentions_live": (
        "deployment_id:u mention_id:u doc_id:u version_id:u representation_id:u chunk_id:u section_id:u "
        "claim_id:u surface_form:t normalized_lemma:t canonical_name_form:t emitted_type:t type_confidence:r "
        "language:t char_start:i char_end:i created_at:ts resolved_entity_id:u resolution_method:t "
        "resolution_confidence:r resolution_is_new_entity:bo resolved_at:ts"),
    "page_evidence_visible": (
        "deployment_id:u artifact_id:u role:t target_kind:t target_id:u claim_chunk_content_hashes:t[] "
        "link_count:b"),
    "pages_live": (
        "deployment_id:u artifact_id:u layer:t page_kind:t git_path:t kind:t parent_artifact_id:u "
        "page_summary:t status:t last_compiled_at:ts is_stale:bo open_review_flags:b redaction_required:bo"),
    "sections_live": (
        "deployment_id:u section_id:u doc_id:u version_id:u representation_id:u structure_generation_id:u "
        "parent_section_id:u node_path:t heading_level:si title:t normalized_title:t role:t ordinal:i "
        "block_start:i block_end:i char_start:i char_end:i page_start:i page_end:i summary:t"),
    "testimony_currency_events_visible": (
        "deployment_id:u event_id:u claim_id:u doc_id:u reconciliation_id:u became_current:bo reason:t "
        "from_extractor_version:t from_version_id:u occurred_at:ts"),
}

# name -> (grain tag, key without deployment_id, comment)
_VIEWS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "facts_current": ("fact_current", ("fact_kind", "fact_id"),
                      "Facts held now: still believed, supported by visible current testimony, holding now in world "
                      "time (valid_from inclusive, valid_until exclusive; null bound = unknown/open). evidence_count "
                      "= distinct live lineages (documents) per stance."),
    "contradiction_members_current": ("contradiction_member_current", ("contradiction_group", "fact_kind", "fact_id"),
                                      "Current facts that belong to a contradiction group."),
    "graph_edges_current": ("graph_edge_current", ("relation_id",),
                            "Current relations whose two endpoints are in entities_current."),
    "fact_claim_evidence_live": ("fact_claim_evidence_live", ("fact_kind", "fact_id", "claim_id", "stance"),
                                 "The bridge: current testimony supporting or contradicting a fact (lineage-checked)."),
    "evidence_lineage": ("evidence_lineage", ("fact_kind", "fact_id", "doc_id", "stance"),
                         "One row per (fact, document, stance). Evidence count = rows per (fact, stance); "
                         "claim_count is descriptive, never an evidence count."),
    "claims_live": ("claim_current_testimony", ("claim_id",),
                    "Current testimony: what visible sources say now. Claim windows are inclusive at both ends."),
    "documents_live": ("document_lineage_live", ("doc_id",),
                       "Visible, undeleted documents with their current version."),
    "document_crossrefs_live": ("document_crossref_live", ("crossref_id",),
                                "Links between two visible documents; raw citation text is never exposed."),
    "chunks_live": ("chunk_current_content", ("chunk_id",),
                    "Chunks of each document's serving version. No body text: use fetch_chunk_bodies."),
    "sections_live": ("section_current_content", ("section_id",), "Sections of each document's serving version."),
    "claim_occurrences_live": ("claim_occurrence_current_content", ("claim_id", "chunk_id", "derivation_kind"),
                               "Where current claims occur in current chunks."),
    "mentions_live": ("mention_current_content", ("mention_id",),
                      "Names in current testimony and the entity they resolved to (the five resolution columns "
                      "are all null or all set)."),
    "entities_current": ("entity_survivor_current", ("entity_id",),
                         "Surviving entities with visible current mentions; counts over current content only."),
    "entity_aliases_current": ("entity_alias_current", ("alias_id",), "Aliases of current entities (survivor ids)."),
    "entity_document_mentions": ("entity_document_mention_live", ("entity_id", "doc_id"),
                                 "Mentions of each entity per live document."),
    "pages_live": ("k_artifact_compiled_grain", ("artifact_id",),
                   "Compiled knowledge pages. Testament compiles no pages: always empty."),
    "page_evidence_visible": ("k_artifact_evidence_visible", ("artifact_id", "role", "target_kind", "target_id"),
                              "Evidence of compiled pages. Always empty (no pages)."),
    "facts_visible_history": ("fact_visible_history", ("fact_kind", "fact_id"),
                              "Every visible fact with its belief window (ingested_at, invalidated_at). The *_current "
                              "counts are live, not historical."),
    "graph_edges_visible_history": ("graph_edge_visible_history", ("relation_id",),
                                    "Visible relations through belief time, endpoints in entities_current."),
    "claims_visible_history": ("claim_visible_history", ("claim_id",),
                               "Every visible claim, current testimony or not."),
    "claims_canonical": ("claim_visible_history_canonical", ("claim_id",),
                         "claims_visible_history plus canonical half-open bounds (canon_start inclusive, canon_end "
                         "exclusive; both null when precision is unknown; end null when open). Overlap: "
                         "a.start < b.end AND b.start < a.end, null end = unbounded."),
    "document_versions_visible": ("document_version_visible", ("version_id",), "Versions of visible documents."),
    "changes_visible": ("change_event_visible", ("object_kind", "event_id"),
                        "What was learned when: fact ingest/invalidation/supersession and claim ingest. No deletion "
                        "events."),
    "identity_events_visible": ("identity_event_visible", ("object_kind", "event_id"),
                                "Entity resolution decisions and merge events of current entities."),
    "testimony_currency_events_visible": ("testimony_currency_event_visible", ("event_id",),
                                          "Why visible claims became or stopped being current testimony."),
}

SINGLE_INSTANT = frozenset({"facts_current", "graph_edges_current", "contradiction_members_current", "facts_as_of"})


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass(frozen=True)
class View:
    name: str
    grain: str
    key: tuple[str, ...]
    comment: str
    columns: tuple[Column, ...]


def _parse(spec: str) -> tuple[Column, ...]:
    out = []
    for item in spec.split():
        name, _, abbrev = item.partition(":")
        out.append(Column(name, TYPES[abbrev]))
    return tuple(out)


VIEWS: dict[str, View] = {
    name: View(name, grain, ("deployment_id", *key), comment, _parse(_COLUMNS[name]))
    for name, (grain, key, comment) in _VIEWS.items()
}

_SEARCH_FILTERS_CLAIMS = ("asserted_from", "asserted_to", "doc_id", "entity_id", "source_kind")
_SEARCH_FILTERS_CHUNKS = ("doc_id", "language", "section_role", "source_kind", "source_shape")
_SEARCH_FILTERS_FACTS = ("fact_kind", "support_state", "predicate", "subject_entity_id", "object_entity_id")

_CLAIM_OUT = ("rank:i score:d channel:t claim_id:u doc_id:u claim_text:t source_handle:t source_kind:t "
              "asserted_at:ts claim_valid_from:ts claim_valid_until:ts")
_CHUNK_BODY = ("chunk_id:u doc_id:u version_id:u representation_id:u section_id:u chunk_content_hash:t "
               "embedding_text_hash:t source_text:t location_header:t embedding_input_policy_version:t "
               "policy_generation:t embedder_generation:t created_at:ts")
_CHUNK_OUT = "rank:i score:d channel:t " + _CHUNK_BODY
_FACT_OUT = ("rank:i score:d channel:t fact_id:u fact_kind:t fact_label:t predicate:t subject_entity_id:u "
             "object_entity_id:u evidence_count:b contradict_count:b support_state:t evaluated_at:ts")
_ENTITY_OUT = ("rank:i score:d channel:t entity_id:u entity_type:t canonical_name:t profile_summary:t "
               "live_mention_count:b live_document_count:b")
_GRAPH_OUT = ("row_kind:t hops:i relation_ids:u[] node_ids:u[] truncated:bo truncation_reason:t examined_edges:b "
              "returned_paths:b effective_depth:i effective_expansion_budget:i effective_frontier_budget:i "
              "effective_result_budget:i effective_time_budget_ms:i applied_valid_at:ts applied_believed_at:ts")
_CITATION_OUT = ("row_kind:t hops:i crossref_ids:u[] document_ids:u[] truncated:bo truncation_reason:t "
                 "examined_edges:b returned_paths:b effective_depth:i effective_expansion_budget:i "
                 "effective_frontier_budget:i effective_result_budget:i effective_time_budget_ms:i evaluated_at:ts")
_AS_OF_OUT = ("deployment_id:u fact_kind:t fact_id:u subject_entity_id:u predicate:t object_entity_id:u statement:t "
              "fact_label:t valid_from:ts valid_until:ts ingested_at:ts invalidated_at:ts contradiction_group:u "
              "confidence:r evidence_count_current:b contradict_count_current:b support_state_current:t "
              "applied_valid_at:ts applied_believed_at:ts identity_regime:t valid_precision:t temporal_match:t")
_SEARCH_ARGS = ("query text", "k integer", "filters jsonb", "embedding_input_policy_version text",
                "embedder_generation text")
_GRAPH_ARGS = ("max_depth integer", "predicates text[]", "valid_at timestamptz", "believed_at timestamptz",
               "max_results integer", "expansion_budget integer", "frontier_budget integer", "time_budget_ms integer")


@dataclass(frozen=True)
class PublicFunction:
    name: str
    category: str
    required: tuple[str, ...]
    optional: tuple[str, ...]
    columns: tuple[Column, ...]
    purpose: str
    channel: str = ""
    target: str = ""
    filters: tuple[str, ...] = ()
    # Evaluated by the service (needs an embedder, the BM25 tokenizer or the graph walk) and
    # substituted into the statement; otherwise a plain SQL function in memory_v1.
    service_evaluated: bool = True

    @property
    def signature(self) -> str:
        args = list(self.required) + [f"[{a}]" for a in self.optional]
        return f"{self.name}({', '.join(args)})"


def _fn(name: str, category: str, required: tuple[str, ...], optional: tuple[str, ...], out: str, purpose: str,
        **kw: Any) -> PublicFunction:
    return PublicFunction(name, category, required, optional, _parse(out), purpose, **kw)


FUNCTIONS: dict[str, PublicFunction] = {f.name: f for f in (
    _fn("semantic_claims", "nomination", _SEARCH_ARGS[:2], _SEARCH_ARGS[2:], _CLAIM_OUT,
        "Semantic (vector) search over current claims, confirmed in PostgreSQL.", channel="semantic",
        target="claims", filters=_SEARCH_FILTERS_CLAIMS),
    _fn("lexical_claims", "nomination", _SEARCH_ARGS[:2], _SEARCH_ARGS[2:3], _CLAIM_OUT,
        "BM25 search over current claims.", channel="bm25", target="claims", filters=_SEARCH_FILTERS_CLAIMS),
    _fn("semantic_chunks", "nomination", _SEARCH_ARGS[:2], _SEARCH_ARGS[2:], _CHUNK_OUT,
        "Semantic search over current chunks (returns their text).", channel="semantic", target="chunks",
        filters=_SEARCH_FILTERS_CHUNKS),
    _fn("lexical_chunks", "nomination", _SEARCH_ARGS[:2], _SEARCH_ARGS[2:3], _CHUNK_OUT,
        "BM25 search over current chunks.", channel="bm25", target="chunks", filters=_SEARCH_FILTERS_CHUNKS),
    _fn("semantic_facts", "nomination", _SEARCH_ARGS[:2], _SEARCH_ARGS[2:], _FACT_OUT,
        "Semantic search over current facts.", channel="semantic", target="facts", filters=_SEARCH_FILTERS_FACTS),
    _fn("semantic_entities", "nomination", _SEARCH_ARGS[:2], _SEARCH_ARGS[2:3], _ENTITY_OUT,
        "Semantic search over current entity profiles (takes no filter keys).", channel="semantic",
        target="entities"),
    _fn("fetch_chunk_bodies", "body_fetch", ("chunk_ids uuid[]",), (), "input_ordinal:i " + _CHUNK_BODY,
        "The only way to read chunk text: at most 50 current chunk ids of one embedding generation."),
    _fn("facts_as_of", "bitemporal", ("valid_at timestamptz", "believed_at timestamptz"), ("max_rows integer",),
        _AS_OF_OUT, "Facts holding at valid_at as believed at believed_at (max_rows default 200, cap 1000).",
        service_evaluated=False),
    _fn("canonical_bounds", "temporal", ("valid_from timestamptz", "valid_until timestamptz", "valid_precision text"),
        (), "canon_start:ts canon_end:ts",
        "Canonical half-open bounds of an inclusive window at a precision (UTC).", service_evaluated=False),
    _fn("graph_neighborhood", "graph", ("deployment_id uuid", "start_entity_id uuid"), _GRAPH_ARGS, _GRAPH_OUT,
        "Bounded bitemporal neighbourhood of an entity ($1 must be the caller's deployment id).", target="graph"),
    _fn("graph_path", "graph", ("deployment_id uuid", "from_entity_id uuid", "to_entity_id uuid"), _GRAPH_ARGS,
        _GRAPH_OUT, "Equal-length shortest paths between two entities.", target="graph"),
    _fn("graph_citation_path", "graph", ("deployment_id uuid", "from_doc_id uuid", "to_doc_id uuid"),
        ("max_depth integer", "max_paths integer", "expansion_budget integer", "frontier_budget integer",
         "time_budget_ms integer"), _CITATION_OUT, "Citation routes between two documents.", target="citations"),
)}

SRF_CATEGORIES = {"nomination": ["semantic_claims", "lexical_claims", "semantic_chunks", "lexical_chunks",
                                 "semantic_facts", "semantic_entities"],
                  "body_fetch": ["fetch_chunk_bodies"], "bitemporal": ["facts_as_of"],
                  "temporal": ["canonical_bounds"],
                  "graph": ["graph_neighborhood", "graph_path", "graph_citation_path"]}
SRF_MAX_PER_CATEGORY = 3
RECURSION_DEPTH_MAX = 6

BUILTINS = (
    "count", "sum", "avg", "min", "max", "bool_and", "bool_or", "array_agg", "string_agg", "jsonb_agg",
    "jsonb_object_agg",
    "coalesce", "nullif", "greatest", "least",
    "lower", "upper", "trim", "btrim", "length", "octet_length", "substring", "replace", "regexp_replace",
    "abs", "ceil", "floor", "round",
    "date_trunc", "extract", "make_interval",
    "array_length", "cardinality", "jsonb_typeof", "jsonb_array_length", "jsonb_build_object",
    "row_number", "rank", "dense_rank", "lag", "lead", "first_value", "last_value",
)
OPERATORS = ("=", "<>", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "||", "@>", "<@", "&&", "->", "->>",
             "#>", "#>>", "~", "~*", "!~", "!~*", "~~", "!~~", "~~*", "!~~*")
CAST_TYPES = ("uuid", "text", "varchar", "bpchar", "bool", "boolean", "int2", "int4", "int8", "integer", "bigint",
              "smallint", "numeric", "float4", "float8", "timestamptz", "timestamp", "date", "interval", "jsonb")

LIMITS = {
    "interactive": {"statement_timeout_ms_default": 5000, "statement_timeout_ms_cap": 15000,
                    "graph_statement_timeout_ms": 5000, "lock_timeout_ms": 250,
                    "idle_in_transaction_timeout_ms": 5000, "max_rows_default": 200, "max_rows_cap": 1000,
                    "max_bytes_default": 1048576, "max_bytes_cap": 8388608, "work_mem_kib": 16384,
                    "temp_file_limit_kib": 65536, "sql_text_max_bytes": 65536, "parameters_max": 64,
                    "parameters_max_bytes": 262144, "recursive_ctes_max": 1, "recursion_depth_max": 6,
                    "concurrent_per_caller": 2, "concurrent_per_deployment": 8,
                    "statement_seconds_per_minute_caller": 30, "statement_seconds_per_minute_deployment": 120,
                    "search_candidates_max": 200, "body_fetch_bytes_per_call": 524288,
                    "body_fetch_bytes_per_statement": 4194304},
    "analytical": {"statement_timeout_ms_default": 60000, "statement_timeout_ms_cap": 60000,
                   "graph_statement_timeout_ms": 5000, "lock_timeout_ms": 2000,
                   "idle_in_transaction_timeout_ms": 15000, "max_rows_default": 10000, "max_rows_cap": 10000,
                   "max_bytes_default": 67108864, "max_bytes_cap": 67108864, "work_mem_kib": 65536,
                   "temp_file_limit_kib": 65536, "sql_text_max_bytes": 65536, "parameters_max": 256,
                   "parameters_max_bytes": 1048576, "recursive_ctes_max": 1, "recursion_depth_max": 6,
                   "concurrent_per_caller": 1, "concurrent_per_deployment": 4,
                   "statement_seconds_per_minute_caller": 60, "statement_seconds_per_minute_deployment": 240,
                   "search_candidates_max": 200, "body_fetch_bytes_per_call": 524288,
                   "body_fetch_bytes_per_statement": 4194304},
}

HEADLINE = {
    "claims": "Claims are immutable testimony.",
    "facts": "Facts are adjudicated: bitemporal, with evidence counted per distinct lineage, and tracked for "
             "contradictions.",
    "bridge": "The evidence table bridges the two. Answer from facts, then use the bridge to show why.",
}

RETRIEVAL_CHOICES = [
    {"need": "what is held true now", "use": "facts_current (then fact_claim_evidence_live for why)"},
    {"need": "what was held at a past instant, as believed then", "use": "facts_as_of(valid_at, believed_at)"},
    {"need": "what sources said, verbatim", "use": "claims_live, or semantic_claims / lexical_claims in FROM"},
    {"need": "claims about a period", "use": "claims_canonical with the half-open overlap test"},
    {"need": "who is connected to whom", "use": "graph_edges_current, or graph_neighborhood / graph_path"},
    {"need": "what changed since an instant", "use": "changes_visible"},
    {"need": "chunk text", "use": "fetch_chunk_bodies(chunk_ids) (chunks_live has no body)"},
]

HONESTY_WARNINGS = [
    "An empty result is not proof of absence: the views hold only what visible sources said.",
    "Rows have no order without ORDER BY.",
    "Claim windows are inclusive at both ends; fact and canonical windows are half-open.",
    "Evidence count is the number of distinct live lineages (evidence_lineage rows per fact and stance), "
    "never claim_count.",
    "The *_current counts in history views are live counts, not historical ones.",
    "Pass instants as parameters ($1::timestamptz): now() and clock functions are refused.",
]

WORKED_EXAMPLES = [
    {"question": "Who owns the invoice exporter now?",
     "wrong": "SELECT claim_text FROM claims_live WHERE claim_text ILIKE '%owns%exporter%' "
              "ORDER BY asserted_at DESC LIMIT 1",
     "why_wrong": "The newest claim is testimony, not the adjudicated answer.",
     "right": "SELECT f.fact_label, f.valid_from, e.claim_id, e.source_handle FROM facts_current f "
              "JOIN fact_claim_evidence_live e ON e.fact_kind = f.fact_kind AND e.fact_id = f.fact_id "
              "WHERE f.predicate = 'owns' ORDER BY f.evidence_count DESC"},
    {"question": "Which facts does their newest testimony contradict?",
     "right": "WITH ranked AS (SELECT e.fact_id, e.stance, row_number() OVER (PARTITION BY e.fact_id "
              "ORDER BY c.asserted_at DESC NULLS LAST, c.claim_id) AS n FROM fact_claim_evidence_live e "
              "JOIN claims_live c ON c.claim_id = e.claim_id) "
              "SELECT fact_id FROM ranked WHERE n = 1 AND stance = 'contradicts'"},
]

CORE_OPERATIONS = [
    {"name": "facts_context", "route": "POST /operations/facts_context",
     "purpose": "Current facts for a question, with evidence claims and their spans."},
    {"name": "claims_and_sources_context", "route": "POST /operations/claims_and_sources_context",
     "purpose": "What sources said about a question, with chunks."},
    {"name": "resolve_entity", "route": "POST /operations/resolve_entity",
     "purpose": "Which entity a name refers to, with the tier that matched."},
    {"name": "combined_context", "route": "POST /operations/combined_context",
     "purpose": "Facts and claims for a question in one envelope."},
]

# The parse-tree node classes the guard admits (published as sql_grammar.statement_node_classes).
NODE_CLASSES = (
    "RawStmt", "SelectStmt", "WithClause", "CommonTableExpr", "RangeVar", "RangeSubselect", "RangeFunction",
    "JoinExpr", "Alias", "ResTarget", "ColumnRef", "A_Star", "A_Const", "ParamRef", "A_Expr", "BoolExpr",
    "NullTest", "BooleanTest", "SubLink", "CaseExpr", "CaseWhen", "CoalesceExpr", "MinMaxExpr", "FuncCall",
    "WindowDef", "SortBy", "TypeCast", "TypeName", "A_ArrayExpr", "A_Indirection", "A_Indices", "RowExpr",
    "CollateClause", "NamedArgExpr", "GroupingSet", "Integer", "Float", "Boolean", "String", "BitString",
    "SQLValueFunction(never)",
)


def _columns_json(columns: tuple[Column, ...]) -> list[list[Any]]:
    return [[c.name, c.type, True] for c in columns]


def view_json(view: View) -> dict[str, Any]:
    return {"name": view.name, "grain": view.grain, "row_key": list(view.key), "comment": view.comment,
            "columns": _columns_json(view.columns)}


def function_signatures() -> dict[str, Any]:
    return {f.name: {"signature": f.signature, "category": f.category, "purpose": f.purpose,
                     "columns": _columns_json(f.columns), "filters": list(f.filters)}
            for f in FUNCTIONS.values()}


def grammar_json() -> dict[str, Any]:
    return {"functions": list(BUILTINS), "operators": list(OPERATORS), "cast_types": list(CAST_TYPES),
            "statement_node_classes": [n for n in NODE_CLASSES if "(" not in n],
            "public_functions": list(FUNCTIONS), "srf_categories": SRF_CATEGORIES,
            "srf_invocations_max_per_category": SRF_MAX_PER_CATEGORY, "recursion_depth_max": RECURSION_DEPTH_MAX}


def _hash() -> str:
    body = {"schema": SCHEMA, "contract": CONTRACT, "views": [view_json(v) for v in VIEWS.values()],
            "functions": function_signatures(), "limits": LIMITS, "grammar": grammar_json()}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


MANIFEST_HASH = _hash()
