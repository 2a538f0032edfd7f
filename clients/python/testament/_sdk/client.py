"""Sync and async clients: one channel, a typed object per service, credentials and deadlines.

``client.<service>.<Rpc>(request)`` is generated from the contract
(:mod:`testament._sdk.services`). Every call has a deadline (``timeout`` by default) and
raises :class:`~testament.RPCError`; unary calls are retried only where the contract's
``idempotency_level`` says a repeat is safe (:mod:`testament._sdk.calls`), honouring the
server's RetryInfo. ``tls=True`` (or a ``grpc.ChannelCredentials``) opens a TLS channel.
"""

from __future__ import annotations

import datetime as dt
import mimetypes
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from testament._sdk import services
from testament._sdk.calls import RetryPolicy
from testament.ingest.v1 import ingest_pb2


def _channel(target: str, tls: bool | grpc.ChannelCredentials, aio: bool) -> Any:
    if tls is False:
        return grpc.aio.insecure_channel(target) if aio else grpc.insecure_channel(target)
    credentials = grpc.ssl_channel_credentials() if tls is True else tls
    return grpc.aio.secure_channel(target, credentials) if aio else grpc.secure_channel(target, credentials)


def _metadata(api_key: str | None) -> list[tuple[str, str]]:
    if api_key is not None and (not api_key.strip() or "\n" in api_key):
        raise ValueError("api_key must be a non-empty single line")
    return [("authorization", f"Bearer {api_key}")] if api_key else []


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


class Client:
    """Blocking client. ``Client(target, api_key=..., timeout=30.0, tls=False)``; a context manager."""

    def __init__(self, target: str, *, api_key: str | None = None, timeout: float = 30.0,
                 tls: bool | grpc.ChannelCredentials = False, retry: RetryPolicy | None = None) -> None:
        metadata, policy = _metadata(api_key), retry or RetryPolicy()
        self.target, self.timeout = target, timeout
        self._channel = _channel(target, tls, aio=False)
        self._closed = False
        self.deployment = services.DeploymentService(self._channel, metadata, timeout, policy)
        self.ingest = services.IngestService(self._channel, metadata, timeout, policy)
        self.pipeline = services.PipelineService(self._channel, metadata, timeout, policy)
        self.retrieval = services.RetrievalService(self._channel, metadata, timeout, policy)
        self.graph = services.GraphService(self._channel, metadata, timeout, policy)
        self.queryspace = services.QuerySpaceService(self._channel, metadata, timeout, policy)

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
        for message in self.ingest.WatchReadiness(request, timeout_s=timeout_s):
            yield message.report

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """asyncio client; ``async with AsyncClient(target) as client: await client.deployment…``."""

    def __init__(self, target: str, *, api_key: str | None = None, timeout: float = 30.0,
                 tls: bool | grpc.ChannelCredentials = False, retry: RetryPolicy | None = None) -> None:
        metadata, policy = _metadata(api_key), retry or RetryPolicy()
        self.target, self.timeout = target, timeout
        self._channel = _channel(target, tls, aio=True)
        self._closed = False
        self.deployment = services.AsyncDeploymentService(self._channel, metadata, timeout, policy)
        self.ingest = services.AsyncIngestService(self._channel, metadata, timeout, policy)
        self.pipeline = services.AsyncPipelineService(self._channel, metadata, timeout, policy)
        self.retrieval = services.AsyncRetrievalService(self._channel, metadata, timeout, policy)
        self.graph = services.AsyncGraphService(self._channel, metadata, timeout, policy)
        self.queryspace = services.AsyncQuerySpaceService(self._channel, metadata, timeout, policy)

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
            if isinstance(source, AsyncIterator):
                async for piece in source:
                    yield ingest_pb2.UploadRequest(chunk=piece)
            else:
                for piece in _chunks(source):
                    yield ingest_pb2.UploadRequest(chunk=piece)

        return await self.ingest.Upload(stream(), timeout_s=timeout_s)

    async def watch_readiness(self, version_ids: Sequence[str], *, pipeline: bool = True, p1: bool = True,
                              live_graph: bool = True, p3: bool = False,
                              timeout_s: float = 1800.0) -> AsyncIterator[ingest_pb2.PipelineReadinessReport]:
        request = _watch_request(version_ids, pipeline, p1, live_graph, p3)
        async for message in self.ingest.WatchReadiness(request, timeout_s=timeout_s):
            yield message.report

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
