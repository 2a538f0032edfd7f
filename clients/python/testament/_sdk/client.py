"""Sync and async clients: one channel, every service's stub, credentials and deadlines.

Unary calls get a default deadline (nothing waits forever) and raise
:class:`~testament.RPCError`. Retries are not automatic: only reads are safe to
repeat, and the caller knows which calls those are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from testament._sdk.errors import RPCError
from testament.common.v1 import deployment_pb2_grpc
from testament.graph.v1 import graph_pb2_grpc
from testament.ingest.v1 import ingest_pb2_grpc
from testament.pipeline.v1 import pipeline_pb2_grpc
from testament.queryspace.v1 import queryspace_pb2_grpc
from testament.retrieval.v1 import retrieval_pb2_grpc

_STUBS: dict[str, Callable[[Any], Any]] = {
    "deployment": deployment_pb2_grpc.DeploymentServiceStub,
    "ingest": ingest_pb2_grpc.IngestServiceStub,
    "pipeline": pipeline_pb2_grpc.PipelineServiceStub,
    "retrieval": retrieval_pb2_grpc.RetrievalServiceStub,
    "graph": graph_pb2_grpc.GraphServiceStub,
    "queryspace": queryspace_pb2_grpc.QuerySpaceServiceStub,
}


class _Bound:
    """A stub whose methods add credentials and a default deadline, and raise RPCError."""

    def __init__(self, stub: Any, metadata: Sequence[tuple[str, str]], timeout: float, aio: bool) -> None:
        self._stub = stub
        self._metadata = tuple(metadata)
        self._timeout = timeout
        self._aio = aio

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._stub, name)
        metadata, timeout = self._metadata, self._timeout

        if self._aio:
            async def call_async(request: Any, *, timeout_s: float | None = None, **kw: Any) -> Any:
                try:
                    return await method(request, metadata=metadata, timeout=timeout_s or timeout, **kw)
                except grpc.RpcError as error:
                    raise RPCError.from_grpc(error) from None

            return call_async

        def call(request: Any, *, timeout_s: float | None = None, **kw: Any) -> Any:
            try:
                return method(request, metadata=metadata, timeout=timeout_s or timeout, **kw)
            except grpc.RpcError as error:
                raise RPCError.from_grpc(error) from None

        return call


class _Base:
    def __init__(self, target: str, *, api_key: str | None, timeout: float, aio: bool) -> None:
        if api_key is not None and (not api_key.strip() or "\n" in api_key):
            raise ValueError("api_key must be a non-empty single line")
        metadata = [("authorization", f"Bearer {api_key}")] if api_key else []
        self.target = target
        self.timeout = timeout
        self._channel: Any = (grpc.aio.insecure_channel(target) if aio else grpc.insecure_channel(target))
        for name, factory in _STUBS.items():
            setattr(self, name, _Bound(factory(self._channel), metadata, timeout, aio))

    deployment: Any
    ingest: Any
    pipeline: Any
    retrieval: Any
    graph: Any
    queryspace: Any


class Client(_Base):
    """Blocking client. ``Client(target, api_key=..., timeout=30.0)``; a context manager."""

    def __init__(self, target: str, *, api_key: str | None = None, timeout: float = 30.0) -> None:
        super().__init__(target, api_key=api_key, timeout=timeout, aio=False)
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Base):
    """asyncio client; ``async with AsyncClient(target) as client: await client.deployment…``."""

    def __init__(self, target: str, *, api_key: str | None = None, timeout: float = 30.0) -> None:
        super().__init__(target, api_key=api_key, timeout=timeout, aio=True)
        self._closed = False

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
