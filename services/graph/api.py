"""GraphService servicer: converts messages, calls the use cases, converts results."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import grpc
from testament.common.v1 import types_pb2
from testament.graph.v1 import graph_pb2, graph_pb2_grpc

from services.graph.app import GraphService
from services.graph.domain import (
    Edge,
    GraphResult,
    Node,
    citation_query,
    clock_problems,
    expand_query,
    neighborhood_query,
    path_query,
)
from services.platform.auth import Caller, require_caller
from services.platform.errors import FieldViolation
from services.platform.replica import fresh_as_of
from services.platform.validation import also_check
from services.platform.wire import optional, timestamp

_PRECISION = {
    "unknown": types_pb2.CLAIM_VALID_PRECISION_UNKNOWN, "instant": types_pb2.CLAIM_VALID_PRECISION_INSTANT,
    "day": types_pb2.CLAIM_VALID_PRECISION_DAY, "month": types_pb2.CLAIM_VALID_PRECISION_MONTH,
    "quarter": types_pb2.CLAIM_VALID_PRECISION_QUARTER, "year": types_pb2.CLAIM_VALID_PRECISION_YEAR,
    "open": types_pb2.CLAIM_VALID_PRECISION_OPEN,
}
_SUPPORT = {"current": types_pb2.FACT_SUPPORT_CURRENT, "withdrawn": types_pb2.FACT_SUPPORT_WITHDRAWN}
_REASON = {
    "result_budget": types_pb2.TRUNCATION_REASON_RESULT_BUDGET,
    "expansion_budget": types_pb2.TRUNCATION_REASON_EXPANSION_BUDGET,
    "frontier_budget": types_pb2.TRUNCATION_REASON_FRONTIER_BUDGET,
    "time_budget": types_pb2.TRUNCATION_REASON_TIME_BUDGET,
}
_NEGATIVE = {
    "unknown_entity": types_pb2.NEGATIVE_KIND_UNKNOWN_ENTITY,
    "known_empty": types_pb2.NEGATIVE_KIND_KNOWN_EMPTY,
    "boundary": types_pb2.NEGATIVE_KIND_BOUNDARY,
}




Redact = Callable[[str], str]


def _node(target: types_pb2.GraphNode, node: Node, redact: Redact) -> None:
    target.entity_id, target.name, target.hops = str(node.entity_id), redact(node.name), node.hops


def _edge(target: types_pb2.GraphEdge, edge: Edge, redact: Redact) -> None:
    target.relation_id, target.subject_id = str(edge.relation_id), str(edge.subject_id)
    target.object_id, target.predicate = str(edge.object_id), edge.predicate
    if edge.fact is not None:
        target.fact = redact(edge.fact)
    target.evidence_count = edge.evidence_count
    for name in ("valid_from", "valid_until", "ingested_at", "invalidated_at"):
        value = getattr(edge, name)
        if value is not None:
            getattr(target, name).CopyFrom(timestamp(value))
    target.valid_precision = _PRECISION.get(edge.valid_precision, types_pb2.CLAIM_VALID_PRECISION_UNKNOWN)
    target.support = _SUPPORT.get(edge.support, types_pb2.FACT_SUPPORT_CURRENT)


def envelope(result: GraphResult, redact: Redact = lambda text: text) -> types_pb2.Envelope:
    """The graph result as an Envelope; every name and label goes through ``redact``."""
    env = types_pb2.Envelope(grain=types_pb2.GRAIN_FACT, dropped_by_hydration=result.dropped_by_hydration)
    scope = result.scope
    if scope.mode == "as_of":
        assert scope.valid_at is not None
        member = env.temporal_scope.as_of
        member.mode = "as_of"
        member.valid_at.CopyFrom(timestamp(scope.valid_at))
    else:
        member = env.temporal_scope.current  # type: ignore[assignment]
        member.mode = "current"
    member.evaluated_at.CopyFrom(timestamp(scope.evaluated_at))
    member.believed_at.CopyFrom(timestamp(scope.believed_at))
    member.identity_regime = types_pb2.IDENTITY_REGIME_CURRENT
    for node in result.nodes:
        _node(env.nodes.add(), node, redact)
    for path in result.paths:
        item = env.paths.add(length=path.length)
        for node in path.nodes:
            _node(item.nodes.add(), node, redact)
        for edge in path.edges:
            _edge(item.edges.add(), edge, redact)
    for edge in result.edges:
        _edge(env.edges.add(), edge, redact)
    env.freshness.pg_live_ts.CopyFrom(timestamp(result.read_at))
    env.freshness.p1_written_inline = True
    t = result.truncation
    env.truncation.truncated, env.truncation.returned = t.truncated, t.returned
    env.truncation.estimated_total, env.truncation.total_is_exact = t.estimated_total, t.total_is_exact
    if t.continuation is not None:
        env.truncation.continuation = t.continuation
    if t.reason is not None:
        env.truncation.reason = _REASON[t.reason]
    if result.negative is not None:
        env.negative.kind = _NEGATIVE[result.negative.kind]
        env.negative.explanation = result.negative.explanation
        if result.negative.workaround is not None:
            env.negative.workaround = result.negative.workaround
    return env


def _clock_problems(request: graph_pb2.NeighborhoodRequest | graph_pb2.PathRequest) -> list[FieldViolation]:
    return clock_problems(optional(request, "valid_at"), optional(request, "believed_at"))


# A 422 lists every bad field at once: the clocks beside the contract's broken rules.
also_check(graph_pb2.NeighborhoodRequest, _clock_problems)
also_check(graph_pb2.PathRequest, _clock_problems)


class GraphServicer(graph_pb2_grpc.GraphServiceServicer):
    def __init__(self, service: GraphService, *,
                 redact: Callable[[str, Caller], str] | None = None) -> None:
        self.service = service
        self._redact = redact

    def _envelope(self, result: GraphResult, caller: Caller) -> types_pb2.Envelope:
        redact = self._redact
        return envelope(result, (lambda text: redact(text, caller)) if redact else (lambda text: text))

    async def Neighborhood(self, request: graph_pb2.NeighborhoodRequest,
                           context: grpc.aio.ServicerContext) -> graph_pb2.NeighborhoodResponse:
        query = neighborhood_query(
            entity_id=request.entity_id, hops=optional(request, "hops"), predicates=list(request.predicates),
            valid_at=optional(request, "valid_at"), believed_at=optional(request, "believed_at"),
            limit=optional(request, "limit"), continuation=optional(request, "continuation"),
            include_paths=optional(request, "include_paths"),
        )
        caller = require_caller()
        with fresh_as_of(query.clocks.believed_at):  # a later belief time than the replica's: the primary
            result = await self.service.neighborhood(caller, query)
        return graph_pb2.NeighborhoodResponse(envelope=self._envelope(result, caller))

    async def Path(self, request: graph_pb2.PathRequest,
                   context: grpc.aio.ServicerContext) -> graph_pb2.PathResponse:
        query = path_query(
            from_entity_id=request.from_entity_id, to_entity_id=request.to_entity_id,
            max_hops=optional(request, "max_hops"), predicates=list(request.predicates),
            valid_at=optional(request, "valid_at"), believed_at=optional(request, "believed_at"),
        )
        caller = require_caller()
        with fresh_as_of(query.clocks.believed_at):
            result = await self.service.path(caller, query)
        return graph_pb2.PathResponse(envelope=self._envelope(result, caller))

    async def CitationPath(self, request: graph_pb2.CitationPathRequest,
                           context: grpc.aio.ServicerContext) -> graph_pb2.CitationPathResponse:
        query = citation_query(from_doc_id=request.from_doc_id, to_doc_id=request.to_doc_id,
                               max_hops=optional(request, "max_hops"))
        caller = require_caller()
        result = await self.service.citation_path(caller, query)
        return graph_pb2.CitationPathResponse(envelope=self._envelope(result, caller))

    async def ExpandEntities(self, request: graph_pb2.ExpandEntitiesRequest,
                             context: grpc.aio.ServicerContext) -> graph_pb2.ExpandEntitiesResponse:
        valid_at = request.valid_at.ToDatetime(tzinfo=dt.UTC) if request.HasField("valid_at") else None
        query = expand_query(anchors=list(request.anchor_entity_ids), hops=request.hops,
                             predicate=optional(request, "predicate"), valid_at=valid_at)
        expansion = await self.service.expand(require_caller(), query)
        reply = graph_pb2.ExpandEntitiesResponse(truncated=expansion.truncated)
        for entity_id, hops in expansion.entities:
            reply.entities.add(entity_id=str(entity_id), hops=hops)
        return reply
