"""The public functions the service evaluates: search (semantic, lexical), body fetch and the
bounded graph walks.

Each call is a top-level FROM item with literal or ``$n`` arguments (the guard's placement
rule), so it can be evaluated before the statement, in the statement's transaction (the
same snapshot): the index nominates, the ``memory_v1`` views confirm (the caller's space
and principals apply, so nothing hidden leaks), and the rows reach the statement as a bound
jsonb parameter read by ``jsonb_to_recordset`` with the function's declared columns.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import asyncpg
from pglast import ast, parse_sql

from services.graph.adapters import PgSnapshot
from services.graph.app import GraphService
from services.graph.domain import Budgets, CitationQuery, Clocks, NeighborhoodQuery, PathQuery, Visibility
from services.platform.auth import Caller
from services.platform.errors import TestamentError
from services.queryspace.adapters import StatementFailed
from services.queryspace.guard import PublicCall, Rejected
from services.queryspace.manifest import FUNCTIONS, LIMITS, PublicFunction
from services.retrieval.adapters import SearchLegs

SEARCH_K_DEFAULT, SEARCH_K_MAX = 20, 100
CANDIDATES_MAX = LIMITS["interactive"]["search_candidates_max"]
BODY_IDS_MAX = 50
BODY_BYTES_PER_CALL = LIMITS["interactive"]["body_fetch_bytes_per_call"]
BODY_BYTES_PER_STATEMENT = LIMITS["interactive"]["body_fetch_bytes_per_statement"]
# Testament embeds one input policy: the passage text as stored (chunks_live reports it).
POLICY_GENERATION = "v1"
_KIND = {"claims": "claim", "chunks": "chunk", "facts": "fact", "entities": "entity"}


class Embedder(Protocol):
    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@dataclass
class Resolved:
    call: PublicCall
    function: PublicFunction
    args: dict[str, Any]
    vector: list[float] | None = None


@dataclass
class Outcome:
    rows: list[dict[str, Any]]
    semantic: dict[str, Any] | None = None
    graph: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    truncation_reason: str | None = None


def _arg_names(fn: PublicFunction) -> list[str]:
    return [a.split()[0] for a in (*fn.required, *fn.optional)]


def resolve(call: PublicCall, parameters: Sequence[Any], caller: Caller) -> Resolved:
    """Bind literal/placeholder arguments to the function's argument names (rejected side:
    wrong arity, the graph deployment check)."""
    fn = FUNCTIONS[call.name]
    names = _arg_names(fn)
    args: dict[str, Any] = {}
    for i, a in enumerate(call.arguments):
        value = parameters[a.param - 1] if a.param is not None else a.value
        key = a.name or (names[i] if i < len(names) else None)
        if key is None or key not in names or key in args:
            raise Rejected("invalid_parameter", f"{fn.signature}: unexpected argument {key or i + 1}")
        args[key] = value
    missing = [n.split()[0] for n in fn.required if n.split()[0] not in args]
    if missing:
        raise Rejected("invalid_parameter", f"{fn.signature}: missing {', '.join(missing)}")
    if fn.category == "graph":
        first = call.arguments[0] if call.arguments else None
        if first is None or first.param != 1 or str(args.get("deployment_id")) != str(caller.space_id):
            raise Rejected("invalid_parameter", f"{call.name}: the first argument must be $1, bound to this "
                                                "deployment's id")
        if ("valid_at" in args) != ("believed_at" in args) or (args.get("valid_at") is None) != (
                args.get("believed_at") is None):
            raise Rejected("invalid_parameter", f"{call.name}: valid_at and believed_at go together")
    return Resolved(call, fn, args)


def search_k(resolved: Resolved) -> int:
    k = resolved.args.get("k", SEARCH_K_DEFAULT)
    if k is None:
        k = SEARCH_K_DEFAULT
    if isinstance(k, bool) or not isinstance(k, int | float) or int(k) != k or k < 1:
        raise StatementFailed("invalid_parameter", f"{resolved.call.name}: k must be an integer >= 1")
    return min(int(k), SEARCH_K_MAX)


def _filters(resolved: Resolved) -> dict[str, Any]:
    raw = resolved.args.get("filters")
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise StatementFailed("invalid_parameter", f"{resolved.call.name}: filters must be a JSON object") \
                from None
    if not isinstance(raw, dict) or any(isinstance(v, dict | list) for v in raw.values()):
        raise StatementFailed("invalid_parameter", f"{resolved.call.name}: filters must be a JSON object of scalars")
    unknown = sorted(set(raw) - set(resolved.function.filters))
    if unknown:
        raise StatementFailed("invalid_parameter", f"{resolved.call.name}: unknown filter key {unknown[0]!r}")
    return raw


def _uuid(value: Any, what: str) -> uuid.UUID | None:
    if value is None:
        return None
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise StatementFailed("invalid_parameter", f"{what} must be a UUID") from None


def _instant(value: Any, what: str) -> dt.datetime | None:
    if value is None:
        return None
    try:
        stamp = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise StatementFailed("invalid_parameter", f"{what} must be an ISO 8601 instant") from None
    if stamp.tzinfo is None:
        raise StatementFailed("invalid_parameter", f"{what} must carry a zone")
    return stamp


def _jsonable(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _invocation(name: str, nominated: int, confirmed: int, **extra: Any) -> dict[str, Any]:
    return {"function": name, "nominated": nominated, "confirmed": confirmed, **extra}


# --- confirmation reads (through the views: the caller's visibility applies) -----------

_CONFIRM = {
    "claim": """SELECT c.claim_id, c.doc_id, c.claim_text, c.source_handle, c.source_kind, c.asserted_at,
                       c.claim_valid_from, c.claim_valid_until
                  FROM memory_v1.claims_live c
                 WHERE c.claim_id = ANY($1::uuid[])
                   AND ($2::timestamptz IS NULL OR c.asserted_at >= $2)
                   AND ($3::timestamptz IS NULL OR c.asserted_at <= $3)
                   AND ($4::uuid IS NULL OR c.doc_id = $4)
                   AND ($5::uuid IS NULL OR EXISTS (SELECT 1 FROM memory_v1.mentions_live m
                                                    WHERE m.claim_id = c.claim_id AND m.resolved_entity_id = $5))
                   AND ($6::text IS NULL OR c.source_kind = $6)""",
    "chunk": """SELECT l.chunk_id, l.doc_id, l.version_id, l.representation_id, l.section_id, l.chunk_content_hash,
                       l.embedding_text_hash, b.chunk_text AS source_text, l.location_header,
                       l.embedding_input_policy_version, l.policy_generation, l.embedder_generation, l.created_at
                  FROM memory_v1.chunks_live l JOIN chunks b ON b.chunk_id = l.chunk_id
                  JOIN memory_v1.documents_live d ON d.doc_id = l.doc_id
             LEFT JOIN memory_v1.sections_live s ON s.section_id = l.section_id
                 WHERE l.chunk_id = ANY($1::uuid[])
                   AND ($2::uuid IS NULL OR l.doc_id = $2)
                   AND ($3::text IS NULL OR d.language = $3)
                   AND ($4::text IS NULL OR s.role = $4)
                   AND ($5::text IS NULL OR d.source_kind = $5)
                   AND ($6::text IS NULL OR $6 = 'text')""",
    "fact": """SELECT f.fact_id, f.fact_kind, f.fact_label, f.predicate, f.subject_entity_id, f.object_entity_id,
                      f.evidence_count, f.contradict_count, f.support_state, f.evaluated_at
                 FROM memory_v1.facts_current f
                WHERE f.fact_id = ANY($1::uuid[])
                  AND ($2::text IS NULL OR f.fact_kind = $2)
                  AND ($3::text IS NULL OR f.support_state = $3)
                  AND ($4::text IS NULL OR f.predicate = $4)
                  AND ($5::uuid IS NULL OR f.subject_entity_id = $5)
                  AND ($6::uuid IS NULL OR f.object_entity_id = $6)""",
    "entity": """SELECT e.entity_id, e.entity_type, e.canonical_name, e.profile_summary, e.live_mention_count,
                        e.live_document_count
                   FROM memory_v1.entities_current e WHERE e.entity_id = ANY($1::uuid[])""",
}
_ID = {"claim": "claim_id", "chunk": "chunk_id", "fact": "fact_id", "entity": "entity_id"}


def _filter_args(kind: str, filters: dict[str, Any], name: str) -> list[Any]:
    if kind == "claim":
        return [_instant(filters.get("asserted_from"), "asserted_from"),
                _instant(filters.get("asserted_to"), "asserted_to"), _uuid(filters.get("doc_id"), "doc_id"),
                _uuid(filters.get("entity_id"), "entity_id"), _text(filters.get("source_kind"))]
    if kind == "chunk":
        return [_uuid(filters.get("doc_id"), "doc_id"), _text(filters.get("language")),
                _text(filters.get("section_role")), _text(filters.get("source_kind")),
                _text(filters.get("source_shape"))]
    if kind == "fact":
        return [_text(filters.get("fact_kind")), _text(filters.get("support_state")), _text(filters.get("predicate")),
                _uuid(filters.get("subject_entity_id"), "subject_entity_id"),
                _uuid(filters.get("object_entity_id"), "object_entity_id")]
    return []


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


class Evaluator:
    """Evaluates the service-side public functions of one statement on its connection."""

    def __init__(self, legs: SearchLegs, embedder: Embedder | None, *, graph_budgets: Budgets | None = None) -> None:
        self.legs = legs
        self.embedder = embedder
        self.graph_budgets = graph_budgets or Budgets()

    async def prepare(self, resolved: Sequence[Resolved]) -> None:
        """Outside the transaction: validate search arguments, the candidate budget, and embed
        semantic queries (a model call never holds a snapshot open)."""
        total = 0
        for r in resolved:
            if r.function.category == "nomination":
                query = r.args.get("query")
                if not isinstance(query, str) or not query.strip():
                    raise Rejected("invalid_parameter", f"{r.call.name}: query must be non-empty text")
                total += search_k(r)
        if total > CANDIDATES_MAX:
            raise Rejected("quota_exceeded", f"at most {CANDIDATES_MAX} search candidates per statement")
        semantic = [r for r in resolved if r.function.channel == "semantic"]
        if semantic:
            if self.embedder is None:
                raise StatementFailed("p1_unavailable", "no embedder is configured for semantic search")
            try:
                vectors = await self.embedder.embed([r.args["query"] for r in semantic])
            except Exception:  # noqa: BLE001 - any provider failure means the P1 side is unavailable
                raise StatementFailed("p1_unavailable", "the embedder did not answer") from None
            for r, v in zip(semantic, vectors, strict=True):
                r.vector = list(v)

    async def evaluate(self, conn: asyncpg.Connection, caller: Caller, r: Resolved, *,
                       body_bytes: list[int]) -> Outcome:
        fn = r.function
        if fn.category == "nomination":
            return await self._search(conn, caller, r)
        if fn.category == "body_fetch":
            return await self._bodies(conn, r, body_bytes)
        if fn.category == "graph":
            return await self._graph(conn, caller, r)
        raise AssertionError(fn.name)  # pragma: no cover - plain SQL functions are not evaluated here

    async def _search(self, conn: asyncpg.Connection, caller: Caller, r: Resolved) -> Outcome:
        kind = _KIND[r.function.target]
        k = search_k(r)
        filters = _filters(r)
        args = _filter_args(kind, filters, r.call.name)
        now = await conn.fetchval("SELECT now()")
        async with conn.transaction():  # a savepoint: the legs set hnsw options locally
            if r.function.channel == "semantic":
                assert r.vector is not None
                dims = await conn.fetchval("SELECT dimension FROM space_embedding_models WHERE space_id = $1",
                                           caller.space_id)
                if dims is None:
                    raise StatementFailed("generation_unavailable", "nothing is embedded in this deployment yet")
                if dims != len(r.vector):
                    raise StatementFailed("generation_unavailable",
                                          "the query embedder's generation differs from the indexed one")
                model = await conn.fetchval("SELECT model FROM space_embedding_models WHERE space_id = $1",
                                            caller.space_id)
                policy, pinned = r.args.get("embedding_input_policy_version"), r.args.get("embedder_generation")
                if (policy is not None and policy != POLICY_GENERATION) or (pinned is not None and pinned != model):
                    raise StatementFailed("generation_unavailable", f"{r.call.name}: the pinned generation is not "
                                                                    "the indexed one")
                hits = await self.legs.semantic(conn, kind, caller, r.vector, k)
            else:
                hits = await self.legs.lexical(conn, kind, caller, r.args["query"], k)
        ids = [h for h, _ in hits]
        sql = _CONFIRM[kind]
        if kind == "entity":
            rows = await conn.fetch(sql, ids)
        else:
            rows = await conn.fetch(sql, ids, *args)
        by_id = {row[_ID[kind]]: row for row in rows}
        out: list[Any] = []
        for item, score in hits:
            row = by_id.get(item)
            if row is None:
                continue
            cells = {"rank": len(out) + 1, "score": score, "channel": r.function.channel or "bm25",
                     **{k2: _jsonable(v) for k2, v in dict(row).items()}}
            out.append(cells)
        dropped = len(hits) - len(out)
        generation = None
        if r.function.channel == "semantic":
            generation = await conn.fetchval("SELECT model FROM space_embedding_models WHERE space_id = $1",
                                             caller.space_id)
        invocation = _invocation(r.call.name, len(hits), len(out),
                                 dropped_filtered=dropped if filters else 0,
                                 dropped_absent=0 if filters else dropped,
                                 embedder_generation=generation,
                                 policy_generation=POLICY_GENERATION if generation else None,
                                 pg_confirmed_at=now, termination_reason="completed")
        return Outcome(out, semantic=invocation)

    async def _bodies(self, conn: asyncpg.Connection, r: Resolved, body_bytes: list[int]) -> Outcome:
        raw = r.args.get("chunk_ids")
        if isinstance(raw, str):
            raw = [p.strip() for p in raw.strip("{}").split(",") if p.strip()]
        if not isinstance(raw, list) or not raw:
            raise StatementFailed("invalid_parameter", "fetch_chunk_bodies: chunk_ids must be a non-empty uuid[]")
        if len(raw) > BODY_IDS_MAX:
            raise StatementFailed("invalid_parameter", f"fetch_chunk_bodies: at most {BODY_IDS_MAX} chunk ids")
        ids = [_uuid(v, "chunk_ids") for v in raw]
        now = await conn.fetchval("SELECT now()")
        rows = await conn.fetch(_CONFIRM["chunk"], ids, None, None, None, None, None)
        by_id = {row["chunk_id"]: row for row in rows}
        generations = {row["embedder_generation"] for row in rows}
        if len(generations) > 1:
            raise StatementFailed("generation_unavailable", "the chunks span several embedding generations")
        out, mismatch, size = [], 0, 0
        for ordinal, chunk_id in enumerate(ids, start=1):
            row = by_id.get(chunk_id)
            if row is None:
                continue
            text = row["source_text"]
            if _content_hash(text) != row["chunk_content_hash"]:
                mismatch += 1
                continue
            size += len(text.encode())
            out.append({"input_ordinal": ordinal, **{k: _jsonable(v) for k, v in dict(row).items()}})
        if size > BODY_BYTES_PER_CALL:
            raise StatementFailed("resource_limit", f"fetch_chunk_bodies: bodies exceed {BODY_BYTES_PER_CALL} bytes")
        body_bytes[0] += size
        if body_bytes[0] > BODY_BYTES_PER_STATEMENT:
            raise StatementFailed("resource_limit", f"bodies exceed {BODY_BYTES_PER_STATEMENT} bytes per statement")
        generation = next(iter(generations), None)
        invocation = _invocation(r.call.name, len(ids), len(out), dropped_absent=len(ids) - len(rows),
                                 dropped_hash_mismatch=mismatch, generation=generation,
                                 embedder_generation=generation, pg_confirmed_at=now, termination_reason="completed")
        return Outcome(out, semantic=invocation)

    async def _graph(self, conn: asyncpg.Connection, caller: Caller, r: Resolved) -> Outcome:
        return await graph_rows(conn, caller, r, self.graph_budgets)


def _content_hash(text: str) -> str:
    from services.platform.structure import normalized_hash
    return normalized_hash(text)


# --- graph ---------------------------------------------------------------------------------

_DEPTH = {"graph_neighborhood": (2, 4), "graph_path": (4, 6), "graph_citation_path": (6, 6)}
_RESULTS = {"graph_neighborhood": (100, 500), "graph_path": (3, 10), "graph_citation_path": (3, 10)}


class _SameTransaction:
    """A GraphStore whose snapshot is the statement's own transaction."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    @asynccontextmanager
    async def snapshot(self, visibility: Visibility, statement_timeout_ms: int) -> AsyncIterator[PgSnapshot]:
        yield PgSnapshot(self.conn, visibility)


