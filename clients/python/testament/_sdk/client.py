"""Sync and async clients: one channel, every service's stub, credentials and deadlines.

Unary calls get a default deadline (nothing waits forever) and raise
:class:`~testament.RPCError`. Retries are not automatic: only reads are safe to
repeat, and the caller knows which calls those are.
"""

from __future__ import annotations

import datetime as dt
import mimetypes
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from testament._sdk.errors import RPCError
from testament.common.v1 import deployment_pb2_grpc
from testament.graph.v1 import graph_pb2_grpc
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc
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


CHUNK = 1 << 20
_MODES = {"snapshot": ingest_pb2.VERSIONING_MODE_SNAPSHOT, "living": ingest_pb2.VERSIONING_MODE_LIVING}


def _guess_mime(filename: str) -> str:
    if filename.lower().endswith((".md", ".markdown")):
        return "text/markdown"
    return mimetypes.guess_type(filename)[0] or "application/octet-stream"


def upload_options(filename: str, *, mime: str | None = None, title: str | None = None,
                   source_kind: str | None = None, source_ref: str | None = None,
                   source_modified_at: dt.datetime | str | None = None, versioning_mode: str | None = None,
                   source_version_ref: str | None = None, acl: Sequence[str] = ()) -> ingest_pb2.UploadOptions:
    """The first message of an upload. A datetime must be timezone-aware (the service refuses
    anything but UTC); the MIME type is guessed from the file name when not given."""
    options = ingest_pb2.UploadOptions(filename=filename, mime=mime or _guess_mime(filename), acl=list(acl))
    for name, value in (("title", title), ("source_kind", source_kind), ("source_ref", source_ref),
                        ("source_version_ref", source_version_ref)):
        if value is not None:
            setattr(options, name, value)
    if source_modified_at is not None:
        if isinstance(source_modified_at, dt.datetime):
            if source_modified_at.tzinfo is None:
                raise ValueError("source_modified_at must be timezone-aware UTC")
            source_modified_at = source_modified_at.isoformat()
        options.source_modified_at = source_modified_at
    if versioning_mode is not None:
        options.versioning_mode = _MODES[versioning_mode]
    return options


def _chunks(source: bytes | str | Path | Iterable[bytes]) -> Iterator[bytes]:
    if isinstance(source, bytes):
        for start in range(0, len(source), CHUNK):
            yield source[start:start + CHUNK]
    elif isinstance(source, str | Path):
        with open(source, "rb") as handle:
            while piece := handle.read(CHUNK):
                yield piece
    else:
        yield from source


def _watch_request(version_ids: Sequence[str], pipeline: bool, p1: bool, live_graph: bool,
                   p3: bool) -> ingest_pb2.WatchReadinessRequest:
    require = ingest_pb2.ReadinessRequirements(pipeline=pipeline, p1=p1, live_graph=live_graph, p3=p3)
    return ingest_pb2.WatchReadinessRequest(version_ids=list(version_ids), require=require)


class Client(_Base):
    """Blocking client. ``Client(target, api_key=..., timeout=30.0)``; a context manager."""

    def __init__(self, target: str, *, api_key: str | None = None, timeout: float = 30.0) -> None:
        super().__init__(target, api_key=api_key, timeout=timeout, aio=False)
        self._closed = False

    def upload(self, source: bytes | str | Path | Iterable[bytes], *, filename: str | None = None,
               timeout_s: float = 3600.0, **options: Any) -> ingest_pb2.UploadResponse:
        """Stream a document (bytes, a path or an iterable of byte chunks) to IngestService.Upload.
        The bytes are never held whole; re-sending the same bytes is safe (``created`` is False)."""
        if filename is None:
            if not isinstance(source, str | Path):
                raise ValueError("filename is required unless source is a path")
            filename = Path(source).name
        first = ingest_pb2.UploadRequest(options=upload_options(filename, **options))

        def stream() -> Iterator[ingest_pb2.UploadRequest]:
            yield first
            for piece in _chunks(source):
                yield ingest_pb2.UploadRequest(chunk=piece)

        return self.ingest.Upload(stream(), timeout_s=timeout_s)

    def watch_readiness(self, version_ids: Sequence[str], *, pipeline: bool = True, p1: bool = True,
                        live_graph: bool = True, p3: bool = False,
                        timeout_s: float = 1800.0) -> Iterator[ingest_pb2.PipelineReadinessReport]:
        """Each change of the readiness report, until ready or a stage is dead-lettered."""
        request = _watch_request(version_ids, pipeline, p1, live_graph, p3)
        try:
            for message in self.ingest._stub.WatchReadiness(request, metadata=self.ingest._metadata,
                                                             timeout=timeout_s):
                yield message.report
        except grpc.RpcError as error:
            raise RPCError.from_grpc(error) from None

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

    async def upload(self, source: bytes | str | Path | Iterable[bytes] | AsyncIterator[bytes], *,
                     filename: str | None = None, timeout_s: float = 3600.0,
                     **options: Any) -> ingest_pb2.UploadResponse:
        """As :meth:`Client.upload`, also accepting an async iterator of chunks."""
        if filename is None:
            if not isinstance(source, str | Path):
                raise ValueError("filename is required unless source is a path")
            filename = Path(source).name
        first = ingest_pb2.UploadRequest(options=upload_options(filename, **options))

        async def stream() -> AsyncIterator[ingest_pb2.UploadRequest]:
            yield first
            if hasattr(source, "__aiter__"):
                async for piece in source:  # type: ignore[union-attr]
                    yield ingest_pb2.UploadRequest(chunk=piece)
            else:
                for piece in _chunks(source):  # type: ignore[arg-type]
                    yield ingest_pb2.UploadRequest(chunk=piece)

        return await self.ingest.Upload(stream(), timeout_s=timeout_s)

    async def watch_readiness(self, version_ids: Sequence[str], *, pipeline: bool = True, p1: bool = True,
                              live_graph: bool = True, p3: bool = False,
                              timeout_s: float = 1800.0) -> AsyncIterator[ingest_pb2.PipelineReadinessReport]:
        request = _watch_request(version_ids, pipeline, p1, live_graph, p3)
        try:
            async for message in self.ingest._stub.WatchReadiness(request, metadata=self.ingest._metadata,
                                                                   timeout=timeout_s):
                yield message.report
        except grpc.RpcError as error:
            raise RPCError.from_grpc(error) from None

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
