"""The graph call from retrieval takes the caller's remaining deadline, not a fixed 5 s."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from testament.graph.v1 import graph_pb2

from services.platform.db import request_deadline
from services.retrieval.graph_client import GrpcGraphExpansion


class _Recorder:
    def __init__(self) -> None:
        self.timeouts: list[float] = []

    async def ExpandEntities(self, request: Any, *, metadata: Any, timeout: float) -> Any:  # noqa: ASYNC109 - grpc's keyword
        self.timeouts.append(timeout)
        return graph_pb2.ExpandEntitiesResponse()


def test_the_graph_call_gets_what_is_left_of_the_callers_deadline() -> None:
    async def run() -> list[float]:
        client = GrpcGraphExpansion("127.0.0.1:1", timeout_s=5.0)
        recorder = _Recorder()
        client._stub = recorder  # type: ignore[assignment]
        await client.expand([], [uuid.uuid4()], 1, None, None)  # no deadline: the graph's budget
        token = request_deadline.set(asyncio.get_running_loop().time() + 1.5)
        try:
            await client.expand([], [uuid.uuid4()], 1, None, None)
        finally:
            request_deadline.reset(token)
        await client.close()
        return recorder.timeouts

    unbounded, bounded = asyncio.run(run())
    assert unbounded == 5.0
    assert 0 < bounded <= 1.5