def _int_arg(r: Resolved, name: str, default: int, low: int, high: int) -> tuple[int, bool]:
    value = r.args.get(name)
    if value is None:
        return default, False
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value or value < low:
        raise StatementFailed("invalid_parameter", f"{r.call.name}: {name} must be an integer >= {low}")
    return min(int(value), high), int(value) > high


async def graph_rows(conn: asyncpg.Connection, caller: Caller, r: Resolved, base: Budgets) -> Outcome:
    name = r.call.name
    depth_default, depth_cap = _DEPTH[name]
    depth, depth_capped = _int_arg(r, "max_depth", depth_default, 1, depth_cap)
    result_key = "max_paths" if name == "graph_citation_path" else "max_results"
    results, _ = _int_arg(r, result_key, _RESULTS[name][0], 1, _RESULTS[name][1])
    expansion, _ = _int_arg(r, "expansion_budget", 2000, 1, 2000)
    frontier, _ = _int_arg(r, "frontier_budget", 1000, 1, 1000)
    time_ms, _ = _int_arg(r, "time_budget_ms", 1000, 1, 5000)
    budgets = Budgets(expansion=min(expansion, base.expansion), frontier=min(frontier, base.frontier),
                      time_ms=float(time_ms), statement_timeout_ms=base.statement_timeout_ms)
    service = GraphService(_SameTransaction(conn), budgets=budgets)  # type: ignore[arg-type]
    predicates = tuple(r.args.get("predicates") or ())
    valid_at = _instant(r.args.get("valid_at"), "valid_at")
    believed_at = _instant(r.args.get("believed_at"), "believed_at")
    clocks = Clocks(valid_at, believed_at)
    try:
        if name == "graph_neighborhood":
            start = _uuid(r.args.get("start_entity_id"), "start_entity_id")
            assert start is not None
            result = await service.neighborhood(caller, NeighborhoodQuery(
                start, hops=depth, predicates=predicates, clocks=clocks, limit=results, include_paths=True))
        elif name == "graph_path":
            source, target = _uuid(r.args.get("from_entity_id"), "from_entity_id"), _uuid(
                r.args.get("to_entity_id"), "to_entity_id")
            assert source is not None and target is not None
            result = await service.path(caller, PathQuery(source, target, max_hops=depth, predicates=predicates,
                                                          clocks=clocks))
        else:
            source, target = _uuid(r.args.get("from_doc_id"), "from_doc_id"), _uuid(r.args.get("to_doc_id"),
                                                                                        "to_doc_id")
            assert source is not None and target is not None
            result = await service.citation_path(caller, CitationQuery(source, target, max_hops=depth))
    except TestamentError:
        raise StatementFailed("graph_unavailable", "the live graph is unavailable") from None
    except asyncpg.PostgresError as exc:
        from services.queryspace.adapters import failure
        raise failure(exc) from None
    citation = name == "graph_citation_path"
    reason: str | None = result.truncation.reason if result.truncation.truncated else None
    if depth_capped:
        reason = reason or "depth_budget"
    truncated = reason is not None
    scope = result.scope
    applied_valid = None if citation else (scope.valid_at or scope.evaluated_at)
    applied_believed = None if citation else scope.believed_at
    effective = {"effective_depth": depth, "effective_expansion_budget": budgets.expansion,
                 "effective_frontier_budget": budgets.frontier, "effective_result_budget": results,
                 "effective_time_budget_ms": time_ms}
    rows = []
    for path in result.paths:
        row: dict[str, Any] = {"row_kind": "path", "hops": len(path.edges),
                               ("crossref_ids" if citation else "relation_ids"): [str(e.relation_id)
                                                                                  for e in path.edges],
                               ("document_ids" if citation else "node_ids"): [str(n.entity_id) for n in path.nodes],
                               "truncated": truncated, "truncation_reason": reason,
                               "examined_edges": result.truncation.estimated_total,
                               "returned_paths": len(result.paths), **effective}
        if citation:
            row["evaluated_at"] = result.read_at.isoformat()
        else:
            row["applied_valid_at"] = applied_valid.isoformat() if applied_valid else None
            row["applied_believed_at"] = applied_believed.isoformat() if applied_believed else None
        rows.append(row)
    invocation = {"function": name, "truncated": truncated, "truncation_reason": reason,
                  "examined_edges": result.truncation.estimated_total, "returned_paths": len(result.paths),
                  **effective, "applied_valid_at": applied_valid, "applied_believed_at": applied_believed,
                  "evaluated_at": result.read_at}
    warnings = [f"{name}: graph budget hit ({reason})"] if truncated else []
    return Outcome(rows, graph=invocation, warnings=warnings, truncation_reason=reason)


