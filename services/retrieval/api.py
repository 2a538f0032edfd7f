"""RetrievalService servicer: converts requests, calls the use cases, returns envelopes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import json_format
from testament.common.v1 import types_pb2
from testament.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc

from services.platform.auth import require_caller
from services.platform.errors import FieldViolation, ValidationFailed
from services.platform.wire import optional
from services.retrieval.app import Retrieval, struct
from services.retrieval.domain import OPERATIONS
from services.retrieval.primitives import Primitives

_GRAINS = {"fact": types_pb2.GRAIN_FACT, "evidence": types_pb2.GRAIN_EVIDENCE}
_CONTRACTS = {"envelope": retrieval_pb2.RESULT_CONTRACT_ENVELOPE,
              "context_bundle_v2": retrieval_pb2.RESULT_CONTRACT_CONTEXT_BUNDLE_V2}
_CHANNELS = {retrieval_pb2.SEARCH_CHANNEL_SEMANTIC: "semantic", retrieval_pb2.SEARCH_CHANNEL_BM25: "bm25"}


# Resolve's context ids, counted after duplicates collapse (the contract's comment).
MAX_CONTEXT_IDS = 8


def _forward(context: grpc.aio.ServicerContext) -> list[tuple[str, str]]:
    return [(k, v) for k, v in (context.invocation_metadata() or ()) if k in ("authorization", "traceparent")]


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    def __init__(self, retrieval: Retrieval, primitives: Primitives) -> None:
        self.retrieval = retrieval
        self.primitives = primitives

    async def _caller(self) -> Any:
        return await self.retrieval.audience(require_caller())

    async def ListOperations(self, request: retrieval_pb2.ListOperationsRequest,
                             context: grpc.aio.ServicerContext) -> retrieval_pb2.ListOperationsResponse:
        reply = retrieval_pb2.ListOperationsResponse()
        for op in OPERATIONS:
            item = reply.operations.add(name=op.name, description=op.description,
                                        input_schema=struct(op.input_schema),
                                        result_schema=struct({"type": "object", "title": op.result_contract}),
                                        result_contract=_CONTRACTS[op.result_contract],
                                        answer_intent=op.answer_intent, mutates=False, version=op.version,
                                        implementation_plan_hash=op.implementation_plan_hash)
            if op.output_grain:
                item.output_grain = _GRAINS[op.output_grain]
        return reply

    async def RunOperation(self, request: retrieval_pb2.RunOperationRequest,
                           context: grpc.aio.ServicerContext) -> retrieval_pb2.RunOperationResponse:
        arguments = json_format.MessageToDict(request.arguments) if request.HasField("arguments") else {}
        result = await self.retrieval.run_operation(await self._caller(), request.name, arguments, _forward(context))
        if isinstance(result, types_pb2.ContextBundle):
            return retrieval_pb2.RunOperationResponse(context_bundle=result)
        return retrieval_pb2.RunOperationResponse(envelope=result)

    async def Resolve(self, request: retrieval_pb2.ResolveRequest,
                      context: grpc.aio.ServicerContext) -> retrieval_pb2.ResolveResponse:
        ids = list(dict.fromkeys(uuid.UUID(i) for i in request.context_entity_ids))
        if len(ids) > MAX_CONTEXT_IDS:  # counted once duplicates collapse, so not a field rule
            raise ValidationFailed([FieldViolation(
                "context_entity_ids", f"List should have at most {MAX_CONTEXT_IDS} items after validation, "
                f"not {len(ids)}", "too_long", [str(i) for i in ids],
                {"field_type": "List", "max_length": MAX_CONTEXT_IDS, "actual_length": len(ids)})])
        return retrieval_pb2.ResolveResponse(envelope=await self.retrieval.resolve(await self._caller(), request.name,
                                                                                   ids))

    async def LookupRelations(self, request: retrieval_pb2.LookupRelationsRequest,
                              context: grpc.aio.ServicerContext) -> retrieval_pb2.LookupRelationsResponse:
        env = await self.primitives.lookup_relations(
            await self._caller(),
            subject=uuid.UUID(request.subject_entity_id) if request.HasField("subject_entity_id") else None,
            obj=uuid.UUID(request.object_entity_id) if request.HasField("object_entity_id") else None,
            predicate=optional(request, "predicate"), valid_at=optional(request, "valid_at"),
            k=optional(request, "k", 50))
        return retrieval_pb2.LookupRelationsResponse(envelope=env)

    async def LookupObservations(self, request: retrieval_pb2.LookupObservationsRequest,
                                 context: grpc.aio.ServicerContext) -> retrieval_pb2.LookupObservationsResponse:
        env = await self.primitives.lookup_observations(
            await self._caller(), uuid.UUID(request.entity_id), optional(request, "property_query"),
            optional(request, "k", 10))
        return retrieval_pb2.LookupObservationsResponse(envelope=env)

    async def HydrateRelation(self, request: retrieval_pb2.HydrateRelationRequest,
                              context: grpc.aio.ServicerContext) -> retrieval_pb2.HydrateRelationResponse:
        env = await self.primitives.hydrate(await self._caller(), uuid.UUID(request.relation_id))
        return retrieval_pb2.HydrateRelationResponse(envelope=env)

    async def TranscriptRelation(self, request: retrieval_pb2.TranscriptRelationRequest,
                                 context: grpc.aio.ServicerContext) -> retrieval_pb2.TranscriptRelationResponse:
        env = await self.primitives.transcript(await self._caller(), uuid.UUID(request.relation_id))
        return retrieval_pb2.TranscriptRelationResponse(envelope=env)

    def _search_args(self, request: Any) -> tuple[str, int, str]:
        channel = _CHANNELS.get(request.channel, "semantic") if request.HasField("channel") else "semantic"
        return request.query, optional(request, "k", 10), channel

    async def SearchClaims(self, request: retrieval_pb2.SearchClaimsRequest,
                           context: grpc.aio.ServicerContext) -> retrieval_pb2.SearchClaimsResponse:
        query, k, channel = self._search_args(request)
        env = await self.primitives.search(await self._caller(), "claim", query, k, channel)
        return retrieval_pb2.SearchClaimsResponse(envelope=env)

    async def SearchChunks(self, request: retrieval_pb2.SearchChunksRequest,
                           context: grpc.aio.ServicerContext) -> retrieval_pb2.SearchChunksResponse:
        query, k, channel = self._search_args(request)
        env = await self.primitives.search(await self._caller(), "chunk", query, k, channel)
        return retrieval_pb2.SearchChunksResponse(envelope=env)

    async def AdjacentChunks(self, request: retrieval_pb2.AdjacentChunksRequest,
                             context: grpc.aio.ServicerContext) -> retrieval_pb2.AdjacentChunksResponse:
        window = optional(request, "window", 1)
        env = await self.primitives.adjacent(await self._caller(), uuid.UUID(request.chunk_id), window,
                                             optional(request, "turn_id"))
        return retrieval_pb2.AdjacentChunksResponse(envelope=env)

    async def WatchChanges(self, request: retrieval_pb2.WatchChangesRequest,
                           context: grpc.aio.ServicerContext) -> AsyncIterator[retrieval_pb2.WatchChangesResponse]:
        async for message in self.primitives.watch_changes(await self._caller(), optional(request, "cursor"),
                                                           list(request.kinds)):
            yield message
