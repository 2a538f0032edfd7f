"""The graph service's expansion, called over gRPC for facts_context anchors."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

from google.protobuf import timestamp_pb2
from testament.graph.v1 import graph_pb2, graph_pb2_grpc

from services.platform import telemetry
from services.platform.channels import service_channel
from services.platform.db import remaining_timeout


class GrpcGraphExpansion:
    """Calls GraphService.ExpandEntities with the caller's credential, trace context and
    remaining deadline (at most ``timeout_s``, the graph's own statement budget)."""

    def __init__(self, address: str, *, timeout_s: float = 5.0) -> None:
        self._channel = service_channel(address)  # round-robin over every graph replica
        self._stub = graph_pb2_grpc.GraphServiceStub(self._channel)
        self._timeout_s = timeout_s

    async def expand(self, caller_metadata: Sequence[tuple[str, str]], anchors: Sequence[uuid.UUID], hops: int,
                     predicate: str | None, valid_at: dt.datetime | None) -> tuple[list[uuid.UUID], bool]:
        request = graph_pb2.ExpandEntitiesRequest(anchor_entity_ids=[str(a) for a in anchors], hops=hops)
        if predicate:
            request.predicate = predicate
        if valid_at is not None:
            stamp = timestamp_pb2.Timestamp()
            stamp.FromDatetime(valid_at)
            request.valid_at.CopyFrom(stamp)
        metadata = [(k, v) for k, v in caller_metadata if k == "authorization"] + telemetry.inject()
        reply = await self._stub.ExpandEntities(request, metadata=metadata,
                                                 timeout=remaining_timeout(self._timeout_s))
        return [uuid.UUID(e.entity_id) for e in reply.entities], reply.truncated

    async def close(self) -> None:
        await self._channel.close()