# --- substitution ----------------------------------------------------------------------------

def _coldefs(fn: PublicFunction) -> str:
    return ", ".join(f'"{c.name}" {c.type}' for c in fn.columns)


def substitute(call: PublicCall, param_index: int) -> None:
    """Replace the call in the tree by ``(SELECT * FROM jsonb_to_recordset($n::jsonb) AS r(cols))``
    under the call's alias (column aliases carry over positionally)."""
    fn = FUNCTIONS[call.name]
    text = f"SELECT * FROM pg_catalog.jsonb_to_recordset(${param_index}::jsonb) AS _r({_coldefs(fn)})"
    # The call's own placeholders leave the text with it; each keeps one typed mention (its
    # cast, else the declared argument type) so the statement still binds every parameter.
    names = [a.split(" ", 1) for a in (*fn.required, *fn.optional)]
    kept = []
    for i, a in enumerate(call.arguments):
        if a.param is not None:
            declared = dict(names).get(a.name or "", None) if a.name else (names[i][1] if i < len(names) else "text")
            kept.append(f"(${a.param}::{a.cast or declared or 'text'} IS NULL OR true)")
    if kept:
        text += " WHERE " + " AND ".join(kept)
    subquery = parse_sql(text)[0].stmt
    alias = call.alias if call.alias is not None else ast.Alias(aliasname=call.name)
    call.replace(ast.RangeSubselect(lateral=False, subquery=subquery, alias=alias))


def payload(rows: list[dict[str, Any]]) -> Any:
    """The rows as a JSON value for the jsonb parameter (the pool's codec encodes it)."""
    return json.loads(json.dumps(rows, default=str))
